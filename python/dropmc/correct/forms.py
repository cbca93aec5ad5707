"""The torch code of :func:`dropmc.correct.correct`'s corrections: the
first-order factor (``_factor``), the shrink towards β,
the second-order estimates, and :class:`_NormParams` (what a corrected norm
computes, read live from its module). The formulas are derived in
src/formulas/layernorm.rs, bypass.rs, rmsnorm.rs, compound.rs and
second_order.rs; :mod:`dropmc.correct`'s docs say which applies where.

Fused form (the eval-time cost): per call, ``x`` and ``v`` are reduced
once each (``x`` by torch's own layer norm statistics, or its mean square;
``v`` by its norm) into the per-token factor ``c`` by one ``addcmul``
and one in-place ``rsqrt``, and ``c`` is applied to the norm's own output in one ``lerp``
(``β + c (out − β)``).
"""

from __future__ import annotations

from typing import Optional


def _stats_dtype(t):
    import torch

    return torch.float32 if t.dtype in (torch.float16, torch.bfloat16) else t.dtype


def _factor(v, x, p: float, centred: bool, eps: float, rstd=None):
    """The first-order factor per token (last dim kept), fused:

    ``c² = (s + ε) / (s + (p/q)·mean_k v_k² + ε)``, ``s`` the spread ``σ²``
    of ``x`` (``centred``) or its mean square ``r²``. Step by step:
    dividing through by ``s + ε``, ``c² = 1 / (1 + n / (s + ε))`` with ``n
    = (p/q)·mean_k v_k² = (p / (q d))·‖v‖²``, so ``c = (1 + (p / (q d))
    a²)^(-1/2)`` with ``a = ‖v‖ · ρ``, ``ρ = (s + ε)^(-1/2)``. For LayerNorm
    ``ρ`` is ``rstd`` as torch's own layer norm computes it
    (``native_layer_norm``'s third output: one pass, several times faster
    than a separate ``var`` at small d; given as ``rstd`` when the norm's
    own call already returned it, of ``x`` at full precision); for RMSNorm
    ``s = ‖x‖² / d``. Then one ``vector_norm`` of ``v`` scaled by ``ρ`` in
    place, one ``addcmul`` (``1 + (p/(q d))·a·a``) and one in-place
    ``rsqrt``."""
    import torch

    if x.dtype.itemsize < 4 or v.dtype.itemsize < 4:  # half precision: statistics in float32
        dt = _stats_dtype(x)
        x, v = x.to(dt), v.to(dt)
    elif v.dtype != x.dtype:
        v = v.to(x.dtype)
    d = x.shape[-1]
    rho = _rho(x, centred, eps, rstd)
    a = torch.linalg.vector_norm(v, dim=-1, keepdim=True).mul_(rho)
    return torch.addcmul(_one(x.dtype), a, a, value=p / ((1.0 - p) * d)).rsqrt_()


def _rho(x, centred: bool, eps: float, rstd=None):
    """``ρ = (s + ε)^(-1/2)`` per token, ``s`` the spread of ``x``
    (``centred``) or its mean square: ``rstd`` when given, else torch's own
    layer-norm statistics or the vector norm (see :func:`_factor`)."""
    import torch

    if rstd is not None:
        return rstd
    d = x.shape[-1]
    if centred:
        return torch.native_layer_norm(x, (d,), None, None, eps)[2]
    return torch.linalg.vector_norm(x, dim=-1, keepdim=True).square_().div_(d).add_(eps).rsqrt_()


def _network_factor(x, terms, centred: bool, eps: float, rstd=None, v=None, p: float = 0.0):
    """The network factor per token (last dim kept), for an upstream noise
    ``s̄ = κ V`` (:mod:`dropmc.correct.network` derives it), from ``terms =
    (1 + κ, −κ ε)``: two tensors broadcast over the tokens (0-d, or ``(L,
    1)`` for a ``κ`` per position), made once per norm and input shape.

    ``c² = (V + ε) / (V (1 + κ) + ε)``. Step by step: dividing through by
    ``V + ε``, ``c² = 1 / (1 + κ V / (V + ε))``, and with ``ρ = (V +
    ε)^(-1/2)``, ``V / (V + ε) = 1 − ε ρ²``, so ``c^(-2) = (1 + κ) + ρ²
    t`` with ``t = −κ ε``: one product and one fused multiply-add on the
    per-token ``ρ`` (:func:`_rho`, the norm's own ``rstd`` when it
    returned it), then an ``rsqrt``.

    With the norm's own site live (``v`` its dropout's input, rate ``p``):
    ``c² = (V + ε) / (V (1 + κ) + (p/q) mean_k v_k² + ε)``, ``κ`` then the
    rest's ratio; dividing through as above, ``t = −κ ε + (p / (q d))
    ‖v‖²``: one ``vector_norm`` and one ``addcmul`` more — five kernels,
    against the per-site factor's four (:func:`_factor`)."""
    import torch

    if x.dtype.itemsize < 4 or (v is not None and v.dtype.itemsize < 4):  # half: statistics in float32
        x = x.to(_stats_dtype(x))
    rho = _rho(x, centred, eps, rstd)
    one_kappa, t = terms
    if v is None:
        t = t * rho
    else:
        n = torch.linalg.vector_norm(v.to(x.dtype), dim=-1, keepdim=True)
        t = torch.addcmul(t, n, n, value=p / ((1.0 - p) * x.shape[-1])).mul_(rho)
    return torch.addcmul(one_kappa, t, rho).rsqrt_()


