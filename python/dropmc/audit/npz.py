"""The ``.npz`` layout of captured sites (docs/audit.md): what
``Audit.save`` writes and ``dropmc audit --activations`` reads."""

from __future__ import annotations

from typing import List, Sequence

import numpy as _np

__all__ = ["save_captures", "load", "load_attention"]

_NPZ_VERSION = 2


def save_captures(path: str, captures: List[dict], attention_captures: Sequence[dict] = ()) -> None:
    """Writes the captures as ``.npz``: ``version``, ``names`` (strings),
    and per site ``i``: ``site{i}_form`` ('plain'/'bypass'),
    ``site{i}_norm`` ('layer'/'rms'), ``site{i}_p``, ``site{i}_eps``
    (scalars), ``site{i}_v``, ``site{i}_h`` (``tokens × d`` float64),
    ``site{i}_gamma``, ``site{i}_beta`` (``d`` float64); a compound site
    (form 'compound') also LN2's ``site{i}_gamma2``, ``site{i}_beta2``
    (``d`` float64) and ``site{i}_eps2``; a mask-product site whose mask
    is shared over normalized channels ``site{i}_mask_groups`` (``d``
    int64). ``attention_count`` and per
    attention site ``i``: ``attention{i}_name``, ``attention{i}_p``,
    ``attention{i}_weights`` (``B × H × L × S``), ``attention{i}_values``
    (``B × H × S × J``), ``attention{i}_out_weight`` (``E × H·J``),
    ``attention{i}_out_bias`` (``E``). Layout version 2 (1 had no compound
    or attention sites)."""
    arrays: dict = {"version": _np.array(_NPZ_VERSION, dtype=_np.int64),
                    "count": _np.array(len(captures), dtype=_np.int64),
                    "attention_count": _np.array(len(attention_captures), dtype=_np.int64)}
    for i, c in enumerate(attention_captures):
        b, h, l, s, j, e = c["shape"]
        arrays[f"attention{i}_name"] = _np.frombuffer(c["name"].encode(), dtype=_np.uint8)
        arrays[f"attention{i}_p"] = _np.array(c["p"], dtype=_np.float64)
        arrays[f"attention{i}_weights"] = c["weights"].reshape(b, h, l, s).astype(_np.float64)
        arrays[f"attention{i}_values"] = c["values"].reshape(b, h, s, j).astype(_np.float64)
        arrays[f"attention{i}_out_weight"] = c["out_weight"].reshape(e, h * j).astype(_np.float64)
        arrays[f"attention{i}_out_bias"] = c["out_bias"].astype(_np.float64)
    for i, c in enumerate(captures):
        d = c["d"]
        arrays[f"site{i}_name"] = _np.frombuffer(c["name"].encode(), dtype=_np.uint8)
        arrays[f"site{i}_form"] = _np.frombuffer(c["form"].encode(), dtype=_np.uint8)
        arrays[f"site{i}_norm"] = _np.frombuffer(c["norm"].encode(), dtype=_np.uint8)
        arrays[f"site{i}_p"] = _np.array(c["p"], dtype=_np.float64)
        arrays[f"site{i}_eps"] = _np.array(c["eps"], dtype=_np.float64)
        arrays[f"site{i}_v"] = c["v"].reshape(-1, d).astype(_np.float64)
        arrays[f"site{i}_h"] = c["h"].reshape(-1, d).astype(_np.float64)
        arrays[f"site{i}_gamma"] = c["gamma"].astype(_np.float64)
        arrays[f"site{i}_beta"] = c["beta"].astype(_np.float64)
        if c.get("mask_groups") is not None:
            arrays[f"site{i}_mask_groups"] = _np.asarray(c["mask_groups"], dtype=_np.int64)
        if c["form"] == "compound":
            arrays[f"site{i}_gamma2"] = c["gamma2"].astype(_np.float64)
            arrays[f"site{i}_beta2"] = c["beta2"].astype(_np.float64)
            arrays[f"site{i}_eps2"] = _np.array(c["eps2"], dtype=_np.float64)
    _np.savez(path, **arrays)


def load_attention(path: str) -> List[dict]:
    """The attention captures of an ``.npz`` written by :func:`save_captures`
    (none in a version-1 file)."""
    with _np.load(path) as z:
        if int(z["version"]) < 2:
            return []
        out = []
        for i in range(int(z["attention_count"])):
            w, v = z[f"attention{i}_weights"], z[f"attention{i}_values"]
            ow = z[f"attention{i}_out_weight"]
            out.append({
                "name": bytes(z[f"attention{i}_name"]).decode(),
                "p": float(z[f"attention{i}_p"]),
                "shape": (*w.shape, int(v.shape[3]), int(ow.shape[0])),
                "weights": _np.ascontiguousarray(w.ravel()),
                "values": _np.ascontiguousarray(v.ravel()),
                "out_weight": _np.ascontiguousarray(ow.ravel()),
                "out_bias": _np.ascontiguousarray(z[f"attention{i}_out_bias"]),
            })
        return out


def load(path: str) -> List[dict]:
    """The norm-site captures of an ``.npz`` written by :func:`save_captures`
    (:func:`load_attention` reads its attention sites)."""
    with _np.load(path) as z:
        version = int(z["version"])
        if version != _NPZ_VERSION:
            raise ValueError(f"{path}: layout version {version}; this dropmc reads version {_NPZ_VERSION}"
                             + (" (an older dropmc's capture: re-save it with Audit.save)"
                                if version < _NPZ_VERSION else ""))
        out = []
        for i in range(int(z["count"])):
            v = z[f"site{i}_v"]
            c = {
                "name": bytes(z[f"site{i}_name"]).decode(),
                "form": bytes(z[f"site{i}_form"]).decode(),
                "norm": bytes(z[f"site{i}_norm"]).decode(),
                "p": float(z[f"site{i}_p"]), "eps": float(z[f"site{i}_eps"]),
                "d": int(v.shape[1]),
                "v": _np.ascontiguousarray(v.ravel()),
                "h": _np.ascontiguousarray(z[f"site{i}_h"].ravel()),
                "gamma": z[f"site{i}_gamma"], "beta": z[f"site{i}_beta"],
            }
            if f"site{i}_mask_groups" in z:
                c["mask_groups"] = z[f"site{i}_mask_groups"]
            if c["form"] == "compound":
                c.update(gamma2=z[f"site{i}_gamma2"], beta2=z[f"site{i}_beta2"],
                         eps2=float(z[f"site{i}_eps2"]))
            out.append(c)
        return out
