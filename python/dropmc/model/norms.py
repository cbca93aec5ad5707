"""Recognise a norm module by what it computes: the one norm recogniser of
dropmc. Discovery, the linear paths, ``correct`` (with or without inputs),
the network ledger (through discovery) and ``dropmc.torch.check_norm_site``
all decide "is this a LayerNorm, an RMSNorm, or neither" here:
:func:`norm_spec` / :func:`norm_kind` (a BatchNorm is told by its class:
its output depends on running statistics, not on the row alone; torch's own
``nn.LayerNorm``/``nn.RMSNorm`` are run like any other module, their class
only making them candidates without a look at their parameters).

``recognize_norm(module, x)`` runs ``module`` on ``x`` (or reads the call's
own output ``y``) and compares its output with the two formulas dropmc's
engine audits, on the module's own parameters:

* LayerNorm: ``y = γ (x − μ) / sqrt(σ² + ε) + β`` (``μ, σ²`` the mean and
  biased variance over the last axis),
* RMSNorm: ``y = γ x / sqrt(mean(x²) + ε)``, with ``γ = weight`` or, for the
  Gemma style, ``γ = 1 + weight`` (``weight_offset = 1``),

with ``γ`` the module's ``weight`` (1 when it has none), ``β`` its ``bias``
(0 when it has none) and ``ε`` its ``eps`` / ``variance_epsilon`` /
``epsilon`` attribute. The first formula the output matches to rounding is
the module's :class:`NormSpec`; a module matching none is a ValueError
naming it (pass ``norms={name: NormSpec(...)}`` to the audit for a norm
this cannot read, e.g. one whose ε is not an attribute).

Rounding (``MATCH_ROUNDINGS``): the module computes in its dtype with unit
roundoff ``u`` (2⁻²⁴ for float32; never finer than float32's, since a
float64 norm may compute its statistics in float32: ``STATISTICS_ROUNDOFF``). Its mean and mean square are sums of
``d`` terms (a recursive sum's relative error is at most ``γ_d ≈ d u``,
Higham (3.5)), so the mean is off by at most ``d u rms(x)`` and, after the
division by the row's scale ``σ`` (``sqrt(σ² + ε)``, or the RMS), every
normalised ``x̂`` by ``d u rms(x)/σ`` absolutely; the variance, the square
root, the division, the scale and the shift add a handful more roundings
relative to ``x̂``. So each output is within
``(d + 8) u (|γ| (|x̂| + rms(x)/σ) + |β|)`` of the exact formula, up to
terms of order ``u²``; ``MATCH_ROUNDINGS = 8`` is that
handful, and the comparison is made in float64 against the float64
formula. The two formulas differ by ``γ μ / σ`` (LN vs RMS) or by ``x̂``
itself (``weight`` vs ``1 + weight``): far above that bound on any input
whose rows are not already centred, and where they are, both readings
give the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as _np

__all__ = ["NormSpec", "recognize_norm", "norm_spec", "norm_kind", "norm_candidate", "MATCH_ROUNDINGS"]

#: Roundings beyond the ``d`` of the two sums in one LayerNorm/RMSNorm
#: output (module docs): variance, square root, division, scale, shift,
#: and the casts of a mixed-precision norm (T5/Llama compute in float32).
MATCH_ROUNDINGS = 8

#: The coarsest unit roundoff a norm's output may carry whatever its dtype:
#: T5's and Llama's RMSNorms compute the mean square in float32 even in a
#: float64 model (``x.to(float32).pow(2).mean(-1)``), so a float64 output
#: holds float32 roundings of ``x̂``. The bound's ``u`` is the larger of the
#: output dtype's and this (float32's ``2⁻²⁴``): the formulas it must tell
#: apart differ by ``γ μ/σ`` or by ``x̂`` itself, ``O(1)`` on rows that are
#: not centred, far above ``(d + 8) · 2⁻²⁴`` for any ``d`` below ~10⁶.
STATISTICS_ROUNDOFF = float(_np.finfo(_np.float32).eps) / 2

#: Attribute names a norm module keeps its ε under (torch, T5/Llama, others).
_EPS_ATTRIBUTES = ("eps", "variance_epsilon", "epsilon")


@dataclass(frozen=True)
class NormSpec:
    """What a norm module computes: ``kind`` ``"layer"`` or ``"rms"``,
    ``gamma`` (the effective scale, ``weight_offset + weight``) and ``beta``
    as float64 arrays of length ``d``, ``eps``, and ``weight_offset`` (0,
    or 1 for a Gemma-style ``(1 + weight)`` RMSNorm)."""

    kind: str
    gamma: _np.ndarray
    beta: _np.ndarray
    eps: float
    weight_offset: float = 0.0
    axis: int = -1  # the normalized axis of the module's input (-3 for channels-first (N, C, H, W))

    @property
    def d(self) -> int:
        return int(self.gamma.shape[0])

    def __post_init__(self):
        if self.kind not in ("layer", "rms"):
            raise ValueError(f"NormSpec kind must be 'layer' or 'rms', got {self.kind!r}")
        if not (isinstance(self.eps, float) and self.eps >= 0):
            raise ValueError(f"NormSpec eps must be a non-negative float, got {self.eps!r}")

    def scale2(self, x: _np.ndarray) -> _np.ndarray:
        """The row's squared scale: ``σ² + ε`` (layer) or ``mean(x²) + ε`` (rms)."""
        c = x - x.mean(-1, keepdims=True) if self.kind == "layer" else x
        return (c * c).mean(-1, keepdims=True) + self.eps

    def apply_unit(self, x: _np.ndarray) -> _np.ndarray:
        """The normalised ``x̂`` (before ``γ, β``)."""
        c = x - x.mean(-1, keepdims=True) if self.kind == "layer" else x
        return c / _np.sqrt(self.scale2(x))

    def apply(self, x: _np.ndarray) -> _np.ndarray:
        """The formula on ``x`` (float64, last axis ``d``)."""
        return self.gamma * self.apply_unit(x) + self.beta


