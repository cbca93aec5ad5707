"""The per-op rules of the network noise ledger (:mod:`dropmc.model.network_ledger`):
how the per-coordinate variance ``s`` of a tensor's dropout noise moves
through one torch op, at first order, coordinates treated as uncorrelated
(a diagonal ledger).

Each rule takes ``(op, s_of)`` — ``op`` the call (:class:`Op`: ``func``,
``name``, ``args``, ``kwargs``, ``out``), ``s_of(t)`` a tensor's noise
variance or None when it carries none — and returns the output's variance
(a tensor of ``out``'s shape, a list for an op with several outputs), or
None when it cannot say (the ledger then lists the op as not covered).
Step by step, with ``a, b`` the eval values, ``e_a, e_b`` their noise
(zero mean, variances ``s_a, s_b``, independent of each other):

* ``a ± α b``: ``e_a ± α e_b`` → ``s_a + α² s_b`` (independent
  injections add: the residual stream's accumulation).
* ``a · b``: ``(a + e_a)(b + e_b) − ab = b e_a + a e_b + e_a e_b`` →
  ``s_a b² + s_b a²`` at first order (``a · a``: ``2 a e_a`` → ``4 a² s_a``);
  by a constant ``c``: ``c² s``.
* ``a / b``: ``e_a / b − a e_b / b²`` → ``s_a / b² + s_b a² / b⁴``.
* a matrix product ``Σ_j a_ij b_jk`` (linear, matmul, bmm, addmm, einsum,
  conv): each term's first-order noise is ``b_jk e_a,ij + a_ij e_b,jk``,
  uncorrelated over ``j`` → ``s_a @ b² + a² @ s_b``; ``W`` noise-free
  leaves ``s @ W²`` (a convolution: ``conv(s, W²)``).
* a reduction ``Σ_j x_j`` (sum) → ``Σ_j s_j``; a mean over ``n`` → ``Σ_j
  s_j / n²``.
* layout ops (views, reshape, permute, slices, cat, stack, expand, casts,
  index, ``where``, ``masked_fill``): the same op on ``s`` (a filled value
  carries no noise).
* an elementwise ``φ``: ``φ(x + e) − φ(x) = φ'(x) e + O(e²)`` →
  ``φ'(x)² s``, ``φ'`` by autograd on the eval input (any elementwise op:
  GELU, ReLU, SiLU, tanh, exp, pow, rsqrt …).
* GLU ``a ⊙ σ(b)`` (the input's halves): ``σ(b)² s_a + a² σ'(b)² s_b``
  (:func:`_glu`); ops that read only their argument's shape (``new_ones``,
  ``zeros_like`` …): no noise.
* softmax ``y = softmax(x)``: Jacobian ``J_ij = y_i (δ_ij − y_j)``, and the
  diagonal of ``J diag(s) Jᵀ`` is ``Σ_j J_ij² s_j = y_i² (s_i (1 − 2 y_i) +
  Σ_j y_j² s_j)``; log-softmax: ``s_i (1 − 2 y_i) + Σ_j y_j² s_j``.
* LayerNorm ``γ (x − μ)/σ + β``: at first order the noise of the output is
  ``(γ/σ)`` times the centred noise ``e_k − ē`` (the move of ``σ`` is
  along ``x̂``, one direction of ``d``: left out), whose variance is
  ``s_k (1 − 2/d) + Σ_j s_j / d²`` → ``(γ/σ)² (s_k (1 − 2/d) + Σ s / d²)``.
  RMSNorm ``γ x / r``: ``(γ/r)² s`` (its written-out form — ``pow``,
  ``mean``, ``rsqrt``, ``mul`` — composes from the rules above to the same
  leading order).
* BatchNorm in eval: a per-channel affine map → ``(w / √(rv + ε))² s``.
* a dropout at rate ``p`` (``q = 1 − p``) on ``x = v + e``: ``(m/q)(v + e)``,
  ``E (m/q)² = 1/q`` → ``(1/q)(v² + s) − v² = (p/q) v² + s/q``.
* SDPA ``softmax(q kᵀ c + mask) v`` with attention dropout ``p``: the
  scores' noise ``c² (s_q @ k²ᵀ + q² @ s_kᵀ)``, through the softmax rule
  to ``s_A``; the dropout on the probabilities as above, ``(p/q) A² +
  s_A/q``; the value product ``(·) @ v² + A² @ s_v``.

The rules table :data:`RULES` maps an op's ``__name__`` to its rule; a
test plants a fault by replacing an entry.
"""

