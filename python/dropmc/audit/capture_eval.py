"""Capture discovered sites on the user's inputs in eval mode.

``capture_traced(model, args, kwargs, found, sites, attention)`` runs the
model once in eval mode under :class:`dropmc.model.discovery.Trace`, matching
each site's dropout and norm calls by (owner, call index) to the
train-mode discovery forward, and returns the engine's capture dicts
(layout of :func:`dropmc.audit.audit_captures` and
:func:`dropmc.audit.audit_attention_captures`).

Norm sites: ``v`` is the dropout call's input (its eval output), ``z`` the
norm call's input, ``h = z − v`` (0 for a plain site); ``γ, β, ε`` come from
the norm's :class:`~dropmc.model.norms.NormSpec`. When the forward was given an
``attention_mask`` of the tokens' shape, padded tokens (mask 0) are left
out.

Attention sites (eager and SDPA): the audited output is the attention's
context ``Σ_s b_s v_s`` per head, concatenated over heads (the output
projection after it is not part of the call; ``out_weight`` is the
identity). Eager: the softmax rows are the dropout call's input and the
values the second factor of the ``matmul`` its output feeds. SDPA: the rows
are rebuilt from the call's query, key, mask, causal flag and scale in
float64 (grouped-query keys and values repeated per query head), and the
rebuilt context must reproduce the call's own output within
``REBUILD_ROUNDINGS`` (:mod:`dropmc.model.attention_product`) or the site is refused.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as _np
import torch

from ..model.attention_product import REBUILD_ROUNDINGS, NotReadable, sdpa_weights
from ..model.discovery import AttentionSite, Discovery, Site, Trace, run_neutral, site_terms
from ..model.masks import mask_groups
from ..model.paths import replay

__all__ = ["capture_traced", "in_eval", "REBUILD_ROUNDINGS", "Unreadable", "token_mask_for", "failure_row",
           "PATHS_DIFFER"]

def _f64(t) -> _np.ndarray:
    return t.detach().to(torch.float64).cpu().numpy()


class Unreadable(ValueError):
    """A site the capture cannot read (listed with this reason, never
    aborting the audit). Errors of the inputs (NaN/inf activations, a
    ``token_mask`` of the wrong shape, an empty batch) stay ValueErrors."""


def _finite(site: str, what: str, t: torch.Tensor) -> None:
    if t.numel() == 0:
        raise ValueError(f"site {site!r}: the {what} is empty (an empty batch: no token to audit)")
    if torch.isfinite(t.sum()):  # NaN and ±inf carry through a sum: a finite sum, finite entries
        return
    if not torch.isfinite(t).all():  # the sum overflowed, or an entry is not finite
        bad = "NaN" if torch.isnan(t).any() else "inf"
        raise ValueError(f"site {site!r}: the captured {what} holds {bad} (check the inputs)")


def token_mask_for(site_norm_module: str, kwargs: dict, token_mask=None):
    """The padding mask of a site's sequence: ``token_mask`` when given (a
    tensor, or a dict from module-name prefix to tensor, the longest
    matching prefix winning), else, when the forward has ``decoder_*``
    inputs (an encoder-decoder), its ``decoder_attention_mask`` for a
    module under a ``decoder`` (none: every decoder token is real), and its
    ``attention_mask`` for the rest. Never chosen by shape: a mask whose shape is not the site's
    tokens' is refused by :func:`_token_keep`."""
    if isinstance(token_mask, torch.Tensor):
        return token_mask
    if isinstance(token_mask, dict):
        best = max((k for k in token_mask if site_norm_module.startswith(k)), key=len, default=None)
        return token_mask[best] if best is not None else None
    encoder_decoder = any(k.startswith("decoder_") for k in kwargs)
    if encoder_decoder and any(p.startswith("decoder") for p in site_norm_module.split(".")):
        return kwargs.get("decoder_attention_mask")
    return kwargs.get("attention_mask")


