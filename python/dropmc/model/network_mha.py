"""The network ledger's rule for ``F.multi_head_attention_forward`` (what
``nn.MultiheadAttention`` calls in training): the same steps as its body,
each by a rule of :mod:`dropmc.model.network_rules` — the input projections (a
linear map: ``s @ W²``), the heads' attention (:func:`dropmc.model.network_rules.
sdpa_variance`: the scores' noise through the softmax, the attention
dropout's injection, the value product) and the output projection.

Covered: one packed or three separate projection weights, ``batch_first``
or not (the module transposes before the call), a boolean or additive
``attn_mask`` (2-d or per head) and ``key_padding_mask`` (``True`` =
ignored, as the module takes them: the opposite of SDPA's boolean mask).
Not covered (None: the ledger lists the call): ``bias_k``/``bias_v``,
``add_zero_attn``, static keys or values.
"""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F

from . import network_rules as _rules

__all__ = ["mha_variance"]

_SIG = inspect.signature(F.multi_head_attention_forward)


def _project(x, s, w, b):
    """``(value, variance)`` of ``x W^T + b``."""
    return F.linear(x, w, b), (None if s is None else F.linear(s, w.square()))


def _heads(t, n, h):
    """``(L, N, E)`` → ``(N, H, L, E/H)``."""
    return None if t is None else t.reshape(t.shape[0], n * h, -1).transpose(0, 1).reshape(n, h, t.shape[0], -1)


def _mask(a, n, h, length, keys, dtype):
    """The additive mask ``(N, H, L, S)`` (or None) of ``attn_mask`` and
    ``key_padding_mask``, ``True`` meaning ignored."""
    out = None
    for m, shape in ((a["attn_mask"], None), (a["key_padding_mask"], (n, 1, 1, keys))):
        if m is None:
            continue
        add = torch.zeros(m.shape, dtype=dtype).masked_fill(m, float("-inf")) if m.dtype == torch.bool else m.to(dtype)
        if shape is not None:
            add = add.reshape(shape)
        elif add.dim() == 3:
            add = add.reshape(n, h, length, keys)
        out = add if out is None else out + add
    return out


def mha_variance(op: _rules.Op, s_of):
    """The variance of the attention output (the first of the call's
    outputs), or None when the call is of a form not covered (module docs)."""
    b = _SIG.bind(*op.args, **op.kwargs)
    b.apply_defaults()
    a = b.arguments
    if a["bias_k"] is not None or a["bias_v"] is not None or a["add_zero_attn"] \
            or a["static_k"] is not None or a["static_v"] is not None:
        return None
    q_in, k_in, v_in, h = a["query"], a["key"], a["value"], int(a["num_heads"])
    if q_in.dim() != 3:
        return None
    length, n, e = q_in.shape
    if a["use_separate_proj_weight"]:
        weights = [a["q_proj_weight"], a["k_proj_weight"], a["v_proj_weight"]]
    else:
        weights = list(a["in_proj_weight"].split(e))
    biases = [None] * 3 if a["in_proj_bias"] is None else list(a["in_proj_bias"].split(e))
    projected = [_project(t, s_of(t), w, bb) for t, w, bb in zip((q_in, k_in, v_in), weights, biases)]
    (q, sq), (k, sk), (v, sv) = [(_heads(t, n, h), _heads(s, n, h)) for t, s in projected]
    mask = _mask(a, n, h, length, k.shape[-2], q.dtype)
    p = float(a["dropout_p"]) if a["training"] else 0.0
    inner = _rules.Op(F.scaled_dot_product_attention, "scaled_dot_product_attention", (q, k, v),
                      {"attn_mask": mask, "dropout_p": p, "is_causal": bool(a["is_causal"]) and mask is None}, None)
    variances = {id(q): sq, id(k): sk, id(v): sv}
    s_att = _rules.sdpa_variance(inner, lambda t: variances.get(id(t)))
    if s_att is None:
        return None
    s_att = s_att.permute(2, 0, 1, 3).reshape(length, n, e)  # (N, H, L, dh) → (L, N, E)
    return F.linear(s_att, a["out_proj_weight"].square())