from __future__ import annotations

import inspect
import math
from typing import Any, Callable, Dict, Optional

import torch
from torch.utils._pytree import tree_map

__all__ = ["Op", "RULES", "dropout_variance", "sdpa_variance", "INJECTING"]


class Op:
    """One torch call the ledger saw: ``func``, its ``name``, ``args``,
    ``kwargs`` (an in-place op's first argument as it was before the op)
    and ``out``."""

    def __init__(self, func, name: str, args, kwargs, out) -> None:
        self.func, self.name, self.args, self.kwargs, self.out = func, name, args, kwargs, out

    def arg(self, i: int, key: str, default=None):
        if len(self.args) > i:
            return self.args[i]
        return self.kwargs.get(key, default)


SOf = Callable[[Any], Optional[torch.Tensor]]


def _zeros_or(s_of: SOf, t):
    s = s_of(t)
    return torch.zeros_like(t) if s is None else s


def _bcast(s, out):
    return torch.broadcast_to(s, out.shape) if s.shape != out.shape else s


def _tensor(x) -> bool:
    return isinstance(x, torch.Tensor)


# -- sums and products


def _add(op: Op, s_of: SOf):
    a, b = op.arg(0, "input"), op.arg(1, "other")
    alpha = op.kwargs.get("alpha", op.args[2] if len(op.args) > 2 and not _tensor(op.args[2]) else 1)
    terms = []
    for t, k in ((a, 1.0), (b, float(alpha))):
        s = s_of(t) if _tensor(t) else None
        if s is not None:
            terms.append(_bcast(s * (k * k) if k != 1.0 else s, op.out))
    return sum(terms[1:], terms[0]) if terms else None


def _mul(op: Op, s_of: SOf):
    a, b = op.arg(0, "input"), op.arg(1, "other")
    if not (_tensor(a) and _tensor(b)):
        t, c = (a, b) if _tensor(a) else (b, a)
        return _bcast(s_of(t) * (float(c) ** 2), op.out)
    sa, sb = s_of(a), s_of(b)
    if a is b:
        return _bcast(4 * a.square() * sa, op.out)
    out = 0
    if sa is not None:
        out = out + sa * b.square()
    if sb is not None:
        out = out + sb * a.square()
    return _bcast(out, op.out)


def _div(op: Op, s_of: SOf):
    a, b = op.arg(0, "input"), op.arg(1, "other")
    if not _tensor(b):
        return _bcast(s_of(a) / (float(b) ** 2), op.out)
    sa, sb = (s_of(a) if _tensor(a) else None), s_of(b)
    if a is b:
        return None  # x / x: no noise, but say so rather than guess
    out = 0
    b2 = b.square()
    if sa is not None:
        out = out + sa / b2
    if sb is not None:
        out = out + sb * (a.square() if _tensor(a) else float(a) ** 2) / b2.square()
    return _bcast(out, op.out)


def _addcmul(op: Op, s_of: SOf):
    x, t1, t2 = op.args[0], op.args[1], op.args[2]
    value = float(op.kwargs.get("value", 1.0))
    out = _zeros_or(s_of, x)
    s1, s2 = s_of(t1), s_of(t2)
    if s1 is not None:
        out = out + value ** 2 * s1 * t2.square()
    if s2 is not None:
        out = out + value ** 2 * s2 * t1.square()
    return _bcast(out, op.out)


def _product(fn, a, b, s_of: SOf):
    """``s_a ∘ b² + a² ∘ s_b`` for a bilinear ``fn`` (a matrix product)."""
    sa, sb = s_of(a), s_of(b)
    out = None
    if sa is not None:
        out = fn(sa, b.square())
    if sb is not None:
        term = fn(a.square(), sb)
        out = term if out is None else out + term
    return out


def _matmul(op: Op, s_of: SOf):
    return _product(op.func, op.args[0], op.args[1], s_of)