def _vector(t) -> Optional[_np.ndarray]:
    import torch

    if t is None:
        return None
    return t.detach().to(torch.float64).cpu().numpy().reshape(-1)


def _eps_of(module) -> Optional[float]:
    import torch

    for attr in _EPS_ATTRIBUTES:
        eps = getattr(module, attr, None)
        if isinstance(eps, (int, float)) and not isinstance(eps, bool):
            return float(eps)
    if hasattr(module, "eps") and module.eps is None:  # nn.RMSNorm's default
        w = getattr(module, "weight", None)
        return float(torch.finfo(w.dtype if w is not None else torch.get_default_dtype()).eps)
    return None


def norm_candidate(module) -> bool:
    """Whether ``module`` could be a norm over the last axis: a module
    without submodules whose parameters are all vectors of one length (a
    ``weight``, maybe a ``bias``), or an ``nn.LayerNorm``/``nn.RMSNorm``
    without affine parameters. Only candidates are checked by
    :func:`recognize_norm` during discovery."""
    import torch.nn as nn

    if isinstance(module, nn.LayerNorm) or (hasattr(nn, "RMSNorm") and isinstance(module, nn.RMSNorm)):
        return True
    if any(True for _ in module.children()):
        return False
    params = dict(module.named_parameters(recurse=False))
    w = params.get("weight")
    if w is None or w.dim() != 1 or set(params) - {"weight", "bias"}:
        return False
    b = params.get("bias")
    return b is None or tuple(b.shape) == tuple(w.shape)


def recognize_norm(module, x, name: str = "", y=None) -> NormSpec:
    """The :class:`NormSpec` of ``module`` from its output on ``x`` (the
    module's input: its last axis normalized, or, channels-first, an inner
    axis of the weight's length, each tried; the module runs once under
    ``torch.no_grad``, or not at all when ``y``, the output of the call on
    ``x``, is given). Raises ValueError naming the module (``name``, or
    its class) when the output is neither a LayerNorm nor an RMSNorm of its
    own parameters to rounding (module docs), and for a BatchNorm."""
    import torch
    import torch.nn as nn

    label = f"{name!r} ({type(module).__name__})" if name else type(module).__name__
    if isinstance(module, nn.modules.batchnorm._BatchNorm):
        raise ValueError(f"{label} is a BatchNorm: its output depends on its running statistics, not on "
                         "the token alone (correct folds it by the BatchNorm family)")
    weight = _vector(getattr(module, "weight", None))
    bias = _vector(getattr(module, "bias", None)) if isinstance(getattr(module, "bias", None), torch.Tensor) else None
    # the normalized axis: the last, or (channels-first) an inner axis of the weight's length
    axes = [-1] if weight is None or weight.shape[0] == x.shape[-1] else []
    axes += [a - x.dim() for a in range(1, x.dim() - 1) if weight is not None and x.shape[a] == weight.shape[0]]
    if not axes:
        raise ValueError(f"{label} is not a norm over one axis of its input: weight of length "
                         f"{weight.shape[0]}, input of shape {tuple(x.shape)}")
    eps = _eps_of(module)
    if eps is None:
        raise ValueError(f"{label}: no eps / variance_epsilon / epsilon attribute; pass its NormSpec "
                         "explicitly (norms={name: dropmc.model.norms.NormSpec(...)})")
    if y is None:
        with torch.no_grad():
            # its own computation: no hooks, and a corrected norm's uncorrected forward (dropmc.correct.fast)
            y = getattr(module, "_dropmc_own_forward", module.forward)(x)
    if not isinstance(y, torch.Tensor) or y.shape != x.shape:
        raise ValueError(f"{label} is not a norm: its output is not a tensor of its input's shape")
    closest, candidates = None, []
    for axis in axes:
        d = int(x.shape[axis])
        xs = x.detach().movedim(axis, -1).to(torch.float64).cpu().numpy().reshape(-1, d)
        ys = y.detach().movedim(axis, -1).to(torch.float64).cpu().numpy().reshape(-1, d)
        finite = _np.isfinite(xs).all(-1) & _np.isfinite(ys).all(-1)  # a NaN row is the capture's to name
        xs, ys = xs[finite], ys[finite]
        if xs.shape[0] == 0:
            raise ValueError(f"{label}: no token with a finite input and output to recognise it by "
                             "(an empty batch, or NaN/inf in every token)")
        u = max(float(torch.finfo(y.dtype).eps) / 2, STATISTICS_ROUNDOFF) if y.dtype.is_floating_point else 0.0
        zero = _np.zeros(d)
        w = _np.ones(d) if weight is None else weight
        candidates = [NormSpec("layer", w, zero if bias is None else bias, eps, axis=axis)]
        if bias is None:
            candidates += [NormSpec("rms", w, zero, eps, axis=axis), NormSpec("rms", 1.0 + w, zero, eps, 1.0, axis)]
        for spec in candidates:
            ref = spec.apply(xs)
            xhat = spec.apply_unit(xs)
            rms = _np.sqrt((xs * xs).mean(-1, keepdims=True))
            scale = rms / _np.sqrt(spec.scale2(xs))
            bound = (d + MATCH_ROUNDINGS) * u * (_np.abs(spec.gamma) * (_np.abs(xhat) + scale)
                                                 + _np.abs(spec.beta)) + _np.finfo(float).tiny
            excess = float(_np.max(_np.abs(ys - ref) / bound))
            if excess <= 1.0:
                return spec
            if closest is None or excess < closest[0]:
                closest = (excess, spec)
    kinds = " or ".join(sorted({f"{s.kind}" + (" (1 + weight)" if s.weight_offset else "") for s in candidates}))
    raise ValueError(f"{label} is not a LayerNorm or RMSNorm of its own weight/bias/eps: its output "
                     f"differs from the {kinds} formula by up to {closest[0]:.3g} times the rounding "
                     f"bound (d + {MATCH_ROUNDINGS}) u (|γ|(|x̂| + rms/σ) + |β|); pass norms={{name: dropmc.model.norms.NormSpec(...)}} "
                     "if it is one")


