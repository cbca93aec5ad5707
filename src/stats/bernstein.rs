//! The distribution-free test of a mean that decides gross errors below a
//! claim's minimum budget: the empirical Bernstein bound on a statistic of
//! known range.
//!
//! # Why a second test
//!
//! Student-t has its stated size only from the claim's minimum budget on
//! ([`super::mean_min_samples`], a Cramér-type expansion in `γ/√n`). Below
//! it nothing controls the t-test's size, so a claim there was
//! `inconclusive` whatever its `z` — even an RMSNorm declared as a LayerNorm
//! at `z ≈ 1.5·10³`. A bound that holds at *every* `n` for *every* law on an
//! interval of known width decides such a deviation at the suite's
//! per-assertion level without any normal approximation.
//!
//! # The bound (Maurer & Pontil 2009, *Empirical Bernstein bounds and
//! sample variance penalization*, COLT, Theorem 4)
//!
//! Chebyshev or Cantelli would need the variance under the null and, at
//! α = 10⁻¹⁰, `10⁵` standard errors; Hoeffding needs only the range but
//! ignores a small variance. Bernstein's inequality with the variance
//! replaced by the sample variance keeps both: step by step,
//!
//! 1. For `n ≥ 2` i.i.d. draws `Y_i ∈ [0, 1]` with mean `μ`, sample mean
//!    `Ȳ` and unbiased sample variance `s_Y²`, and `δ ∈ (0, 1)`, Theorem 4
//!    states, with `L = ln(2/δ)`,
//!
//!    ```text
//!    P( μ − Ȳ > √(2 s_Y² L / n) + 7 L / (3 (n − 1)) ) ≤ δ.
//!    ```
//!
//! 2. A statistic `T` in an interval `[a, a + W]` is `T = a + W Y`: its
//!    mean, deviation and sample standard deviation scale by `W`, so the
//!    same holds for `T` with `√(2 s_T² L / n) + 7 W L / (3 (n − 1))`.
//! 3. `a + W − T` lies in an interval of the same width: the same bound
//!    holds for `T̄ − μ`. Each side at `δ = α/2` gives the two-sided bound
//!    at `α` with `L = ln(4/α)` ([`TWO_SIDED_TAILS`] `= 4`).
//! 4. The estimate's standard error is `SE = s_T / √n` (a per-draw sample
//!    variance, `n − 1` degrees of freedom), so `√(2 s_T² L / n) = SE √(2 L)`:
//!
//!    ```text
//!    b(α) = SE · √(VARIANCE_TERM · L) + RANGE_TERM · W · L / (n − 1),
//!    L = ln(TWO_SIDED_TAILS / α),   VARIANCE_TERM = 2,   RANGE_TERM = 7/3,
//!    ```
//!
//!    and rejecting when `|T̄ − target| > b(α)` has size at most `α` at
//!    every `n ≥ 2` under any null law on the interval. The size is
//!    measured exactly for two-point laws (which a dropped-out unit has) in
//!    `tests/test_sizes.rs`.
//!
//! # What it reports
//!
//! `z = (T̄ − target) / SE` as the t-test does (how many standard errors
//! the deviation is); the p-value is the **bound's**: the smallest `α′` at
//! which `b(α′) ≤ |T̄ − target|`, solved from the quadratic in `√L`
//! (`RANGE_TERM W/(n−1) · s² + SE √2 · s − |T̄ − target| = 0`, `s = √L`),
//! `p = min(1, 4 e^{−L})`. The critical value is `b(α)/SE`, and the MDE
//! `b(α) + z_power · SE` (the deviation rejected with probability
//! [`super::POWER`] while the mean is about normal, as for the t-test).
//!
//! # The range under the null
//!
//! A claim states the width of each component's interval under the null
//! (`Claim::null_range`; a scaled count's draws are `{0, target/keep}`).
//! A correct implementation in a narrow dtype rounds its outputs, so the
//! stated width is widened by [`NULL_RANGE_SLACK`].

use super::accumulator::{Estimate, per_draw_dof};
use super::family::{assertion_alpha, power_z};
use super::ztest::ZTest;

/// The two tails, each at `α/2`, of the two-sided bound: `L = ln(4/α)`
/// (step 3 of the module docs).
pub const TWO_SIDED_TAILS: f64 = 4.0;
/// The factor of `SE² L` under the square root (Theorem 4's `2`).
pub const VARIANCE_TERM: f64 = 2.0;
/// The factor of `W L / (n − 1)` (Theorem 4's `7/3`).
pub const RANGE_TERM: f64 = 7.0 / 3.0;
/// Relative widening of a stated null range for the rounding of a correct
/// implementation: bfloat16's unit roundoff is `2⁻⁸`, and an output is a
/// few (at most four) roundings from its exact value, `4 · 2⁻⁸ = 1/64`.
pub const NULL_RANGE_SLACK: f64 = 1.0 / 64.0;

