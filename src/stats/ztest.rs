//! The two-sided z-test of an estimate against a value stated in advance.

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, Normal};

use super::accumulator::Estimate;
use super::family::{critical_z, power_z};

/// Outcome of testing one estimate against its target.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ZTest {
    /// `(estimate − target) / stderr`.
    pub z: f64,
    /// Two-sided p-value `2 (1 − Φ(|z|))`.
    pub p_value: f64,
    /// Smallest true deviation the test detects with probability
    /// [`POWER`](super::POWER) at this standard error.
    pub mde: f64,
    /// True when `|z|` exceeds [`critical_z`].
    pub rejected: bool,
}

/// Two-sided p-value of a standard normal statistic.
pub fn two_sided_p(z: f64) -> f64 {
    if z.is_nan() {
        return f64::NAN;
    }
    2.0 * Normal::standard().sf(z.abs())
}

/// Minimum detectable effect: `(z_crit + z_power) · stderr`.
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

/// Tests `estimate` against `target`.
///
/// A zero standard error means every draw gave the same value `v`; the test
/// then compares `v` with `target` up to floating-point rounding of the two
/// computations (a bound of 16 units in the last place of the larger
/// magnitude, not a tuned tolerance): inside it `z = 0`, outside it the claim
/// is refuted with `z = ±∞` and `p = 0`.
pub fn z_test(estimate: Estimate, target: f64) -> ZTest {
    let diff = estimate.value - target;
    if estimate.stderr > 0.0 {
        let z = diff / estimate.stderr;
        return ZTest {
            z,
            p_value: two_sided_p(z),
            mde: minimum_detectable_effect(estimate.stderr),
            rejected: z.abs() > critical_z(),
        };
    }
    let rounding = 16.0 * f64::EPSILON * estimate.value.abs().max(target.abs());
    if diff.abs() <= rounding {
        ZTest {
            z: 0.0,
            p_value: 1.0,
            mde: 0.0,
            rejected: false,
        }
    } else {
        ZTest {
            z: diff.signum() * f64::INFINITY,
            p_value: 0.0,
            mde: 0.0,
            rejected: true,
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

    #[test]
    fn a_deviation_beyond_the_critical_value_is_rejected() {
        let e = Estimate {
            value: 1.0,
            stderr: 0.1,
            n: 100,
            dof: f64::INFINITY,
        };
        assert!(!z_test(e, 1.0 + 0.1 * (critical_z() - 0.01)).rejected);
        assert!(z_test(e, 1.0 + 0.1 * (critical_z() + 0.01)).rejected);
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
    }
}
