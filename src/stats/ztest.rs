//! The two-sided test of a mean against a value stated in advance, with the
//! critical value and p-value of Student-t at the estimate's degrees of
//! freedom.
//!
//! # Why Student-t
//!
//! The statistic is `t = (estimate − target) / SE` with an *estimated*
//! standard error. For normal draws `t` is exactly Student-t with the SE's
//! degrees of freedom `ν` ([`Estimate::dof`]): `n − 1` for a per-draw sample
//! variance, about one per batch for batch means, `∞` for a known SE. At the
//! suite's level α = 10⁻¹⁰ the difference matters well beyond `ν = 1000`:
//!
//! ```text
//! ν          two-sided 10⁻¹⁰ critical value   (mpmath 1.3, 40 digits,
//! 31         9.5295820                          root of I_{ν/(ν+t²)}(ν/2, 1/2) = α)
//! 499        6.6082731
//! 10⁶        6.4670203
//! ∞ (normal) 6.4669511
//! ```
//!
//! # Computation
//!
//! ```text
//! P(|T_ν| > t) = I_{ν/(ν+t²)}(ν/2, 1/2)        (regularized incomplete beta)
//! ```
//!
//! statrs evaluates `I_x(a, b)` by its continued fraction on the side
//! `x < (a+1)/(a+b+2)`; with `b = 1/2` and `t² > 1` the argument
//! `x = ν/(ν+t²)` is on that side, so the small tail is computed directly,
//! not as `1 −` a number near one (no cancellation at p ≈ 10⁻¹⁰). Above
//! [`NORMAL_DOF`] degrees of freedom the normal is used: the t quantile
//! exceeds the normal one by `(z³ + z)/(4ν) + O(ν⁻²)` (Cornish–Fisher), 7·10⁻⁶
//! at `ν = 10⁷`, which moves the size by a relative `z · 7·10⁻⁶ ≈ 5·10⁻⁵`.
//! The critical value is the root of `ln P(|T_ν| > t) = ln α`, found by
//! bisection between the normal quantile (a lower bound: t tails are
//! heavier) and a bracket doubled until it holds.

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, Normal};
use statrs::function::beta::beta_reg;

use super::accumulator::Estimate;
use super::family::{assertion_alpha, critical_z, power_z};
use crate::stats::tolerance;

/// Degrees of freedom above which Student-t is replaced by the normal (see
/// the module docs for the error this makes).
pub const NORMAL_DOF: f64 = 1e7;

/// Outcome of testing one estimate against its target.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ZTest {
    /// The test statistic on the normal scale: `(estimate − target) / stderr`
    /// for a mean (Student-t distributed under the null), the signed normal
    /// score `±Φ⁻¹(1 − p/2)` of the exact p-value for a binomial test.
    pub z: f64,
    /// Two-sided p-value (Student-t, normal or exact binomial tail).
    pub p_value: f64,
    /// Smallest true deviation the test detects with probability
    /// [`POWER`](super::POWER): `(critical + z_power) · SE` (the SE under the
    /// null for a binomial test).
    pub mde: f64,
    /// True when the null is rejected at [`assertion_alpha`].
    pub rejected: bool,
    /// The critical value `|z|` had to exceed (∞ when no rejection is
    /// possible).
    pub critical: f64,
}

/// Two-sided p-value of a standard normal statistic.
pub fn two_sided_p(z: f64) -> f64 {
    if z.is_nan() {
        return f64::NAN;
    }
    2.0 * Normal::standard().sf(z.abs())
}

/// Two-sided p-value `P(|T_ν| > |t|)` of Student-t with `dof` degrees of
/// freedom (the normal above [`NORMAL_DOF`]; NaN for `dof` < 1 or NaN `t`).
pub fn two_sided_t_p(t: f64, dof: f64) -> f64 {
    if t.is_nan() || dof.is_nan() || dof < 1.0 {
        return f64::NAN;
    }
    if dof > NORMAL_DOF {
        return two_sided_p(t);
    }
    if t.is_infinite() {
        return 0.0;
    }
    beta_reg(dof / 2.0, 0.5, dof / (dof + t * t))
}