#: Rows of the probe input :func:`norm_spec` gives a module when the caller has
#: no input of its own (``correct(model, sites=...)`` without inputs). Its rows
#: are standard normal plus 1, so not centred: on such rows the LayerNorm and
#: RMSNorm formulas differ by ``γ μ / σ``, far above the rounding bound (module docs).
PROBE_ROWS = 8


def _probe(module):
    """A seeded ``(PROBE_ROWS, d)`` input in the module's dtype and on its
    device, ``d`` the length of its ``weight`` (or its ``normalized_shape``);
    None when the module has neither."""
    import torch

    w = getattr(module, "weight", None)
    shape = getattr(module, "normalized_shape", None)
    if isinstance(w, torch.Tensor) and w.dim() == 1:
        d, dtype, device = int(w.shape[0]), w.dtype, w.device
    elif isinstance(shape, tuple) and len(shape) == 1:
        d, dtype, device = int(shape[0]), torch.get_default_dtype(), torch.device("cpu")
    else:
        return None
    if not dtype.is_floating_point:
        return None
    g = torch.Generator().manual_seed(0)
    return (torch.randn(PROBE_ROWS, d, generator=g, dtype=torch.float64) + 1.0).to(dtype=dtype, device=device)


def norm_spec(module, x=None, y=None, name: str = "") -> Optional[NormSpec]:
    """The one decision of "which norm is this": ``module``'s
    :class:`NormSpec` when it computes a LayerNorm or an RMSNorm of its own
    parameters, else None (a BatchNorm, a module that is no
    :func:`norm_candidate`, or one whose output matches neither formula).
    ``x``: the input of one of its calls (``y`` that call's output, when
    the caller has it); without one, a seeded probe (:data:`PROBE_ROWS`
    rows), whose failure to run (a module that needs other arguments) is
    also None. The class of a module never decides alone."""
    import torch.nn as nn

    if not isinstance(module, nn.Module) or isinstance(module, nn.modules.batchnorm._BatchNorm) \
            or not norm_candidate(module):
        return None
    if x is None:
        x, y = _probe(module), None
        if x is None:
            return None
        try:
            return recognize_norm(module, x, name)
        except (ValueError, TypeError, RuntimeError):
            return None
    try:
        return recognize_norm(module, x, name, y)
    except ValueError:
        return None


def norm_kind(module, x=None, y=None) -> Optional[str]:
    """``"layer"``, ``"rms"`` (by what the module computes: :func:`norm_spec`)
    or ``"batch"`` (a BatchNorm, by its class), else None."""
    import torch.nn as nn

    if isinstance(module, nn.modules.batchnorm._BatchNorm):
        return "batch"
    spec = norm_spec(module, x, y)
    return None if spec is None else spec.kind