_ONES: dict = {}


def _one(dt):
    """A cached scalar ``1`` of dtype ``dt`` (``addcmul``'s base: one
    kernel for ``1 + k·n·t`` instead of three in-place steps)."""
    import torch

    one = _ONES.get(dt)
    if one is None:
        one = _ONES[dt] = torch.ones((), dtype=dt)
    return one


def _second_order(v, x, p: float, centred: bool, eps: float, params: "_NormParams", like):
    """The second-order ``E[norm(h + dropout(v))]`` per token of
    src/formulas/second_order.rs (its step 2: ``γ [N̄ D̄^(-1/2) (1 + 3 Var D
    / (8 D̄²)) − ½ Cov(N, D) D̄^(-3/2)] + β``), on the units ``x_j`` with
    noise moments ``s2 = α u``, ``t3 = b v u``, ``f4 = f u²`` (``u = v²``,
    ``α = p/q``, ``b = p (p − q)/q²``, ``f = p (1 − 3pq)/q³``); LayerNorm
    (``centred``: ``N = y_k − M``, ``D = V + ε``) or RMSNorm (``N = y_k``,
    ``D = A + ε``). In ``like``'s dtype. Per token, with ``n`` the centred
    (or plain) input and sums over the ``d`` units:

    * ``D̄ = Σ n²/d + (1 − 1/d) α Σ u/d + ε`` (RMSNorm: ``Σ (n² + α u)/d + ε``);
    * ``Var D = Σ (4 n² s2 + 4 n t3 + f4 − s2²)/d² = (4α Σ n·(n u) + 4b Σ
      n·(v u) + (f − α²) Σ u²)/d²``: three row dot products;
    * ``Cov(N_k, D) = (2 n_k s2_k + t3_k)/d = (2α n_k u_k + b v_k u_k)/d``,
      centred over ``k`` for LayerNorm;
    * ``g = n A − Cov B`` with the per-token ``A = D̄^(-1/2) (1 + 3 Var D /
      (8 D̄²))`` and ``B = ½ D̄^(-3/2)``; then ``γ g + β``."""
    import torch

    dt = _stats_dtype(x)
    x, v = x.to(dt), v.to(dt)
    q = 1.0 - p
    d = x.shape[-1]
    alpha, b, f = p / q, p * (p - q) / (q * q), p * (1.0 - 3.0 * p * q) / q**3
    u = v * v
    vu = u * v
    num = x - x.mean(dim=-1, keepdim=True) if centred else x
    nu = num * u
    dot = torch.linalg.vecdot
    noise = u.sum(dim=-1, keepdim=True).mul_(alpha * ((1.0 - 1.0 / d) if centred else 1.0) / d)
    den = dot(num, num).unsqueeze(-1).div_(d).add_(noise).add_(eps)
    var_den = (dot(num, nu).mul_(4 * alpha).add_(dot(num, vu), alpha=4 * b)
               .add_(dot(u, u), alpha=f - alpha * alpha)).unsqueeze(-1).div_(d * d)
    cov = torch.add(vu, nu, alpha=2 * alpha / b) if b != 0 else nu * (2 * alpha)
    scale = b / d if b != 0 else 1.0 / d  # cov = scale · (the sum above)
    if centred:
        cov = cov - cov.mean(dim=-1, keepdim=True)
    rden = den.rsqrt()
    big_a = var_den.div_(den.square()).mul_(3.0 / 8.0).add_(1.0).mul_(rden)
    big_b = rden.pow(3).mul_(0.5 * scale)
    g = torch.addcmul(num * big_a, cov, big_b, value=-1.0)
    gamma, beta = params.gamma(), params.beta()
    if gamma is not None:
        g = g * gamma.to(dt) if beta is None else torch.addcmul(beta.to(dt), g, gamma.to(dt))
    elif beta is not None:
        g = g + beta.to(dt)
    return g.to(like.dtype)


