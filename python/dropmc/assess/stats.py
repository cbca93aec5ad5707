"""The paired test behind :func:`dropmc.assess.assess`: per unit ``u`` the
difference ``d_u = metric(variant)_u − metric(plain)_u`` of two forwards
on the same unit, so the unit's own difficulty cancels.

Step by step, for ``n`` units:

1. ``Δ = mean_u d_u``, ``s² = Σ_u (d_u − Δ)² / (n − 1)`` (unbiased),
   ``SE = s / √n``: the standard error of ``Δ`` when the units are
   independent (windows, sequences, structures drawn separately; the
   tokens of one window are not independent, which is why the unit is the
   user's).
2. ``t = Δ / SE``. Under "no effect" (``E d = 0``) and normal ``d``, ``t``
   follows Student's t with ``n − 1`` degrees of freedom exactly; for other
   ``d`` asymptotically (central limit). The two-sided p-value is
   ``P(|T| ≥ |t|) = I_{ν/(ν+t²)}(ν/2, 1/2)`` with ``ν = n − 1`` and ``I``
   the regularised incomplete beta function (computed below from its
   continued fraction, accurate in relative terms deep in the tail, which
   the suite's level of ``1e-10`` needs). Student t at every ``n``: it
   tends to the normal as ``n`` grows, so no switch point is needed.
3. ``SE = 0``: every ``d_u`` is equal. ``Δ = 0`` is no effect (``p = 1``);
   ``Δ ≠ 0`` is an effect the data decide without noise (``p = 0``,
   ``t`` reported as None, not infinity).
4. Validity: ``s²`` needs ``n ≥ 2`` (one degree of freedom); below that
   there is no test (:data:`MIN_UNITS_PER_TEST`).
5. Minimum detectable effect at power ``π`` (the suite's
   :func:`dropmc.mde_power`) and two-sided level ``a``: the true ``|Δ|``
   at which a t-test rejects with probability about ``π``,
   ``MDE = (t_{1−a/2, ν} + t_{π, ν}) · SE`` (the usual normal-theory
   approximation with t quantiles in place of normal ones).
6. Multiplicity (Holm's step-down): sort a family's ``m`` p-values
   ascending, ``p_(1) ≤ … ≤ p_(m)``; reject ``p_(i)`` while
   ``p_(i) ≤ α / (m − i + 1)``, stop at the first that is not. The chance
   of any false "better"/"worse" in the family is at most ``α`` whatever
   the dependence between the tests (Holm 1979). The adjusted p-value is
   ``max_{j ≤ i} min(1, (m − j + 1) p_(j))``.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence

#: A test's minimum number of units: the sample variance needs one degree
#: of freedom (step 4).
MIN_UNITS_PER_TEST = 2


#: The level of the screen on half A that chooses the sites to recommend
#: (two-sided, per site, no multiplicity). The screen is not a claim:
#: whichever sites it picks, the claim is the one test of the picked set on
#: half B, whose units the screen never saw, so the chance of recommending
#: a set that is not better is at most ``alpha`` at any screen level. A
#: strict screen would only drop sites with a real but modest effect; a
#: lenient one lets them be confirmed (or not) on half B.
SCREEN_LEVEL = 0.05


def suite_alpha() -> float:
    """The suite's two-sided per-assertion level, read off its critical
    ``|z|`` (:func:`dropmc.critical_z`): ``α = 2 (1 − Φ(z_c)) = erfc(z_c / √2)``
    (``FAMILY_ALPHA / SUITE_ASSERTION_BUDGET`` of src/stats/family.rs, 1e-10)."""
    from ..checks.core import critical_z

    return math.erfc(critical_z() / math.sqrt(2.0))


def suite_power() -> float:
    """The power the MDEs are quoted at: the suite's :func:`dropmc.mde_power` (0.8)."""
    from ..checks.core import mde_power

    return mde_power()


def _beta_fraction(x: float, a: float, b: float) -> float:
    """The continued fraction of ``I_x(a, b)`` (modified Lentz), for
    ``x < (a + 1) / (a + b + 2)`` where it converges quickly."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        step = d * c
        h *= step
        if abs(step - 1.0) < eps:
            break
    return h


def _incomplete_beta(x: float, a: float, b: float) -> float:
    """The regularised incomplete beta ``I_x(a, b)``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(x, a, b) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(1.0 - x, b, a) / b


def t_two_sided(t: float, df: float) -> float:
    """``P(|T| ≥ |t|)`` for Student's t with ``df`` degrees of freedom (step 2)."""
    return _incomplete_beta(df / (df + t * t), df / 2.0, 0.5)


def t_quantile(prob: float, df: float) -> float:
    """The ``prob`` quantile of Student's t (``prob`` in (0, 1)), by
    bisection on :func:`t_two_sided` (monotone in ``|t|``)."""
    if prob == 0.5:
        return 0.0
    tail = 2.0 * min(prob, 1.0 - prob)  # the two-sided level of |t|
    lo, hi = 0.0, 1.0
    while t_two_sided(hi, df) > tail:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_two_sided(mid, df) > tail:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    q = 0.5 * (lo + hi)
    return q if prob > 0.5 else -q


def paired(diffs: Sequence[float], level: float, power: float) -> Dict[str, Optional[float]]:
    """Steps 1–3 and 5 on the differences ``diffs`` (at least
    :data:`MIN_UNITS_PER_TEST`): ``{"n", "delta", "se", "t", "p", "mde"}``,
    the MDE at two-sided ``level`` and ``power``."""
    n = len(diffs)
    if n < MIN_UNITS_PER_TEST:
        raise ValueError(f"a paired test needs at least {MIN_UNITS_PER_TEST} units, got {n}")
    mean = math.fsum(diffs) / n
    var = math.fsum((d - mean) ** 2 for d in diffs) / (n - 1)
    se = math.sqrt(var / n)
    df = n - 1
    mde = (t_quantile(1.0 - level / 2.0, df) + t_quantile(power, df)) * se
    if se == 0.0:
        return {"n": n, "delta": mean, "se": 0.0, "t": None if mean != 0.0 else 0.0,
                "p": 0.0 if mean != 0.0 else 1.0, "mde": 0.0}
    t = mean / se
    return {"n": n, "delta": mean, "se": se, "t": t, "p": t_two_sided(t, df), "mde": mde}


def holm(p_values: Sequence[float], alpha: float) -> List[tuple]:
    """Step 6: ``[(rejected, adjusted p)]`` in the input order."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    out: List[tuple] = [(False, 1.0)] * m
    running, stopped = 0.0, False
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        stopped = stopped or p_values[i] > alpha / (m - rank)
        out[i] = (not stopped, running)
    return out


def verdict(test: Dict[str, Optional[float]], rejected: bool) -> str:
    """"better" (lower metric), "worse" or "no effect"."""
    if not rejected:
        return "no effect"
    return "better" if test["delta"] < 0 else "worse"
