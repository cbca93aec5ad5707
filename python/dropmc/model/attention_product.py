"""The value product of attention, whatever op computes it: the rows
``a`` (``(B, H, L, S)``: batch, heads, queries, keys), the values ``v``
(``(B, H, S, J)``) and the context ``o = a v`` (``(B, H, L, J)``) of a
``matmul``/``bmm``, a two-operand ``einsum`` or an SDPA call.

Why one form serves them all: the product is linear in the dropped rows
``b = m ⊙ a / q`` (``o_l = Σ_s b_ls v_s`` per batch row and head), whatever
the op's name or its operands' layout. An ``einsum`` names its axes by
letters; :func:`einsum_layout` reads, from the equation alone, which letter
of the rows' operand is the contracted key axis (in both operands, not in
the output), the query axis (rows and output only), the value width
(values and output only) and the batch axes (all three), and refuses any
other equation (a diagonal, an ellipsis, an axis summed out of one operand
alone). The batch axes in the output's order are ``(B, H…)`` — the first is
the batch, the rest the heads — or, with one batch axis, ``N`` as a
``bmm``'s ``B·H`` is (:func:`split_heads` splits it where the heads' width
is known). The layout is a guess checked downstream on the forward's own
tensors: the linear paths' reproduce check (:mod:`dropmc.model.linear_path`)
and the attention family's shape checks refuse a wrong one.

SDPA computes the rows inside one call: :func:`sdpa_weights` rebuilds them
in float64 from the call's query, key, mask, causal flag and scale, and
refuses them unless the rebuilt context reproduces the call's own output
within :data:`REBUILD_ROUNDINGS` roundings.
"""

from __future__ import annotations

import inspect
import math
from typing import Callable, Optional, Tuple

import torch

__all__ = ["einsum_layout", "canonical", "canonical_steps", "split_heads", "sdpa_weights", "REBUILD_ROUNDINGS",
           "NotReadable", "SDPA_SIGNATURE", "product_tensors"]

#: ``F.scaled_dot_product_attention``'s arguments, bound by name.
SDPA_SIGNATURE = inspect.signature(lambda query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                   scale=None, enable_gqa=False: None)

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


class NotReadable(ValueError):
    """Attention rows that cannot be read (the caller lists the site)."""


def _subscripts(equation: str, operands: int) -> Optional[Tuple[list, str]]:
    """``([inputs], output)`` of an einsum equation with ``operands``
    inputs, each a string of distinct letters; None for an ellipsis, a
    repeated letter or another number of inputs. An implicit output is
    the letters seen once, in alphabetical order (torch's rule)."""
    eq = equation.replace(" ", "")
    if "." in eq:
        return None
    lhs, arrow, out = eq.partition("->")
    ins = lhs.split(",")
    if len(ins) != operands:
        return None
    if not arrow:
        letters = "".join(ins)
        out = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    if any(len(set(s)) != len(s) or not s.isalpha() for s in ins + [out] if s) or not out:
        return None
    return ins, out


def einsum_layout(equation: str, rows_at: int) -> Optional[Tuple[tuple, tuple, tuple, int]]:
    """``(rows_perm, values_perm, out_perm, batch_axes)`` of a two-operand
    ``einsum`` whose operand ``rows_at`` (0 or 1) holds attention rows
    (module docs): the permutations that bring the rows to ``(batch…, L,
    S)``, the values to ``(batch…, S, J)`` and the output to ``(batch…, L,
    J)``, the batch axes in the output's order; None when the equation is
    not such a product."""
    parsed = _subscripts(equation, 2)
    if parsed is None or rows_at not in (0, 1):
        return None
    (x, y), out = parsed
    a, v = (x, y) if rows_at == 0 else (y, x)
    sa, sv, so = set(a), set(v), set(out)
    keys, queries, width = (sa & sv) - so, sa - sv, sv - sa
    batch = [c for c in out if c in sa and c in sv]
    if len(keys) != 1 or len(queries) != 1 or len(width) != 1 or so != set(batch) | queries | width:
        return None
    (s,), (l,), (j,) = keys, queries, width
    return (tuple(a.index(c) for c in batch + [l, s]), tuple(v.index(c) for c in batch + [s, j]),
            tuple(out.index(c) for c in batch + [l, j]), len(batch))


def _target(shape, batch_axes: int) -> tuple:
    """``(B, H, X, Y)`` (two batch axes or more: the first the batch, the
    rest the heads) or ``(N, X, Y)`` (one or none) of a permuted shape."""
    lead, tail = tuple(shape[:batch_axes]), tuple(shape[batch_axes:])
    if batch_axes >= 2:
        return (lead[0], math.prod(lead[1:])) + tail
    return (math.prod(lead),) + tail


def canonical(t: torch.Tensor, perm: tuple, batch_axes: int) -> torch.Tensor:
    """``t`` permuted by ``perm`` and its batch axes joined (:func:`_target`)."""
    p = t.permute(*perm)
    return p.reshape(_target(p.shape, batch_axes))