def _addmm(op: Op, s_of: SOf):
    x, m1, m2 = op.args[0], op.args[1], op.args[2]
    beta, alpha = float(op.kwargs.get("beta", 1)), float(op.kwargs.get("alpha", 1))
    mm = torch.bmm if op.name.startswith("baddbmm") else torch.matmul
    prod = _product(mm, m1, m2, s_of)
    out = 0 if prod is None else alpha ** 2 * prod
    sx = s_of(x)
    if sx is not None:
        out = out + beta ** 2 * sx
    return _bcast(out, op.out)


def _linear(op: Op, s_of: SOf):
    x, w = op.arg(0, "input"), op.arg(1, "weight")
    return _product(lambda a, b: torch.nn.functional.linear(a, b), x, w, s_of)


def _einsum(op: Op, s_of: SOf):
    eq, ops = op.args[0], list(op.args[1:])
    if len(ops) == 1 and isinstance(ops[0], (list, tuple)):
        ops = list(ops[0])
    if len(ops) == 1:
        return torch.einsum(eq, s_of(ops[0]))
    if len(ops) != 2:
        return None
    return _product(lambda a, b: torch.einsum(eq, a, b), ops[0], ops[1], s_of)


def _conv(op: Op, s_of: SOf):
    x, w = op.args[0], op.arg(1, "weight")
    if s_of(w) is not None:
        return None
    rest = list(op.args[3:])
    kw = {k: v for k, v in op.kwargs.items() if k not in ("weight", "bias")}
    return op.func(s_of(x), w.square(), None, *rest, **kw)


# -- reductions


def _sum(op: Op, s_of: SOf):
    s = s_of(op.args[0])
    return op.func(s, *op.args[1:], **op.kwargs)


def _mean(op: Op, s_of: SOf):
    x = op.args[0]
    n = x.numel() / max(op.out.numel(), 1)
    return op.func(s_of(x), *op.args[1:], **op.kwargs) / n


# -- layout: the same op on s


_FILLS = {"masked_fill": 2, "masked_fill_": 2, "pad": 3, "fill_": None}


def _layout(op: Op, s_of: SOf):
    """The op itself on ``s`` (noise-free floating operands as zeros,
    integer and boolean ones as they are; a filled value as 0)."""

    def swap(t):
        if _tensor(t) and t.is_floating_point():
            return _zeros_or(s_of, t)
        return t

    args, kwargs = tree_map(swap, list(op.args)), tree_map(swap, dict(op.kwargs))
    if op.name == "where":
        args = [a if _tensor(a) else 0.0 for a in args]
    elif op.name in _FILLS:
        i = _FILLS[op.name]
        if "value" in kwargs:
            kwargs["value"] = 0.0
        elif i is not None and len(args) > i:
            args[i] = 0.0
    return op.func(*args, **kwargs)


def _setitem(op: Op, s_of: SOf):
    x, index, value = op.args[0], op.args[1], op.args[2]
    s = _zeros_or(s_of, x).clone()
    s[index] = _zeros_or(s_of, value) if _tensor(value) and value.is_floating_point() else 0.0
    return s


def _copy(op: Op, s_of: SOf):
    src = op.args[1]
    return _bcast(_zeros_or(s_of, src).to(op.out.dtype), op.out)


# -- elementwise and softmax


def _elementwise(op: Op, s_of: SOf):
    """``φ'(x)² s``, ``φ'`` by autograd on the eval input (the op on a
    clone, so an in-place op differentiates too)."""
    x = op.args[0]
    s = s_of(x)
    if s is None or any(s_of(t) is not None for t in op.args[1:] if _tensor(t)):
        return None  # a noisy second operand (pow(x, e(noisy))): not an elementwise φ of x alone
    if op.out.shape != x.shape:
        return None
    with torch.enable_grad():
        leaf = x.detach().requires_grad_(True)
        y = op.func(leaf.clone(), *op.args[1:], **op.kwargs)
        (g,) = torch.autograd.grad(y, leaf, torch.ones_like(y))
    return g.square() * s


def _softmax_dim(op: Op, x) -> int:
    dim = op.arg(1, "dim")
    return x.dim() - 1 if dim is None else int(dim)


def _softmax(op: Op, s_of: SOf):
    x = op.args[0]
    dim = _softmax_dim(op, x)
    y = op.out
    s = s_of(x).to(y.dtype)
    inner = s * (1 - 2 * y) + (y.square() * s).sum(dim, keepdim=True)
    return y.square() * inner