def _token_keep(site: str, mask, v: torch.Tensor, tape, explicit: bool, axis: int = -1) -> Optional[_np.ndarray]:
    """Which of the norm input's tokens are real: the mask (one entry per
    token of the dropout's input, or of its ``(batch · length, d)``
    flattening) carried along the site's tape to the norm's rows (its
    ``axis``); a row with a padded entry is left out."""
    if not isinstance(mask, torch.Tensor):
        return None
    if v.dim() == 2 and mask.dim() == 2 and v.shape[0] == mask.numel():
        mask = mask.reshape(-1)  # tokens flattened to (batch · length, d) before the dropout (OPT)
    if tuple(mask.shape) != tuple(v.shape[:-1]):
        if explicit:
            raise ValueError(f"site {site!r}: token_mask of shape {tuple(mask.shape)}, but the site's "
                             f"tokens are {tuple(v.shape[:-1])}")
        return None  # not this site's sequence
    spread = (mask != 0).to(torch.float64)[..., None].expand(v.shape)
    rows = replay(tape, spread).movedim(axis, -1)  # a row of the norm is kept when all its entries are
    return (rows != 0).all(-1).reshape(-1).cpu().numpy()


class MissingCall(Unreadable):
    """The capture forward made no call the train-mode discovery forward
    made (a dropout or norm the model runs only in training)."""


#: The reason of a site whose norm input is, in the eval forward, not made
#: from its dropout as in the train-mode one (an eval-only branch).
PATHS_DIFFER = "eval and train paths differ"


def _term(trace: Trace, site: Site):
    """The capture trace's tape from the site's dropout to its norm input."""
    for call, _, origin, _, _ in trace.norm_calls:
        if call == site.norm:
            for d, form, tape, _ in site_terms(origin, trace.nested):
                if d == site.dropout:
                    return form, tape
            raise Unreadable(f"{PATHS_DIFFER}: in the {trace.mode} forward {site.norm!r}'s input is not "
                             f"{site.dropout!r}'s output (nor h + it) as in the train-mode one")
    raise MissingCall(f"the {trace.mode} forward made no call {site.norm!r} (the train-mode one did)")


def _degenerate(spec, rows: _np.ndarray) -> _np.ndarray:
    """Which rows no closed form reads: constant ones (σ = 0) for a
    LayerNorm, all-zero ones for an RMSNorm (a zero-initialised CLS token,
    a padded token)."""
    if spec.kind == "layer":
        return (rows == rows[:, :1]).all(1)
    return (rows == 0).all(1)


def _norm_capture(site: Site, found: Discovery, trace: Trace, kwargs, token_mask,
                  corrected: bool = False) -> Tuple[dict, int, int, int]:
    rec = trace.recorded
    v, z = rec.get(("input", site.dropout)), rec.get(("input", site.norm))
    if v is None:
        raise MissingCall(f"the {trace.mode} forward made no call {site.dropout!r} (the train-mode one did)")
    form, tape = _term(trace, site)
    _finite(site.name, f"dropout input of {site.dropout!r}", v)
    _finite(site.name, f"norm input of {site.norm!r}", z)
    va = replay(tape, v.to(torch.float64))
    if va.shape != z.shape:
        raise Unreadable(f"site {site.name!r}: dropout output {tuple(va.shape)} (after its reshapes) and "
                         f"norm input {tuple(z.shape)} differ in shape")
    spec = found.norms[site.norm]
    d = spec.d
    mask = token_mask_for(found.norm_modules.get(site.norm, ""), kwargs, token_mask)
    keep = _token_keep(site.name, mask, v, tape, token_mask is not None, spec.axis)
    vv, zz = _f64(va.movedim(spec.axis, -1)).reshape(-1, d), _f64(z.movedim(spec.axis, -1)).reshape(-1, d)
    total = vv.shape[0]
    constant = _degenerate(spec, zz) | _degenerate(spec, vv)
    if keep is not None:
        constant &= keep
    dropped = int(constant.sum())
    if dropped:
        keep = ~constant if keep is None else keep & ~constant
    if keep is not None:
        vv, zz = vv[keep], zz[keep]
    if vv.shape[0] == 0 and dropped:
        raise Unreadable(f"site {site.name!r}: every token is constant or padding (σ = 0: no closed form)")
    if vv.shape[0] == 0:
        raise ValueError(f"site {site.name!r}: every token is padding (an empty batch)")
    plain = site.form in ("plain", "compound")
    if plain and not _np.allclose(vv, zz, rtol=1e-6, atol=0):
        raise Unreadable(f"site {site.name!r}: traced as plain, but the eval-mode norm input is not "
                         "the dropout's output")
    capture = {
        "name": site.name, "form": "plain" if plain else "bypass", "p": float(site.p), "d": d,
        "v": _np.ascontiguousarray((zz if plain else vv).ravel()),
        "h": _np.ascontiguousarray((zz - vv).ravel()) if not plain else _np.zeros(vv.size),
        "norm": spec.kind, "gamma": _np.ascontiguousarray(spec.gamma, dtype=_np.float64),
        "beta": _np.ascontiguousarray(spec.beta, dtype=_np.float64), "eps": float(spec.eps),
    }
    if corrected:  # issue 41: the norm's recorded output is what a corrected model outputs
        last = site.as_tuple()[-1]
        out = _f64(rec[("output", last)].movedim(found.norms[last].axis, -1)).reshape(-1, d)
        capture.update(eval_output=_np.ascontiguousarray(out[keep] if keep is not None else out).ravel(), corrected=True)
    groups = mask_groups(site.mask, d)
    if groups is not None:
        capture["mask_groups"] = groups
    if site.form == "compound":
        out1, in2 = rec.get(("output", site.norm)), rec.get(("input", site.norm2))
        if out1 is None or in2 is None or not torch.equal(out1, in2):
            raise Unreadable(f"site {site.name!r}: in eval mode {site.norm!r}'s output is not "
                             f"{site.norm2!r}'s input")
        spec2 = found.norms[site.norm2]
        capture.update(form="compound", gamma2=_np.ascontiguousarray(spec2.gamma, dtype=_np.float64),
                       beta2=_np.ascontiguousarray(spec2.beta, dtype=_np.float64), eps2=float(spec2.eps))
    return capture, int(vv.shape[0]), total, dropped


