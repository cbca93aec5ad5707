"""The network audit's control variate (:mod:`dropmc.audit.network`; issue
49 item 2): the truth ``T = E[y]`` of a norm call's output ``y`` estimated
with the norm's first-order response to the noise its dropouts inject,
a regressor of mean exactly zero, so the Monte Carlo budget stays small.

Derivation, step by step.

1. *The injections have mean zero.* A dropout call draws its mask ``m``
   (entries Bernoulli(q), ``q = 1 − p``) independently of its input ``a``
   (``a`` is made from the forward's earlier masks only). Its injection
   ``n = drop(a) − a = (m/q − 1)·a`` therefore has
   ``E[n] = E[m/q − 1]·E[a] = 0`` elementwise, whatever ``a`` is. It costs
   nothing: the dropout module's forward hook sees ``a`` and ``drop(a)``.
2. *The regressors.* For a norm call with eval input ``x₀`` (tokens × d),
   ``x̂ = (x₀ − mean x₀)/σ`` (RMSNorm: ``x̂ = x₀/r``), scale ``s = γ/σ``,
   its first-order response to an input deviation ``v`` is
   ``J v = s·(v − mean v − x̂·mean(x̂ v))`` (RMSNorm: no ``mean v``; means
   over the last axis; ``J`` from the eval forward, fixed). For each
   dropout ``k`` that reaches the norm and whose injection has the norm
   input's shape (a residual-stream dropout; attention-probability and
   functional dropouts give no regressor), ``r_k = J n_k``: still of mean
   exactly zero (``J`` is a constant). ``J`` only has to be fixed, not
   exact: an inexact ``J`` (another ε, a γ read wrongly) costs variance
   reduction, never bias.
3. *The estimator.* Draw ``i`` of batch ``b`` (:data:`~dropmc.audit.network.BATCH`
   forwards) gives ``z_i = y_i − Σ_k β_k^(b) r_{k,i}``, elementwise, with
   one coefficient per (norm, dropout), pooled over the tokens and units,
   fitted by least squares on the draws of the batches *before* ``b``
   (``β = (Σ R Rᵀ)⁻¹ Σ R (y − y_eval)``, summed over those draws and a
   fixed subset of about :data:`FIT_ELEMENTS` elements (whole rows); the first batch has
   ``β = 0``, plain Monte Carlo). ``T̂ = mean_i z_i``.
4. *Unbiased, exactly.* ``β^(b)`` is a function of earlier draws only and
   ``r_{k,i}`` is independent of them with mean zero, so
   ``E[β^(b) r_i] = E[β^(b)]·E[r_i] = 0`` and ``E[z_i] = T`` for every
   draw (no fitted-coefficient bias: the coefficients are never fitted on
   the draws they correct). Fitted on the same draws, the bias would be of
   order ``K/(N·E)`` for ``E`` pooled elements: too small to see — a
   planted in-sample version (β refitted each draw on every draw so far,
   the current one included) passed python/tests/test_audit_network.py's
   agreement check on its pre-LN stack (mean z² 1.010, allowed
   ``|· − 1| ≤ 0.18``; max |z| 3.85 of 7.76) — the separation is kept so
   that unbiasedness is exact, not argued.
5. *Its SE.* Given the past, ``z_i`` has mean ``T`` whatever the past
   was, so the ``z_i − T`` are uncorrelated (a martingale-difference
   sequence), ``Var(T̂) = Σ_i σ_i²/N²`` and
   ``E[Σ_i (z_i − z̄)²] = Σ_i σ_i² − N·Var(T̂) = (N − 1)/N·Σ_i σ_i²``:
   ``SE² = Σ (z_i − z̄)²/(N(N − 1))``, the residuals' sd/√N, unbiased
   although the batches' variances differ.
6. *When it is used.* At each batch boundary the refitted ``β`` is kept
   for the next batch only if, on the draws so far, the pooled residual
   sum of squares ``Σ (y − y_eval − βᵀR)²`` is below the plain one
   ``Σ (y − y_eval)²`` (same draws and elements; ``K`` parameters against
   16 draws or more × thousands of elements: the in-sample optimism is negligible, and the rule reads the
   past only, so step 4 still holds); else ``β = 0``: plain Monte Carlo.

Reported per norm: ``variance_ratio`` = the mean over elements of the plain
per-element variance of ``y`` over all draws, divided by that of ``z`` over
the draws after the first batch (what the control variate buys per draw),
``se_ratio`` = mean plain SE² / mean controlled SE² from the same draws
(what the estimate gained, first batch included), ``used`` (the last
batch's choice) and ``regressors`` = ``K``.
"""

