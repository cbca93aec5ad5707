"""The attention sites of ``nn.MultiheadAttention`` modules: one eval-mode
call per module recomputed with its per-head softmax weights returned
(:func:`capture_attention_sites`), the projected values and ``out_proj``
(the layout of :func:`dropmc.audit.audit_attention_captures`)."""

from __future__ import annotations

from typing import List, Sequence

import numpy as _np

__all__ = ["capture_attention_sites"]


def _value_projection(module):
    """``(W_v, b_v)`` of an ``nn.MultiheadAttention``."""
    e = module.embed_dim
    if module._qkv_same_embed_dim:
        w = module.in_proj_weight[2 * e:]
    else:
        w = module.v_proj_weight
    b = None if module.in_proj_bias is None else module.in_proj_bias[2 * e:]
    return w, b


def _attention_capture(name, module, args, kwargs) -> dict:
    """One call's softmax rows (recomputed with ``need_weights=True,
    average_attn_weights=False``: after the masks, before the dropout, which
    eval mode skips), the projected values per head and ``out_proj``."""
    import inspect

    import torch
    import torch.nn.functional as F

    bound = inspect.signature(module.forward).bind(*args, **kwargs)
    bound.apply_defaults()
    call = dict(bound.arguments, need_weights=True, average_attn_weights=False)
    out, weights = module(**call)
    value = call["value"]
    if value.dim() == 2:  # unbatched: (S, E) and (H, L, S)
        value, weights, out = value.unsqueeze(0), weights.unsqueeze(0), out.unsqueeze(0)
    elif not module.batch_first:
        value, out = value.transpose(0, 1), out.transpose(0, 1)
    w_v, b_v = _value_projection(module)
    v = F.linear(value, w_v, b_v)
    batch, keys = v.shape[0], v.shape[1]
    heads, head_dim = module.num_heads, module.head_dim
    v = v.reshape(batch, keys, heads, head_dim).permute(0, 2, 1, 3)
    queries = weights.shape[2]
    if weights.shape != (batch, heads, queries, keys):
        raise ValueError(f"attention site {name!r}: softmax weights of shape {tuple(weights.shape)}, "
                         f"expected (batch, heads, queries, keys) = {(batch, heads, queries, keys)}")
    if not torch.isfinite(weights).all():
        raise ValueError(f"attention site {name!r}: a softmax row is not finite "
                         "(a query whose every key is masked)")
    ow = module.out_proj.weight
    ob = module.out_proj.bias

    def flat(t):
        return _np.ascontiguousarray(t.detach().to(torch.float64).cpu().numpy().ravel())

    return {
        "name": name or type(module).__name__,  # the model itself is the attention
        "p": float(module.dropout),
        "shape": (batch, heads, queries, keys, head_dim, int(ow.shape[0])),
        "weights": flat(weights),
        "values": flat(v),
        "out_weight": flat(ow),
        "out_bias": flat(ob) if ob is not None else _np.zeros(ow.shape[0]),
        "eval_output": flat(out).reshape(batch * queries, -1),
    }


def capture_attention_sites(model, inputs, names: Sequence[str], kwargs=None) -> List[dict]:
    """Runs ``model(*inputs)`` once in eval mode with a forward pre-hook on
    each named ``nn.MultiheadAttention``, which recomputes the call with its
    weights returned per head. A named module the forward does not reach is
    left out; one it calls twice is a ValueError. Returns one dict per site
    (the layout of :func:`audit_attention_captures`)."""
    import torch
    import torch.nn as nn

    modules = dict(model.named_modules())
    for name in names:
        m = modules.get(name)
        if not isinstance(m, nn.MultiheadAttention):
            raise ValueError(f"attention site {name!r} is not an nn.MultiheadAttention of the model")
        if m.bias_k is not None or m.add_zero_attn:
            raise ValueError(f"attention site {name!r}: add_bias_kv / add_zero_attn are not supported "
                             "(their extra keys have no captured values)")
    seen: dict = {}
    busy: set = set()

    def record(name):
        def hook(module, args, kwargs):
            if name in busy:  # the hook's own recomputation
                return None
            busy.add(name)
            try:  # grad stays enabled: no_grad would open the fused fast path
                seen.setdefault(name, []).append(_attention_capture(name, module, args, kwargs))
            finally:
                busy.discard(name)
            return None

        return hook

    handles = [modules[n].register_forward_pre_hook(record(n), with_kwargs=True) for n in names]
    was_training = model.training
    model.eval()
    try:
        # Grad enabled keeps the encoder layers and the attention off their
        # fused fast paths, which skip the hooks.
        with torch.enable_grad():
            model(*(inputs if isinstance(inputs, tuple) else (inputs,)), **(kwargs or {}))
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    out = []
    for name in names:
        calls = seen.get(name, [])
        if len(calls) > 1:
            raise ValueError(f"attention site {name!r} ran {len(calls)} times in one forward; "
                             "a site needs it exactly once")
        out += calls
    return out
