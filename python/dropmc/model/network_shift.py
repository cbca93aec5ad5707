"""The second-order mean shift of the network correction: the train-mode
*mean* of each norm's input, not only its noise variance.

What is missing at first order. In training an elementwise nonlinearity
``φ`` sees ``x + e``, ``e`` the dropout noise that reached it (variance
``s`` per coordinate, :mod:`dropmc.model.network_ledger`), and its output's mean
is not ``φ(x)``:

1. Taylor about ``x`` (``E e = 0``): ``E φ(x + e) = φ(x) + φ''(x) s/2 +
   O(E e³)``: the mean shift ``δ = φ''(x) s/2``, second order in the noise.
   A ReLU's ``φ'' = 0`` away from 0 but its kink shifts the mean up by
   ``√s φ_N(0) ≈ 0.4 √s`` at ``x = 0``: for it the Taylor form fails and
   the Gaussian expectation is the one to use (step 2).
2. The noise at a nonlinearity is a wide linear map (a feed-forward's
   first projection) of the noise upstream, a sum of many independent
   dropout bits: Gaussian to leading order (central limit). For ``e ~
   N(0, s)`` the expectation is closed-form where the function allows:

   * ReLU: ``E max(0, x + √s Z) = x Φ(x/√s) + √s φ_N(x/√s)`` (the mean of
     a rectified normal; ``s = 0`` gives ``max(0, x)``);
   * GELU ``u Φ(u)``: Stein's lemma ``E[(u − x) g(u)] = s E g'(u)`` with
     ``g = Φ`` gives ``E u Φ(u) = x E Φ(u) + s E φ_N(u)``, and for ``u ~
     N(x, s)``, ``E Φ(u) = Φ(x/√(1 + s))`` (``Φ(u) = P(Z' ≤ u)``, ``u − Z'
     ~ N(x, 1 + s)``) and ``E φ_N(u) = φ_N(x/√(1 + s))/√(1 + s)``: so
     ``E GELU = x Φ(x/√(1 + s)) + s φ_N(x/√(1 + s))/√(1 + s)``;
   * any other elementwise module (SiLU, tanh-GELU, …): three-point
     Gauss–Hermite, ``E f(x + √s Z) ≈ (2/3) f(x) + (1/6) (f(x + √(3s)) +
     f(x − √(3s)))``, exact for polynomials of degree ≤ 5, so its
     expansion ``f + f'' s/2 + f'''' s²/8`` matches the Gaussian's (``E Z⁴
     = 3``: ``f'''' 3 s²/24``) through the fourth derivative.

Carrying the shift to each norm's input. The corrected eval forward is
the mean-field forward: each op applied to the train-mode means of its
inputs. Through a linear map ``E[W y + b] = W E y + b`` and a residual add
``E[a + b] = E a + E b`` (exact, whatever the correlations), and through a
dropout ``E[m y/q] = E y`` (``m`` independent of ``y``): so once the
nonlinearity's output is replaced by its expectation (``φ(x) + δ``), the
eval forward itself carries ``δ`` through every projection and skip path
to every later norm, exactly, at no further cost; the network correction
of each norm (:mod:`dropmc.correct.network`) then normalises that shifted
input ``x̄ + Σ W δ``, with its ``c`` from the shifted input's own spread.
What this leaves out, all second order and listed: the softmax's own mean
shift (attention at the mean scores), the covariance of two noisy factors
of a product (``E[a b] = E a E b + Cov(a, b)``: a gated unit ``φ(g) ⊙ u``
with ``g``, ``u`` two maps of the same noisy input), and every elementwise
nonlinearity called as a function rather than a module (no hook sees it:
``F.gelu`` in a forward, ``nn.TransformerEncoderLayer``'s default ReLU).

The live variance. ``s`` per token and coordinate needs the ledger in
every forward; instead the ledger's forward on the example inputs records
at each activation module's input ``s_btk`` and the input's mean square
``m_bt = mean_k x_btk²``, and the hook models ``s_btk ≈ w_k ρ_t m_bt``:

3. ``ρ_t = Σ_b mean_k s_btk / Σ_b m_bt`` per position ``t`` (the ratio of
   :mod:`dropmc.correct.network`'s steps 3–4 and 7: noise and activations
   scale together from token to token; pooled over the batch rows, a
   position past the example's takes the pooled ``ρ``);
4. ``w_k = Σ_bt s_btk / mean_k Σ_bt s_btk`` (mean 1): which coordinates
   take more of the noise (a projection's rows of larger norm).

Live cost per activation call: one mean of squares per token and, for a
module with no closed form, two more calls of the module.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional

import torch
import torch.nn as nn

__all__ = ["ActivationNoise", "activation_kind", "gaussian_mean", "mean_shift", "record_activations",
           "install_shift"]

_SQRT2 = math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)

#: torch's elementwise activation modules with no closed form here (step 2: Gauss–Hermite).
_TORCH_ELEMENTWISE = (nn.SiLU, nn.Tanh, nn.Sigmoid, nn.Mish, nn.ELU, nn.CELU, nn.SELU, nn.Softplus,
                      nn.LeakyReLU, nn.Hardswish, nn.Hardsigmoid, nn.ReLU6, nn.Hardtanh, nn.LogSigmoid,
                      nn.Softsign, nn.GELU)


def activation_kind(module) -> Optional[str]:
    """``"relu"``, ``"gelu"`` (the erf GELU), ``"other"`` (an elementwise
    activation module of torch or of ``transformers.activations``, no
    parameters, no children) or None (not an elementwise activation)."""
    if list(module.parameters(recurse=True)) or list(module.children()):
        return None
    if type(module) is nn.ReLU:
        return "relu"
    if type(module) is nn.GELU:
        return "gelu" if module.approximate == "none" else "other"
    if isinstance(module, _TORCH_ELEMENTWISE):
        return "other"
    cls = type(module)
    if cls.__module__.startswith("transformers.activations") and cls.__name__ != "LinearActivation":
        if cls.__name__ == "GELUActivation" and getattr(module, "act", None) is torch.nn.functional.gelu:
            return "gelu"
        return "other"
    return None


def _normal_cdf(z):
    return 0.5 * (1.0 + torch.erf(z / _SQRT2))


def _normal_pdf(z):
    return torch.exp(-0.5 * z * z) * _INV_SQRT_2PI


def gaussian_mean(kind: str, fn, x, s):
    """``E φ(x + √s Z)`` (module docs, step 2), in ``x``'s dtype; ``fn``
    the module's ``forward`` (called for ``"other"``; not the module, whose
    hook would run again)."""
    if kind == "relu":
        r = s.sqrt()
        z = x / r.clamp_min(torch.finfo(x.dtype).tiny)
        return torch.where(r > 0, x * _normal_cdf(z) + r * _normal_pdf(z), x.clamp_min(0))
    if kind == "gelu":
        r = (1.0 + s).sqrt()
        z = x / r
        return x * _normal_cdf(z) + s * _normal_pdf(z) / r
    h = (3.0 * s).sqrt()
    return (2.0 / 3.0) * fn(x) + (fn(x + h) + fn(x - h)) / 6.0


def mean_shift(kind: str, fn, x, s, out):
    """``δ = E φ(x + √s Z) − φ(x)``, ``out`` being ``φ(x)`` (the eval
    output): what the hook adds. (A test plants its sign flipped here.)"""
    return gaussian_mean(kind, fn, x, s) - out


class ActivationNoise:
    """The ledger's record at one activation module (module docs, steps
    3–4): ``w`` (per coordinate, mean 1), ``profile`` (``ρ`` per position)
    and ``rho`` (pooled), float64; ``kind`` as :func:`activation_kind`."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._s_sum: Optional[torch.Tensor] = None  # Σ_bt s_btk
        self._noise = self._power = None  # per position: Σ_b mean_k s, Σ_b m
        self.w = self.profile = None
        self.rho = 0.0

    def add(self, x, s) -> None:
        """One call's input ``x`` and its noise variance ``s`` (same shape)."""
        xx, ss = x.detach().double(), s.double()
        d = xx.shape[-1]
        positions = xx.shape[-2] if xx.dim() >= 3 else 1
        k_sum = ss.reshape(-1, d).sum(0)
        noise = ss.mean(-1).reshape(-1, positions).sum(0)
        power = xx.square().mean(-1).reshape(-1, positions).sum(0)
        if self._s_sum is None or self._noise.numel() != positions or self._s_sum.numel() != d:
            self._s_sum, self._noise, self._power = k_sum, noise, power
        else:
            self._s_sum, self._noise, self._power = self._s_sum + k_sum, self._noise + noise, self._power + power
        total = float(self._power.sum())
        self.rho = float(self._noise.sum()) / total if total > 0 else 0.0
        pooled = torch.full_like(self._power, self.rho)
        self.profile = torch.where(self._power > 0, self._noise / self._power.clamp_min(1e-300), pooled)
        mean = float(self._s_sum.mean())
        self.w = self._s_sum / mean if mean > 0 else torch.ones_like(self._s_sum)

    def variance(self, x):
        """The live ``s ≈ w_k ρ_t m_bt`` of an input ``x`` (step 3–4), in ``x``'s dtype."""
        m = x.square().mean(-1, keepdim=True)
        w = self.w.to(dtype=x.dtype, device=x.device)
        if x.dim() >= 3 and self.profile.numel() > 1:
            n = x.shape[-2]
            prof = self.profile[:n]
            if prof.numel() < n:
                prof = torch.cat([prof, prof.new_full((n - prof.numel(),), self.rho)])
            rho = prof.to(dtype=x.dtype, device=x.device).reshape(n, 1)
        else:
            rho = torch.tensor(self.rho, dtype=x.dtype, device=x.device)
        return w * rho * m