def canonical_steps(shape, perm: tuple, batch_axes: int) -> tuple:
    """:func:`canonical` as tape steps (:func:`dropmc.model.paths.replay`) on a
    tensor of ``shape``."""
    permuted = tuple(shape[i] for i in perm)
    return ((torch.Tensor.permute, (None, *perm), {}, 0),
            (torch.Tensor.reshape, (None, _target(permuted, batch_axes)), {}, 0))


def split_heads(rows: torch.Tensor, values: torch.Tensor, out: torch.Tensor, width: int):
    """Rows ``(N, L, S)``, values ``(N, S, J)`` and context ``(N, L, J)``
    of a product over ``N = B·H`` (a ``bmm`` after a view) as ``(B, H, …)``,
    ``H = width / J`` with ``width`` the heads' joined width (the output
    projection's input); 4-D ones as they are; None when they do not split."""
    if rows.dim() == 4 and values.dim() == 4 and out.dim() == 4:
        return rows, values, out
    if rows.dim() != 3 or values.dim() != 3 or out.dim() != 3:
        return None
    n, j = rows.shape[0], values.shape[-1]
    if j == 0 or width % j or n % (width // j):
        return None
    heads = width // j
    return tuple(t.reshape(n // heads, heads, *t.shape[1:]) for t in (rows, values, out))


def sdpa_weights(call: str, a: dict) -> Tuple[torch.Tensor, torch.Tensor]:
    """The softmax rows ``(B, H, L, S)`` and the values ``(B, H, S, J)`` of
    one SDPA call (``a``: its bound arguments and ``output``), rebuilt in
    float64 and checked against its output (module docs)."""
    q, k, v, out = (a[n].detach().to(torch.float64) for n in ("query", "key", "value", "output"))
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise NotReadable(f"attention site {call!r}: SDPA query of shape {tuple(q.shape)}, "
                          "expected (batch, heads, queries, head_dim)")
    h, hk = q.shape[1], k.shape[1]
    if hk != h:  # grouped-query attention: query head i reads kv head i // (h / hk)
        if h % hk:
            raise NotReadable(f"attention site {call!r}: {h} query heads over {hk} key heads")
        k, v = k.repeat_interleave(h // hk, dim=1), v.repeat_interleave(h // hk, dim=1)
    scale = a["scale"] if a["scale"] is not None else 1.0 / math.sqrt(q.shape[-1])
    # Σ_j |q_j k_j| = (|q| |k|ᵀ)_ls: the logits' magnitude without a (B, H, L, S, E) product
    logits, magnitude = (q @ k.transpose(-1, -2)) * scale, (q.abs() @ k.abs().transpose(-1, -2)) * abs(scale)
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
        raise NotReadable(f"attention site {call!r}: a softmax row is not finite "
                          "(a query whose every key is masked)")
    rebuilt = weights @ v
    u = torch.finfo(a["output"].dtype).eps / 2
    lmax = magnitude.masked_fill(weights == 0, 0).amax(-1, keepdim=True)
    bound = (v.shape[-1] * lmax + 2 * S + REBUILD_ROUNDINGS) * u * (weights @ v.abs())
    if rebuilt.shape != out.shape:
        raise NotReadable(f"attention site {call!r}: the rebuilt context {tuple(rebuilt.shape)} is not the "
                          f"SDPA output's shape {tuple(out.shape)}")
    excess = ((rebuilt - out).abs() - bound).max().item()
    if excess > 0:
        raise NotReadable(f"attention site {call!r}: the softmax rows rebuilt from the SDPA call's "
                          "query, key, mask, causal flag and scale do not reproduce its output (by "
                          f"{excess:.3g} beyond rounding): its mask or scale is not read as SDPA reads it")
    return weights, v


def product_tensors(product: dict, dropped: Optional[torch.Tensor], width: int,
                    same: Callable[[torch.Tensor, torch.Tensor], bool]):
    """``(rows, values, context)`` of one recorded attention product
    (:mod:`dropmc.model.linear_path`'s nodes: ``matmul`` with ``x``, ``v``;
    ``einsum`` with ``eq``, ``operands``, ``rows_at``; ``sdpa`` with its
    bound ``args``; each with its ``out``) as ``(B, H, L, S)``, ``(B, H, S,
    J)``, ``(B, H, L, J)``, ``width`` the heads' joined width; None when
    they cannot be read: the rows the product reads are not ``dropped``
    (the dropout's input, equal by ``same`` entry for entry: in eval the
    dropout is the identity), an equation that is no attention product,
    SDPA rows that do not reproduce its output."""
    if product["op"] == "sdpa":
        try:
            rows, values = sdpa_weights(product["call"], product["args"])
        except NotReadable:
            return None
        return rows, values, product["out"]
    if product["op"] == "matmul":
        read, rows, values, out = product["x"], product["x"], product["v"], product["out"]
    else:
        k = product["rows_at"]
        layout = einsum_layout(product["eq"], k)
        if layout is None:
            return None
        rows_perm, values_perm, out_perm, batch = layout
        read = product["operands"][k]
        rows = canonical(read, rows_perm, batch)
        values = canonical(product["operands"][1 - k], values_perm, batch)
        out = canonical(product["out"], out_perm, batch)
    if dropped is None or read.numel() != dropped.numel() or not same(read.reshape(-1), dropped.reshape(-1)):
        return None
    return split_heads(rows, values, out, width)
