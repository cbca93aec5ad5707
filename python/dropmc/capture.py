"""Capture discovered sites on the user's inputs in eval mode.

``capture_traced(model, args, kwargs, found, sites, attention)`` runs the
model once in eval mode under :class:`dropmc.discovery.Trace`, matching
each site's dropout and norm calls by (owner, call index) to the
train-mode discovery forward, and returns the engine's capture dicts
(layout of :func:`dropmc.audit.audit_captures` and
:func:`dropmc.audit.audit_attention_captures`).

Norm sites: ``v`` is the dropout call's input (its eval output), ``z`` the
norm call's input, ``h = z − v`` (0 for a plain site); ``γ, β, ε`` come from
the norm's :class:`~dropmc.norms.NormSpec`. When the forward was given an
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
``REBUILD_ROUNDINGS`` (below) or the site is refused.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as _np
import torch

from .discovery import AttentionSite, Discovery, Site, Trace

__all__ = ["capture_traced", "REBUILD_ROUNDINGS"]

#: Rounding allowance of the SDPA rebuild check, in units of the call's
#: unit roundoff u. The model's context is ``Σ_s a_s v_s`` in its dtype:
#: each logit ``scale q·k`` is a J-term dot product (error ``γ_J`` relative
#: to ``scale Σ|q_j k_j|``), which the exponential turns into a relative
#: error of the weight; the softmax's normalisation is an S-term sum
#: (``γ_S``) and the context an S-term dot product (``γ_S`` relative to
#: ``Σ a |v|``). So ``|Δo| ≤ (J·L_max + 2S + REBUILD_ROUNDINGS) u Σ_s a_s
#: |v_s|`` with ``L_max`` the largest ``scale Σ_j |q_j k_j|`` of the row;
#: ``REBUILD_ROUNDINGS = 16`` covers the exponential, the division and the
#: casts. A wrong mask or scale moves whole weights, far above it.
REBUILD_ROUNDINGS = 16


def _f64(t) -> _np.ndarray:
    return t.detach().to(torch.float64).cpu().numpy()


def _token_keep(kwargs, lead_shape) -> Optional[_np.ndarray]:
    mask = kwargs.get("attention_mask")
    if isinstance(mask, torch.Tensor) and tuple(mask.shape) == tuple(lead_shape):
        return mask.reshape(-1).cpu().numpy() != 0
    return None


def _norm_capture(site: Site, found: Discovery, rec, kwargs) -> Tuple[dict, int, int]:
    v, z = rec.get(("input", site.dropout)), rec.get(("input", site.norm))
    for call, t in ((site.dropout, v), (site.norm, z)):
        if t is None:
            raise ValueError(f"site {site.name!r}: the eval-mode forward made no call {call!r} (the "
                             "train-mode one did): the model calls it only in training")
    if v.shape != z.shape:
        raise ValueError(f"site {site.name!r}: dropout output {tuple(v.shape)} and norm input "
                         f"{tuple(z.shape)} differ in shape")
    d = int(v.shape[-1])
    keep = _token_keep(kwargs, v.shape[:-1])
    vv, zz = _f64(v).reshape(-1, d), _f64(z).reshape(-1, d)
    total = vv.shape[0]
    if keep is not None:
        vv, zz = vv[keep], zz[keep]
    spec = found.norms[site.norm]
    plain = site.form in ("plain", "compound")
    if plain and not _np.array_equal(vv, zz):
        raise ValueError(f"site {site.name!r}: traced as plain, but the eval-mode norm input is not "
                         "the dropout's output")
    capture = {
        "name": site.name, "form": "plain" if plain else "bypass", "p": float(site.p), "d": d,
        "v": _np.ascontiguousarray(vv.ravel()),
        "h": _np.ascontiguousarray((zz - vv).ravel()) if not plain else _np.zeros(vv.size),
        "norm": spec.kind, "gamma": _np.ascontiguousarray(spec.gamma, dtype=_np.float64),
        "beta": _np.ascontiguousarray(spec.beta, dtype=_np.float64), "eps": float(spec.eps),
    }
    if site.form == "compound":
        out1, in2 = rec.get(("output", site.norm)), rec.get(("input", site.norm2))
        if out1 is None or in2 is None or not torch.equal(out1, in2):
            raise ValueError(f"site {site.name!r}: in eval mode {site.norm!r}'s output is not "
                             f"{site.norm2!r}'s input")
        spec2 = found.norms[site.norm2]
        capture.update(form="compound", gamma2=_np.ascontiguousarray(spec2.gamma, dtype=_np.float64),
                       beta2=_np.ascontiguousarray(spec2.beta, dtype=_np.float64), eps2=float(spec2.eps))
    return capture, int(vv.shape[0]), total


def _corrected_output(capture: dict, out, kwargs) -> None:
    """A site ``dropmc.correct`` corrected: the norm's recorded eval output
    (what the model outputs, not the norm recomputed from the captured
    inputs) as ``eval_output`` (tokens × d, padded tokens left out as for
    ``v``), and ``corrected`` set, so the audit's eval column is the
    corrected output."""
    d = capture["d"]
    o = _f64(out).reshape(-1, d)
    keep = _token_keep(kwargs, out.shape[:-1])
    capture["eval_output"] = _np.ascontiguousarray(o[keep] if keep is not None else o)
    capture["corrected"] = True


def _sdpa_rows(site: AttentionSite, a: dict) -> Tuple[torch.Tensor, torch.Tensor]:
    """The softmax rows ``(B, H, L, S)`` and the values ``(B, H, S, J)`` of
    one SDPA call, rebuilt in float64 and checked against its output."""
    q, k, v, out = (a[n].detach().to(torch.float64) for n in ("query", "key", "value", "output"))
    if q.dim() != 4:
        raise ValueError(f"attention site {site.call!r}: SDPA query of shape {tuple(q.shape)}, "
                         "expected (batch, heads, queries, head_dim)")
    h, hk = q.shape[1], k.shape[1]
    if hk != h:  # grouped-query attention: query head i reads kv head i // (h / hk)
        if h % hk:
            raise ValueError(f"attention site {site.call!r}: {h} query heads over {hk} key heads")
        k, v = k.repeat_interleave(h // hk, dim=1), v.repeat_interleave(h // hk, dim=1)
    scale = a["scale"] if a["scale"] is not None else 1.0 / math.sqrt(q.shape[-1])
    terms = q.unsqueeze(-2) * k.unsqueeze(-3) * scale  # (B, H, L, S, E)
    logits, magnitude = terms.sum(-1), terms.abs().sum(-1)
    del terms
    L, S = logits.shape[-2], logits.shape[-1]
    allowed = torch.ones(L, S, dtype=torch.bool)
    if a["is_causal"]:
        allowed = torch.tril(allowed)
    logits = logits.masked_fill(~allowed, float("-inf"))
    mask = a["attn_mask"]
    if mask is not None:
        if mask.dtype == torch.bool:
            logits = logits.masked_fill(~mask, float("-inf"))
        else:
            logits = logits + mask.to(torch.float64)
    weights = torch.softmax(logits, dim=-1)
    if not torch.isfinite(weights).all():
        raise ValueError(f"attention site {site.call!r}: a softmax row is not finite "
                         "(a query whose every key is masked)")
    rebuilt = weights @ v
    u = torch.finfo(a["output"].dtype).eps / 2
    lmax = magnitude.masked_fill(weights == 0, 0).amax(-1, keepdim=True)
    bound = (v.shape[-1] * lmax + 2 * S + REBUILD_ROUNDINGS) * u * (weights @ v.abs())
    excess = ((rebuilt - out).abs() - bound).max().item()
    if excess > 0:
        raise ValueError(f"attention site {site.call!r}: the softmax rows rebuilt from the SDPA call's "
                         "query, key, mask, causal flag and scale do not reproduce its output (by "
                         f"{excess:.3g} beyond rounding): its mask or scale is not read as SDPA reads it")
    return weights, v


def _attention_capture(site: AttentionSite, rec) -> dict:
    if site.kind == "eager":
        w, v = rec.get(("input", site.call)), rec.get(("values", site.call))
        if w is None or v is None:
            raise ValueError(f"attention site {site.call!r}: the eval-mode forward did not apply its "
                             "softmax to the values through this dropout call")
        w, v = w.detach().to(torch.float64), v.detach().to(torch.float64)
        if v.dim() == 4 and v.shape[1] != w.shape[1] and w.shape[1] % v.shape[1] == 0:
            v = v.repeat_interleave(w.shape[1] // v.shape[1], dim=1)
    else:
        a = rec.get(("sdpa", site.call))
        if a is None:
            raise ValueError(f"attention site {site.call!r}: the eval-mode forward made no such call")
        w, v = _sdpa_rows(site, a)
    if w.dim() != 4 or v.dim() != 4 or w.shape[:2] != v.shape[:2] or w.shape[3] != v.shape[2]:
        raise ValueError(f"attention site {site.call!r}: softmax rows {tuple(w.shape)} and values "
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


def capture_traced(model, args: tuple, kwargs: dict, found: Discovery, sites: Sequence[Site],
                   attention: Sequence[AttentionSite]) -> Tuple[List[dict], List[dict], Dict[str, int]]:
    """``(captures, attention_captures, tokens)`` of ``sites`` and the
    eager/SDPA ``attention`` sites from one eval-mode forward (module
    docs); ``tokens`` has ``audited`` and ``total`` (the largest over the
    norm sites; they differ when padded tokens were left out)."""
    keep = set()
    for s in sites:
        keep.update(c for c in s.as_tuple())
    keep.update(a.call for a in attention)
    norm_modules = {found.norm_modules[c] for s in sites for c in s.as_tuple()[1:]}
    trace = Trace(model, keep)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            trace.run(args, kwargs, norm_modules=norm_modules)
    finally:
        model.train(was_training)
    rec = trace.recorded
    captures, tokens = [], {"audited": 0, "total": 0}
    corrected = getattr(model, "_dropmc_correction", None)  # issue 41: dropmc.correct's record
    for s in sites:
        c, n, total = _norm_capture(s, found, rec, kwargs)
        if corrected is not None and s.as_tuple() in corrected.sites:
            _corrected_output(c, rec[("output", s.as_tuple()[-1])], kwargs)
        captures.append(c)
        tokens = {"audited": max(tokens["audited"], n), "total": max(tokens["total"], total)}
    return captures, [_attention_capture(a, rec) for a in attention], tokens