def _last(axis: int, *tensors):
    """The tensors with the normalised ``axis`` moved last (None stays
    None): every factor is computed along the last axis; a channels-first
    norm's input, dropout input and output are moved there and its
    corrected output moved back (:func:`_back`). The correction is per row
    of the norm, so the layout changes nothing else."""
    return tensors if axis == -1 else tuple(None if t is None else t.movedim(axis, -1) for t in tensors)


def _back(axis: int, t):
    """:func:`_last`'s inverse on one tensor."""
    return t if axis == -1 else t.movedim(-1, axis)


def _beta(params: "_NormParams", like):
    b = params.beta()
    return b if b is None or b.dtype == like.dtype else b.to(like.dtype)


def _shrink_towards_beta(out, c, beta):
    """``β + c (out − β)``, in ``out``'s dtype: one ``lerp`` from ``β`` to
    ``out`` by ``c`` (a tensor or a float; ``out · c`` without β)."""
    import torch

    if not isinstance(c, float) and c.dtype != out.dtype:
        c = c.to(out.dtype)
    return out * c if beta is None else torch.lerp(beta, out, c)


class _NormParams:
    """What a corrected norm computes, read live from its module (so a
    correction follows later changes of its parameters): ``kind``
    (``"layer"``/``"rms"``), ``eps``, and the effective ``γ``
    (``weight_offset + weight``) and ``β`` as tensors (None when the module
    has none). An ``nn.LayerNorm``/``nn.RMSNorm`` is read from its
    attributes; a norm recognised by what it computes
    (:func:`dropmc.model.norms.recognize_norm`) from its
    :class:`~dropmc.model.norms.NormSpec`: its ``weight``/``bias`` when it has
    them, else the spec's arrays."""

    def __init__(self, module, kind: str, eps: Optional[float], spec=None) -> None:
        self.module, self.kind, self._eps, self.spec = module, kind, eps, spec

    @classmethod
    def of_module(cls, module) -> "_NormParams":
        """A module-named norm (no example forward): its kind decided by
        :func:`dropmc.model.norms.norm_kind`; torch's own classes read from
        their attributes (``nn.RMSNorm``'s ``eps=None`` is the input dtype's
        ε, as torch computes it), any other norm from its
        :class:`~dropmc.model.norms.NormSpec`."""
        import torch.nn as nn

        from ..model.norms import norm_kind, norm_spec

        torch_own = isinstance(module, nn.LayerNorm) or (hasattr(nn, "RMSNorm") and isinstance(module, nn.RMSNorm))
        if torch_own or norm_kind(module) == "batch":
            kind = norm_kind(module)
            eps = None if kind == "rms" and module.eps is None else float(module.eps)
            return cls(module, kind, eps)
        return cls.of_spec(module, norm_spec(module))

    @classmethod
    def of_spec(cls, module, spec) -> "_NormParams":
        return cls(module, spec.kind, float(spec.eps), spec)

    @property
    def axis(self) -> int:
        """The normalised axis of the norm's input (``-3``: a channels-first
        ``(N, C, H, W)`` norm; :attr:`dropmc.model.norms.NormSpec.axis`)."""
        return -1 if self.spec is None else int(getattr(self.spec, "axis", -1))

    def eps(self, like) -> float:
        import torch

        return float(torch.finfo(like.dtype).eps) if self._eps is None else self._eps

    def _live(self, attr: str):
        import torch

        # the parameter as the module holds it now (its _parameters first: no __getattr__ walk)
        t = self.module._parameters.get(attr) if attr in self.module._parameters else getattr(self.module, attr, None)
        return t if isinstance(t, torch.Tensor) else None

    def gamma(self):
        import torch

        w = self._live("weight")
        if self.spec is None:
            return w
        if w is not None and w.shape == self.spec.gamma.shape:
            return w + self.spec.weight_offset if self.spec.weight_offset else w
        return torch.from_numpy(self.spec.gamma)

    def beta(self):
        import torch

        b = self._live("bias")
        if self.spec is None or (b is not None and b.shape == self.spec.beta.shape):
            return b
        return torch.from_numpy(self.spec.beta) if self.spec.beta.any() else None