/// `L = ln(4/α)` at level `alpha`.
fn log_term(alpha: f64) -> f64 {
    (TWO_SIDED_TAILS / alpha).ln()
}

/// The two-sided empirical Bernstein deviation bound `b(α)` of the module
/// docs, for the mean of `n` draws with standard error `stderr` in an
/// interval of width `width`.
pub fn bernstein_deviation(stderr: f64, n: u64, width: f64, alpha: f64) -> f64 {
    let l = log_term(alpha);
    let range = RANGE_TERM * width * l / (n as f64 - 1.0);
    stderr * (VARIANCE_TERM * l).sqrt() + range
}

/// The bound's two-sided p-value for a deviation `deviation` (module docs):
/// `min(1, 4 e^{−L})` with `L` the root of `b = deviation`.
pub fn bernstein_p_value(deviation: f64, stderr: f64, n: u64, width: f64) -> f64 {
    let t = deviation.abs();
    let a = stderr * VARIANCE_TERM.sqrt();
    let c = RANGE_TERM * width / (n as f64 - 1.0);
    let root = if c > 0.0 {
        // c s² + a s − t = 0, the positive root, written without
        // cancellation: s = 2t / (a + √(a² + 4ct)).
        2.0 * t / (a + (a * a + 4.0 * c * t).sqrt())
    } else if a > 0.0 {
        t / a
    } else {
        f64::INFINITY
    };
    (TWO_SIDED_TAILS * (-root * root).exp()).min(1.0)
}

/// The bound test of `estimate` against `target` for a statistic in an
/// interval of width `width` under the null, at [`assertion_alpha`];
/// `None` when the estimate's standard error is not a per-draw sample
/// variance's (`dof ≠ n − 1`: batch means), when `n < 2`, or when the width
/// is not a finite non-negative number (no bound applies).
pub fn bernstein_test(estimate: Estimate, target: f64, width: f64) -> Option<ZTest> {
    let n = estimate.n;
    if n < 2 || estimate.dof != per_draw_dof(n) || !(width.is_finite() && width >= 0.0) {
        return None;
    }
    let width = width * (1.0 + NULL_RANGE_SLACK);
    let se = estimate.stderr;
    let diff = estimate.value - target;
    let bound = bernstein_deviation(se, n, width, assertion_alpha());
    let z = if diff == 0.0 { 0.0 } else { diff / se };
    let critical = if se > 0.0 { bound / se } else { f64::INFINITY };
    Some(ZTest {
        z,
        p_value: bernstein_p_value(diff, se, n, width),
        mde: bound + power_z() * se,
        rejected: diff.abs() > bound,
        critical,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn estimate(value: f64, stderr: f64, n: u64) -> Estimate {
        Estimate {
            value,
            stderr,
            n,
            dof: per_draw_dof(n),
        }
    }

    #[test]
    fn the_bound_follows_the_theorem_term_by_term() {
        // α = 1e-10: L = ln(4e10) = 24.412145 (Python math.log(4e10)).
        let l: f64 = 24.412_145_291_060_348;
        let b = bernstein_deviation(0.01, 1001, 2.0, 1e-10);
        let want = 0.01 * (2.0f64 * l).sqrt() + 7.0 / 3.0 * 2.0 * l / 1000.0;
        assert!((b - want).abs() <= 1e-12 * want, "{b} vs {want}");
    }

    #[test]
    fn the_p_value_inverts_the_bound() {
        // At the deviation b(α′) the p-value is α′, for several α′.
        for alpha in [1e-3, 1e-10, 1e-30] {
            let b = bernstein_deviation(0.02, 500, 3.0, alpha);
            let p = bernstein_p_value(b, 0.02, 500, 3.0);
            assert!((p / alpha - 1.0).abs() < 1e-9, "{p} vs {alpha}");
        }
        assert_eq!(bernstein_p_value(0.0, 0.02, 500, 3.0), 1.0);
    }

    #[test]
    fn a_gross_deviation_is_rejected_and_a_small_one_is_not() {
        let e = estimate(1.0, 0.001, 20_000);
        assert!(bernstein_test(e, 1.5, 10.0).expect("a bound").rejected);
        assert!(!bernstein_test(e, 1.005, 10.0).expect("a bound").rejected);
        // Batch means (dof not n − 1) and an unknown width get no bound.
        let batch = Estimate { dof: 3.0, ..e };
        assert!(bernstein_test(batch, 1.5, 10.0).is_none());
        assert!(bernstein_test(e, 1.5, f64::NAN).is_none());
    }
}