def _log_softmax(op: Op, s_of: SOf):
    x = op.args[0]
    dim = _softmax_dim(op, x)
    y = op.out.exp()
    s = s_of(x).to(y.dtype)
    return s * (1 - 2 * y) + (y.square() * s).sum(dim, keepdim=True)


def _glu(op: Op, s_of: SOf):
    """``glu(x, dim) = a ⊙ σ(b)``, ``(a, b)`` the halves of ``x`` along
    ``dim``: ``(a + e_a) σ(b + e_b) − a σ(b) = σ(b) e_a + a σ'(b) e_b +
    O(e²)``, the halves' noises uncorrelated (the diagonal ledger) →
    ``σ(b)² s_a + a² σ'(b)² s_b``, ``σ' = σ (1 − σ)``."""
    x = op.args[0]
    dim = op.arg(1, "dim", -1)
    a, b = x.chunk(2, dim)
    sa, sb = s_of(x).chunk(2, dim)
    g = torch.sigmoid(b)
    return g.square() * sa + (a * g * (1 - g)).square() * sb


def _noise_free(op: Op, s_of: SOf):
    """An op whose tensor arguments give only their shape, dtype and
    device (``new_ones``, ``zeros_like`` …): no noise reaches its output."""
    return torch.zeros_like(op.out)


# -- norms


def centred(s, dims: int = 1):
    """The variance of ``e_k − ē`` over the last ``dims`` axes:
    ``s_k (1 − 2/d) + Σ s / d²``."""
    axes = tuple(range(-dims, 0))
    d = math.prod(s.shape[-dims:])
    return s * (1 - 2 / d) + s.sum(axes, keepdim=True) / (d * d)


def _layer_norm(op: Op, s_of: SOf):
    x, shape = op.args[0], op.arg(1, "normalized_shape")
    w, eps = op.arg(2, "weight"), float(op.arg(4, "eps", 1e-5))
    if (w is not None and s_of(w) is not None):
        return None
    dims = len(shape) if isinstance(shape, (tuple, list, torch.Size)) else 1
    axes = tuple(range(-dims, 0))
    var = x.var(axes, unbiased=False, keepdim=True)
    gain = 1.0 / (var + eps)
    if w is not None:
        gain = gain * w.square()
    return gain * centred(s_of(x), dims)


def _rms_norm(op: Op, s_of: SOf):
    x, shape = op.args[0], op.arg(1, "normalized_shape")
    w, eps = op.arg(2, "weight"), op.arg(3, "eps")
    eps = float(torch.finfo(x.dtype).eps) if eps is None else float(eps)
    dims = len(shape) if isinstance(shape, (tuple, list, torch.Size)) else 1
    axes = tuple(range(-dims, 0))
    gain = 1.0 / (x.square().mean(axes, keepdim=True) + eps)
    if w is not None:
        gain = gain * w.square()
    return gain * s_of(x)


def _batch_norm(op: Op, s_of: SOf):
    x, rm, rv = op.args[0], op.arg(1, "running_mean"), op.arg(2, "running_var")
    w, training, eps = op.arg(3, "weight"), op.arg(5, "training", False), float(op.arg(7, "eps", 1e-5))
    if training or rv is None:
        return None  # batch statistics: the noise moves them (not covered)
    scale = 1.0 / (rv + eps)
    if w is not None:
        scale = scale * w.square()
    shape = [1, -1] + [1] * (x.dim() - 2)
    return s_of(x) * scale.reshape(shape)


# -- dropout and attention (they inject noise: called on every call, noisy input or not)


def dropout_variance(v, s, p: float):
    """``(p/q) v² + s/q`` (module docs); ``s`` None: ``(p/q) v²``."""
    q = 1.0 - p
    out = v.square() * (p / q)
    return out if s is None else out + s / q


_SDPA_SIG = inspect.signature(lambda query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                              scale=None, enable_gqa=False: None)


