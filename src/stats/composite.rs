//! A mean tested against an interval of targets: a composite null.
//!
//! # Setting
//!
//! Some claims state not one value but a set: a dropout computed in a
//! narrow dtype may keep any of several admissible roundings of `x/q`, so
//! its mean is `q·s` for some `s` between the smallest and the largest
//! admissible rounding, and every moment lies in an interval `[lo, hi]`
//! computed exactly from the input, the dtype and `q`. The null is "the
//! estimate's expectation `θ` lies in `[lo, hi]`".
//!
//! # The test
//!
//! Step by step:
//!
//! 1. The nearest admissible target to the estimate `m` is
//!    `t = clamp(m, lo, hi)`: `m` itself inside the interval, the nearer
//!    end outside it.
//! 2. The test is the simple test of `m` against `t` ([`Statistic::test`]:
//!    Student-t with the estimate's own standard error for a mean), so it
//!    rejects only when `m` lies outside the interval by more than the
//!    critical value times the standard error at the nearest end, and its
//!    `z`, p-value and minimum detectable effect are those of that test.
//!
//! # Its size
//!
//! For a true `θ ∈ [lo, hi]` the test rejects when `m < lo − c·SE` or
//! `m > hi + c·SE` (`c` the critical value); since `lo ≤ θ ≤ hi` these
//! events lie inside `m < θ − c·SE` and `m > θ + c·SE`, the simple test's
//! rejection set at `θ`. So the composite test's size at any `θ` of the
//! interval is at most the simple test's size there, and its size is at
//! most that of the simple test at the worst point of the interval: the
//! claim's stated size does not grow. `tests/test_sizes.rs` enumerates it
//! exactly for two-point draws at the minimum budget.

use super::accumulator::Estimate;
use super::statistic::Statistic;
use super::ztest::ZTest;

/// The admissible target nearest to `value` in `[lo, hi]` (step 1).
pub fn nearest_in(value: f64, lo: f64, hi: f64) -> f64 {
    value.clamp(lo.min(hi), lo.max(hi))
}

/// Tests `estimate` against the interval `[lo, hi]` of admissible targets
/// (steps 1–2 of the module docs); returns the test and the target it was
/// run against.
pub fn interval_test(statistic: Statistic, estimate: Estimate, lo: f64, hi: f64) -> (ZTest, f64) {
    let target = nearest_in(estimate.value, lo, hi);
    (statistic.test(estimate, target), target)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn estimate(value: f64, stderr: f64) -> Estimate {
        Estimate {
            value,
            stderr,
            n: 1_000_000,
            dof: 999_999.0,
        }
    }

    #[test]
    fn inside_the_interval_is_no_deviation_and_outside_is_measured_from_the_nearer_end() {
        let mean = Statistic::DEFAULT;
        let (inside, t) = interval_test(mean, estimate(1.5, 0.01), 1.0, 2.0);
        assert_eq!((inside.z, t, inside.rejected), (0.0, 1.5, false));
        let (below, t) = interval_test(mean, estimate(0.9, 0.01), 1.0, 2.0);
        assert_eq!(t, 1.0);
        assert!((below.z + 10.0).abs() < 1e-9 && below.rejected, "{below:?}");
        let (above, t) = interval_test(mean, estimate(2.05, 0.01), 2.0, 1.0);
        assert_eq!(t, 2.0);
        assert!((above.z - 5.0).abs() < 1e-9 && !above.rejected, "{above:?}");
    }
}