from __future__ import annotations

from typing import Dict, List, Optional

from ..model.calls import call_name

__all__ = ["NormJacobian", "ControlVariate", "injection_plan", "eval_jacobians", "injection"]

#: Elements of a norm's output (whole rows, a fixed strided subset, the
#: same every draw) whose products enter the normal equations and the use rule's sums
#: of squares: ``K`` pooled coefficients need far fewer than the tokens × d
#: of a large model, and the ``K² · elements`` products per draw would
#: otherwise cost a noticeable part of a forward (``K`` ≈ 25 at BERT-base's
#: last norms). ``z`` itself is formed on every element.
FIT_ELEMENTS = 8192

#: Ridge added to the normal equations' diagonal, relative to its mean:
#: keeps ``β`` finite when two injections are (nearly) equal (a dropout
#: called twice on the same tensor); far below any regressor's scale.
RIDGE = 1e-9


def injection(a, out):
    """A dropout call's injection ``drop(a) − a`` (module docs, step 1: mean
    exactly zero), float64."""
    import torch

    return out.detach().to(torch.float64) - a.detach().to(torch.float64)


class NormJacobian:
    """``J v`` of a norm at its eval input (module docs, step 2): ``kind``
    ``"layer"`` or ``"rms"``; ``x`` the eval input (tokens × d, float64),
    ``weight`` (d,) or None, ``eps``."""

    def __init__(self, kind: str, x, weight, eps: float):
        self.centred = kind == "layer"
        if self.centred:
            x = x - x.mean(-1, keepdim=True)
        sigma = (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()
        self.xhat = x / sigma
        self.scale = 1.0 / sigma if weight is None else weight.to(x.dtype).reshape(1, -1) / sigma

    def rows(self, index) -> "NormJacobian":
        """The same ``J`` on the rows ``index`` only (it acts row by row)."""
        sub = NormJacobian.__new__(NormJacobian)
        sub.centred, sub.xhat = self.centred, self.xhat[index]
        sub.scale = self.scale[index] if self.scale.shape[0] > 1 else self.scale
        return sub

    def __call__(self, v):
        if self.centred:
            v = v - v.mean(-1, keepdim=True)
        return self.scale * (v - self.xhat * (self.xhat * v).mean(-1, keepdim=True))


def injection_plan(reached: List[dict], shapes: Dict[str, tuple]) -> Dict[str, List[str]]:
    """``{norm call: [dropout calls]}``: the dropout *module* calls reaching
    each norm whose injection has the norm input's shape (module docs,
    step 2; ``shapes``: the norm calls' ``(rows, d)``; the reached rows'
    ``injections``: ``{dropout call: its output's shape}``)."""
    import math

    plan = {}
    for s in reached:
        rows, d = shapes[s["norm"]]
        plan[s["norm"]] = [k for k, shape in s["injections"].items()
                           if shape and shape[-1] == d and math.prod(shape) == rows * d]
    return plan


def eval_jacobians(model, args, kwargs, reached: List[dict]) -> Dict[str, NormJacobian]:
    """``{norm call: J}`` from one eval forward (pre-hooks read each call's
    input; the caller sets eval mode). ``eps``: the module's ``eps`` or
    ``variance_epsilon`` (1e-5 when it has neither: only efficiency rests on it)."""
    import torch

    kinds = {s["norm"]: s["kind"] for s in reached}
    modules = dict(model.named_modules())
    out, counts = {}, {}

    def pre(name):
        def hook(module, a, kw):
            k = counts.get(name, 0)
            counts[name] = k + 1
            call = call_name(name, k)
            x = a[0] if a else next(iter(kw.values()), None)
            if call in kinds and isinstance(x, torch.Tensor):
                x = x.detach().to(torch.float64)
                x = x.reshape(-1, x.shape[-1])
                w = getattr(module, "weight", None)
                w = w.detach() if isinstance(w, torch.Tensor) and w.dim() == 1 and w.shape[0] == x.shape[-1] else None
                eps = float(getattr(module, "eps", getattr(module, "variance_epsilon", 1e-5)))
                out[call] = NormJacobian(kinds[call], x, w, eps)

        return hook

    names = {s["module"] for s in reached}
    handles = [modules[n].register_forward_pre_hook(pre(n), with_kwargs=True) for n in names]
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    finally:
        for h in handles:
            h.remove()
    return out


def _centred_squares(sum1, sum2, n):
    """``Σ (y − ȳ)²`` per element from the running sums ``Σ y`` and ``Σ y²``
    of ``n`` draws: ``Σ y² − (Σ y)²/n``."""
    return sum2 - sum1 * sum1 / n


class ControlVariate:
    """One norm call's controlled sums (module docs): ``add(y, rs)`` per
    draw (``y`` centred on the eval output, ``rs`` its regressors),
    ``refit()`` at a batch boundary, ``truth(ref)`` → ``(T̂, SE)``."""

    def __init__(self, ref, regressors: int, pilot: int, jacobian: Optional[NormJacobian] = None):
        import torch

        z = ref.new_zeros
        self.k, self.pilot, self.n = regressors, pilot, 0
        self.beta = torch.zeros(regressors, dtype=ref.dtype, device=ref.device)
        self.s1, self.s2, self.z1, self.z2, self.p1, self.p2 = (z(ref.shape) for _ in range(6))
        rows, d = ref.shape
        self.fit_rows = torch.arange(0, rows, max(1, -(-rows * d // FIT_ELEMENTS)), device=ref.device)
        self.jacobian = jacobian
        self.fit_jacobian = jacobian.rows(self.fit_rows) if jacobian is not None else None
        self.gram = z((regressors, regressors))
        self.cross = z(regressors)
        self.plain_ss = z(())
        self.active = False

    def add(self, y, injections) -> None:
        """One draw: ``y`` centred on the eval output, ``injections`` the
        ``K`` injections (rows × d; ``J`` is linear, so
        ``Σ β_k J n_k = J Σ β_k n_k``: one ``J`` for ``z``, and the
        regressors themselves only on the fitting rows)."""
        import torch

        self.n += 1
        self.s1 += y
        self.s2 += y * y
        z = y
        fit = y[self.fit_rows].reshape(-1)
        if self.k:
            r = self.fit_jacobian(torch.stack([n[self.fit_rows] for n in injections])).reshape(self.k, -1)
            self.gram += r @ r.T
            self.cross += r @ fit
            if self.active:
                weighted = injections[0] * self.beta[0]
                for b, n in zip(self.beta[1:], injections[1:]):
                    weighted.add_(n, alpha=float(b))
                z = y - self.jacobian(weighted)
        self.plain_ss += fit @ fit
        self.z1 += z
        self.z2 += z * z
        if self.n > self.pilot:
            self.p1 += z
            self.p2 += z * z

    def refit(self) -> None:
        """β from every draw so far; kept only if it lowers their pooled
        residual sum of squares (module docs, step 6)."""
        import torch

        if not self.k:
            return
        ridge = RIDGE * self.gram.diagonal().mean().clamp_min(1e-300)
        beta = torch.linalg.solve(self.gram + ridge * torch.eye(self.k, dtype=self.gram.dtype,
                                                                 device=self.gram.device), self.cross)
        residual = self.plain_ss - 2 * beta @ self.cross + beta @ self.gram @ beta
        self.active = bool(residual < self.plain_ss)
        self.beta = beta if self.active else torch.zeros_like(beta)

    def truth(self, ref):
        n = self.n
        var = (_centred_squares(self.z1, self.z2, n) / (n - 1)).clamp_min(0.0)
        return ref + self.z1 / n, (var / n).sqrt()

    def se_ratio(self) -> Optional[float]:
        """Mean plain SE² over mean controlled SE², both from all ``n``
        draws (what the estimate gained, the uncontrolled first batch included)."""
        if self.n < 2:
            return None
        controlled = _centred_squares(self.z1, self.z2, self.n).mean()
        plain = _centred_squares(self.s1, self.s2, self.n).mean()
        return float(plain / controlled) if controlled > 0 else None

    def variance_ratio(self) -> Optional[float]:
        """Mean plain per-element variance (all draws) over mean controlled
        variance (draws after the pilot batch); None before two post-pilot draws."""
        n, m = self.n, self.n - self.pilot
        if m < 2:
            return None
        plain = (_centred_squares(self.s1, self.s2, n) / (n - 1)).mean()
        controlled = (_centred_squares(self.p1, self.p2, m) / (m - 1)).mean()
        return float(plain / controlled) if controlled > 0 else None