def _sdpa_rows(site: AttentionSite, a: dict) -> Tuple[torch.Tensor, torch.Tensor]:
    """The softmax rows ``(B, H, L, S)`` and the values ``(B, H, S, J)`` of
    one SDPA call (:func:`dropmc.model.attention_product.sdpa_weights`)."""
    try:
        return sdpa_weights(site.call, a)
    except NotReadable as e:
        raise Unreadable(str(e)) from None


def _attention_capture(site: AttentionSite, rec) -> dict:
    if site.kind == "eager":
        w, used = rec.get(("input", site.call)), rec.get(("values", site.call))
        if w is None or used is None:
            how = f"its output met the values through {site.use}" if site.use else \
                "its output never met the values in a matmul/bmm"
            raise Unreadable(f"attention weights not readable: {how}")
        v, tape = used
        _finite(site.call, "softmax rows", w)
        _finite(site.call, "values", v)
        w, v = replay(tape, w.detach().to(torch.float64)), v.detach().to(torch.float64)
        if w.dim() == 3 and v.dim() == 3:  # bmm after a view: (batch·heads, queries, keys)
            w, v = w.unsqueeze(1), v.unsqueeze(1)
        if v.dim() == 4 and v.shape[1] != w.shape[1] and w.shape[1] % v.shape[1] == 0:
            v = v.repeat_interleave(w.shape[1] // v.shape[1], dim=1)
    else:
        a = rec.get(("sdpa", site.call))
        if a is None:
            raise Unreadable("the eval-mode forward made no such call")
        for n in ("query", "key", "value"):
            _finite(site.call, f"SDPA {n}", a[n])
        w, v = _sdpa_rows(site, a)
    if w.dim() != 4 or v.dim() != 4 or w.shape[:2] != v.shape[:2] or w.shape[3] != v.shape[2]:
        raise Unreadable(f"attention site {site.call!r}: softmax rows {tuple(w.shape)} and values "
                         f"{tuple(v.shape)} are not (batch, heads, queries, keys) and (batch, heads, keys, "
                         "head_dim)")
    b, h, l, s = w.shape
    j = v.shape[3]
    e = h * j
    context = (w @ v).permute(0, 2, 1, 3).reshape(b * l, e)
    return {
        "name": site.call, "p": float(site.p), "shape": (b, h, l, s, j, e),
        "weights": _np.ascontiguousarray(_f64(w).ravel()),
        "values": _np.ascontiguousarray(_f64(v).ravel()),
        "out_weight": _np.ascontiguousarray(_np.eye(e).ravel()),
        "out_bias": _np.zeros(e),
        "eval_output": _np.ascontiguousarray(_f64(context)),
    }


def in_eval(sites: Sequence[Site]) -> bool:
    """Whether the capture forward of ``sites`` is an eval-mode one: yes
    unless a site's mask is drawn with ``torch.rand`` (the model draws it
    only in training: then the neutral train-mode forward)."""
    return not any(s.mask is not None and s.mask.source == "rand mask" for s in sites)


def capture_traced(model, args: tuple, kwargs: dict, found: Discovery, sites: Sequence[Site],
                   attention: Sequence[AttentionSite], token_mask=None, inner=None
                   ) -> Tuple[List[dict], List[dict], Dict[str, int], Dict[str, str]]:
    """``(captures, attention_captures, tokens, unreadable)`` of ``sites``
    and the eager/SDPA ``attention`` sites from one capture forward
    (module docs): in eval mode, or, when a site is a mask drawn with
    ``torch.rand`` (the model draws it only in training), the neutral
    train-mode forward of :mod:`dropmc.model.trace`. ``tokens`` has ``audited``
    and ``total`` (the largest over the norm sites); ``unreadable`` maps an
    attention call the capture cannot read to why (listed, not audited).
    ``inner``: a ``TorchFunctionMode`` for an eval forward that runs inside
    the capture forward (:meth:`dropmc.model.trace.Trace.run`) when that is in
    eval mode (:func:`in_eval`); a ValueError otherwise."""
    keep = set()
    for s in sites:
        keep.update(c for c in s.as_tuple())
    keep.update(a.call for a in attention)
    norm_modules = {found.norm_modules[c] for s in sites for c in s.as_tuple()[1:]}
    training = not in_eval(sites)
    if training and inner is not None:
        raise ValueError("the capture forward runs in train mode (a rand-mask site): no eval-mode tracer inside")
    trace = _capture_forward(model, args, kwargs, keep, norm_modules, training, inner)
    corrected = getattr(model, "_dropmc_correction", None)  # issue 41: dropmc.correct's record
    got, unreadable, retry = {}, {}, []
    for s in sites:
        fixed = corrected is not None and s.as_tuple() in corrected.sites
        try:
            got[s.name] = _norm_capture(s, found, trace, kwargs, token_mask, fixed)
        except MissingCall as e:
            (unreadable.__setitem__(s.name, str(e)) if training else retry.append(s))
        except Unreadable as e:  # one site's error is that site's listed row, never the audit's end
            unreadable[s.name] = str(e)
    late = [a for a in attention if a.kind == "eager" and ("input", a.call) not in trace.recorded and not training]
    again = None
    if retry or late:  # dropouts the eval forward does not call: their eval values from the neutral train forward
        again = _capture_forward(model, args, kwargs, {c for s in retry for c in s.as_tuple()} | {a.call for a in late},
                                 {found.norm_modules[c] for s in retry for c in s.as_tuple()[1:]}, True, None)
    for s in retry:
        fixed = corrected is not None and s.as_tuple() in corrected.sites
        try:
            got[s.name] = _norm_capture(s, found, again, kwargs, token_mask, fixed)
        except Unreadable as e:
            unreadable[s.name] = str(e)
    captures, tokens = [], {"audited": 0, "total": 0}
    for s in sites:
        if s.name in got:
            c, n, total, constant = got[s.name]
            captures.append(c)
            tokens = {**tokens, "audited": max(tokens["audited"], n), "total": max(tokens["total"], total)}
            if constant:
                tokens["constant"] = max(tokens.get("constant", 0), constant)
    attention_caps = []
    for a in attention:
        try:
            attention_caps.append(_attention_capture(a, (again if a in late else trace).recorded))
        except Unreadable as e:
            unreadable[a.call] = str(e)
    return captures, attention_caps, tokens, unreadable


def _capture_forward(model, args, kwargs, keep, norm_modules, training: bool, inner) -> Trace:
    """One neutral forward recording the ``keep`` calls (module docs)."""
    trace = Trace(model, keep)
    trace.mode = "train-mode" if training else "eval-mode"
    run_neutral(model, trace, args, kwargs, training=training, norm_modules=norm_modules, inner=inner)
    return trace


def failure_row(site: Site, reason: str) -> dict:
    """The listed row of a norm site the capture could not read (its
    ``reason`` from :func:`capture_traced`'s ``unreadable``)."""
    kind = PATHS_DIFFER if reason.startswith(PATHS_DIFFER) else "not readable"
    return {"name": site.name, "form": site.form, "p": site.p, "reason": reason, "kind": kind}