/// Two-sided critical value of Student-t with `dof` degrees of freedom at
/// [`assertion_alpha`] (∞ below one degree of freedom: no test is possible).
pub fn critical_value(dof: f64) -> f64 {
    critical_value_at(assertion_alpha(), dof)
}

/// Two-sided critical value of Student-t with `dof` degrees of freedom at
/// level `alpha` (a one-sided test at level `a` uses `alpha = 2a`).
pub fn critical_value_at(alpha: f64, dof: f64) -> f64 {
    if dof.is_nan() || dof < 1.0 || !(alpha > 0.0 && alpha < 1.0) {
        return f64::INFINITY;
    }
    let normal = Normal::standard().inverse_cdf(1.0 - alpha / 2.0);
    if dof > NORMAL_DOF {
        return normal;
    }
    let target = alpha.ln();
    let excess = |t: f64| two_sided_t_p(t, dof).ln() - target;
    let mut lo = normal;
    let mut hi = 2.0 * lo;
    while excess(hi) > 0.0 {
        lo = hi;
        hi *= 2.0;
    }
    // 200 halvings reach the spacing of doubles for any bracket below 1e30.
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if mid <= lo || mid >= hi {
            break;
        }
        if excess(mid) > 0.0 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

/// Minimum detectable effect of the normal-limit test:
/// `(z_crit + z_power) · stderr`.
pub fn minimum_detectable_effect(stderr: f64) -> f64 {
    (critical_z() + power_z()) * stderr
}

/// The power of the two-sided test at [`critical_z`] against a true shift
/// of `lambda` standard errors: the statistic is `N(λ, 1)`, so
///
/// ```text
/// π(λ) = Φ(|λ| − z_crit) + Φ(−|λ| − z_crit)
/// ```
///
/// (`π(0)` is the per-assertion level; `π(z_crit) ≈ 1/2`.)
pub fn rejection_probability(lambda: f64) -> f64 {
    let normal = Normal::standard();
    let zc = critical_z();
    normal.cdf(lambda.abs() - zc) + normal.cdf(-lambda.abs() - zc)
}

/// Tests the mean `estimate` against `target` with Student-t at
/// `estimate.dof` degrees of freedom.
///
/// A zero standard error means every draw gave the same value `v`; the test
/// then compares `v` with `target` up to the rounding of the two
/// computations ([`tolerance::zero_spread`]): inside it `z = 0`, outside it
/// the claim is refuted with `z = ±∞` and `p = 0`.
pub fn z_test(estimate: Estimate, target: f64) -> ZTest {
    let diff = estimate.value - target;
    if estimate.dof.is_nan() || estimate.dof < 1.0 {
        // No degrees of freedom: the standard error was not estimated at all
        // (one draw, or one batch of batch means), so neither a t-test nor
        // the zero-spread comparison (which needs every draw to agree) says
        // anything. No rejection is possible.
        return ZTest {
            z: 0.0,
            p_value: 1.0,
            mde: f64::INFINITY,
            rejected: false,
            critical: f64::INFINITY,
        };
    }
    if estimate.stderr > 0.0 {
        let t = diff / estimate.stderr;
        let critical = critical_value(estimate.dof);
        return ZTest {
            z: t,
            p_value: two_sided_t_p(t, estimate.dof),
            mde: (critical + power_z()) * estimate.stderr,
            rejected: t.abs() > critical,
            critical,
        };
    }
    if diff.abs() <= tolerance::zero_spread(estimate.value, target) {
        exact_agreement(0.0)
    } else {
        exact_agreement(diff)
    }
}

/// The outcome of a comparison without sampling error: agreement (`diff =
/// 0`) or refutation (`z = ±∞`, `p = 0`).
pub fn exact_agreement(diff: f64) -> ZTest {
    if diff == 0.0 {
        ZTest {
            z: 0.0,
            p_value: 1.0,
            mde: 0.0,
            rejected: false,
            critical: 0.0,
        }
    } else {
        ZTest {
            z: diff.signum() * f64::INFINITY,
            p_value: 0.0,
            mde: 0.0,
            rejected: true,
            critical: 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p_values_match_the_normal_table() {
        // 2(1 − Φ(1.96)) = erfc(1.96/√2) = 0.04999579029644087 (Python math.erfc).
        let p = two_sided_p(1.96);
        // statrs's erfc is accurate to about 1e-10 relative here.
        assert!((p - 0.04999579029644087).abs() < 1e-11, "p = {p}");
        assert!((two_sided_p(-1.96) - two_sided_p(1.96)).abs() == 0.0);
        assert_eq!(two_sided_p(0.0), 1.0);
    }

    /// Reference values by mpmath 1.3 at 40 digits (an implementation
    /// independent of statrs): `betainc(ν/2, 1/2, 0, ν/(ν+t²),
    /// regularized=True)` and its root in `t` at 10⁻¹⁰ (`findroot`).
    #[allow(clippy::excessive_precision)]
    const T_TABLE: [(f64, f64, f64); 4] = [
        // (ν, critical value, P(|T_ν| > 7))
        (31.0, 9.529_582_007_067_767, 7.403_442_571_849_031e-8),
        (499.0, 6.608_273_118_534_548, 8.296_233_200_340_711e-12),
        (1e4, 6.473_880_541_991_106, 2.724_031_560_679_828e-12),
        (1e6, 6.467_020_318_940_858, 2.561_224_111_374_079e-12),
    ];

    #[test]
    fn student_t_matches_an_independent_high_precision_table() {
        for (nu, crit, tail) in T_TABLE {
            let c = critical_value(nu);
            // Bisection to the spacing of doubles on a p-value accurate to
            // about 1e-12 relative (statrs continued fraction): the root
            // moves by that over d ln p / dt ≈ t, far below 1e-9.
            assert!((c - crit).abs() < 1e-9 * crit, "ν = {nu}: {c} vs {crit}");
            let p = two_sided_t_p(7.0, nu);
            assert!((p - tail).abs() < 1e-9 * tail, "ν = {nu}: {p} vs {tail}");
        }
        // Above NORMAL_DOF the normal quantile (6.4669510872405162, mpmath).
        assert!((critical_value(1e8) - 6.466_951_087_240_516).abs() < 1e-6);
        assert_eq!(critical_value(0.5), f64::INFINITY);
        assert_eq!(critical_value(f64::INFINITY), critical_z());
    }

    #[test]
    fn a_deviation_beyond_the_critical_value_is_rejected() {
        for dof in [31.0, 499.0, f64::INFINITY] {
            let e = Estimate {
                value: 1.0,
                stderr: 0.1,
                n: 100,
                dof,
            };
            let c = critical_value(dof);
            assert!(!z_test(e, 1.0 + 0.1 * (c - 0.01)).rejected);
            assert!(z_test(e, 1.0 + 0.1 * (c + 0.01)).rejected);
        }
        // At 31 dof the normal cut-off 6.47 is not a rejection.
        let e = Estimate {
            value: 0.0,
            stderr: 1.0,
            n: 32,
            dof: 31.0,
        };
        assert!(!z_test(e, 7.0).rejected);
    }

    #[test]
    fn an_estimate_without_degrees_of_freedom_cannot_reject() {
        // One batch of batch means: stderr 0 and dof 0 say nothing about the
        // spread, unlike n draws that all agreed.
        let e = Estimate {
            value: 1.0,
            stderr: 0.0,
            n: 4096,
            dof: 0.0,
        };
        let t = z_test(e, 2.0);
        assert!(!t.rejected && t.critical.is_infinite(), "{t:?}");
    }

    #[test]
    fn a_zero_spread_estimate_is_compared_up_to_rounding() {
        let e = Estimate {
            value: 0.1 + 0.2,
            stderr: 0.0,
            n: 10,
            dof: 9.0,
        };
        assert!(!z_test(e, 0.3).rejected);
        assert!(z_test(e, 0.31).rejected);
        assert_eq!(z_test(e, 0.31).p_value, 0.0);
    }

    #[test]
    fn the_mde_is_critical_plus_power_quantile_times_se() {
        // z_crit 6.466951 + Φ⁻¹(0.8) 0.841621 (Python statistics.NormalDist).
        assert!((minimum_detectable_effect(1.0) - (6.466951 + 0.841621)).abs() < 1e-5);
        let e = Estimate {
            value: 0.0,
            stderr: 1.0,
            n: 32,
            dof: 31.0,
        };
        assert!((z_test(e, 0.0).mde - (9.529_582 + 0.841_621)).abs() < 1e-5);
    }
}