class _RecordHook:
    """The ledger's forward pre-hook of an activation module: its input's
    noise variance, read from the ledger's mode."""

    def __init__(self, mode, record: ActivationNoise) -> None:
        self.mode, self.record = mode, record

    def __call__(self, module, args):
        x = args[0] if args else None
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            return
        with torch._C.DisableTorchFunction(), torch.no_grad():
            s = self.mode.s_of(x)
            if s is not None and s.shape == x.shape:
                self.record.add(x, s)


def record_activations(model, mode, into: Dict[str, ActivationNoise]) -> List:
    """Hooks every elementwise activation module of ``model`` so that the
    ledger's forward (``mode``, a :class:`dropmc.model.network_ledger.LedgerMode`)
    fills ``into`` (module name → :class:`ActivationNoise`; a module no
    noise reaches stays without ``w``). Returns the hook handles."""
    handles = []
    for name, module in model.named_modules():
        kind = activation_kind(module)
        if kind is not None:
            into[name] = ActivationNoise(kind)
            handles.append(module.register_forward_pre_hook(_RecordHook(mode, into[name])))
    return handles


class ShiftedActivation:
    """The correction's forward hook of an activation module: in eval, its
    output ``φ(x)`` plus the mean shift (module docs); in training nothing."""

    def __init__(self, record: ActivationNoise) -> None:
        self.record = record

    def __call__(self, module, args, out):
        if module.training or not args or not isinstance(out, torch.Tensor) or out.shape != args[0].shape:
            return None
        x = args[0]
        if x.dtype.itemsize < 4:  # half precision: the shift in float32, returned in x's dtype
            xf = x.float()
            return (out.float() + mean_shift(self.record.kind, module.forward, xf, self.record.variance(xf),
                                             out.float())).to(out.dtype)
        return out + mean_shift(self.record.kind, module.forward, x, self.record.variance(x), out)


def install_shift(correction, modules: dict, records: Dict[str, ActivationNoise]) -> List[str]:
    """Hooks each activation module the ledger saw noise reach (``ρ > 0``)
    with :class:`ShiftedActivation`; the handles go to ``correction``
    (``uncorrect`` removes them). An in-place activation (``inplace=True``:
    its forward hook sees its input already overwritten) is not hooked but
    listed in ``correction.network_uncovered``. Returns the modules hooked."""
    hooked = []
    for name, record in records.items():
        if record.w is None or record.rho <= 0:
            continue
        if getattr(modules[name], "inplace", False):
            correction.network_uncovered.append(("mean shift of an in-place activation", name))
            continue
        correction._handles.append(modules[name].register_forward_hook(ShiftedActivation(record)))
        hooked.append(name)
    return hooked