def sdpa_variance(op: Op, s_of: SOf):
    """SDPA's output variance (module docs), or None with no noise."""
    b = _SDPA_SIG.bind(*op.args, **op.kwargs)
    b.apply_defaults()
    a = b.arguments
    q, k, v, p = a["query"], a["key"], a["value"], float(a["dropout_p"])
    sq, sk, sv = s_of(q), s_of(k), s_of(v)
    if p == 0 and sq is None and sk is None and sv is None:
        return None
    if a["enable_gqa"] and k.shape[-3] != q.shape[-3]:
        rep = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(rep, -3), v.repeat_interleave(rep, -3)
        sk = None if sk is None else sk.repeat_interleave(rep, -3)
        sv = None if sv is None else sv.repeat_interleave(rep, -3)
    c = a["scale"] if a["scale"] is not None else 1.0 / math.sqrt(q.shape[-1])
    scores = q @ k.transpose(-2, -1) * c
    mask = a["attn_mask"]
    if a["is_causal"]:
        L, S = q.shape[-2], k.shape[-2]
        keep = torch.ones(L, S, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    attn = torch.softmax(scores, -1)
    s_scores = _product(lambda x, y: x @ y.transpose(-2, -1), q, k, lambda t: sq if t is q else sk if t is k else None)
    keep_rate = 1.0 - p
    s_attn = None
    if s_scores is not None:
        s_scores = torch.nan_to_num(s_scores * c * c)
        y = attn
        s_attn = y.square() * (s_scores * (1 - 2 * y) + (y.square() * s_scores).sum(-1, keepdim=True))
    a2 = attn.square()
    weight = a2 * (p / keep_rate) if p > 0 else None
    if s_attn is not None:
        weight = s_attn / keep_rate if weight is None else weight + s_attn / keep_rate
    out = 0
    if weight is not None:
        out = out + weight @ v.square()
    if sv is not None:
        out = out + a2 @ sv
    return out


#: Calls that inject noise of their own: grouped or alpha dropouts, whose
#: injection the ledger does not model (listed as not covered whenever they
#: run), and ``nn.MultiheadAttention``'s attention.
INJECTING = {"dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout",
             "multi_head_attention_forward"}  # the last has its own rule: dropmc.model.network_mha


RULES: Dict[str, Callable] = {}


def _register(names, rule) -> None:
    for n in names.split():
        RULES[n] = rule


_register("add __add__ __radd__ add_ __iadd__ sub __sub__ sub_ __isub__ rsub __rsub__", _add)
_register("mul __mul__ __rmul__ mul_ __imul__ multiply", _mul)
_register("div __truediv__ div_ __itruediv__ true_divide divide", _div)
_register("addcmul addcmul_", _addcmul)
_register("matmul __matmul__ mm bmm", _matmul)
_register("addmm addmm_ baddbmm baddbmm_", _addmm)
_register("linear", _linear)
_register("einsum", _einsum)
_register("conv1d conv2d conv3d", _conv)
_register("sum", _sum)
_register("mean", _mean)
_register("view reshape permute transpose t flatten unflatten squeeze unsqueeze contiguous clone expand "
          "expand_as repeat repeat_interleave narrow select __getitem__ split chunk unbind tensor_split cat "
          "concat concatenate stack hstack vstack to float half double bfloat16 type type_as detach movedim "
          "moveaxis roll flip pad masked_fill masked_fill_ where view_as reshape_as swapaxes index_select "
          "gather take_along_dim triu tril diagonal split_with_sizes unfold narrow_copy transpose_ "
          "unsqueeze_ squeeze_ t_ as_strided __get__", _layout)
_register("__setitem__", _setitem)
_register("copy_", _copy)
_register("gelu relu silu tanh sigmoid exp log sqrt rsqrt pow __pow__ neg __neg__ negative abs softplus erf "
          "sin cos reciprocal square leaky_relu elu selu celu mish hardtanh relu6 hardswish hardsigmoid "
          "logsigmoid log1p expm1 softsign clamp clip __rtruediv__ __rpow__ tanh_ relu_ gelu_ silu_ exp_ "
          "sigmoid_ pow_ rsqrt_ sqrt_ neg_ abs_ clamp_ clip_ erf_ leaky_relu_ elu_ hardtanh_ float_power", _elementwise)
_register("softmax _softmax", _softmax)
_register("log_softmax _log_softmax", _log_softmax)
_register("glu", _glu)
_register("new_ones new_zeros new_empty new_full ones_like zeros_like empty_like full_like", _noise_free)
_register("layer_norm", _layer_norm)
_register("rms_norm", _rms_norm)
_register("batch_norm", _batch_norm)
