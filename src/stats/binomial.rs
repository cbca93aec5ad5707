//! The exact two-sided binomial test of a count against `Binomial(N, p₀)`.
//!
//! A per-draw statistic in `{0, 1}` (an indicator: "the kept count is 0",
//! "column k is all zero") has a mean whose sample standard error is 0 when
//! the event never happened, and a normal approximation that is far from its
//! stated size in the tails for small `N p₀`: `P(K = 0) = 0.3⁶` at 2000
//! draws expects 1.5 events. The count itself is exactly binomial under the
//! null, so it is tested exactly.
//!
//! # The test
//!
//! ```text
//! k   = round(p̂ · N)                         (the observed count)
//! lo  = P(X ≤ k),  hi = P(X ≥ k),  X ~ Binomial(N, p₀)
//! p   = min(1, 2 · min(lo, hi))              (doubling the smaller tail)
//! reject when p ≤ α
//! ```
//!
//! Doubling keeps the size at most α for every `N` and `p₀` (each tail is
//! rejected with probability at most α/2 because `P(lo ≤ α/2) ≤ α/2` for a
//! discrete cdf), so no minimum budget is needed: at a small `N` the test is
//! merely powerless. The reported `z` is the signed normal score of `p`,
//! `sign(k − N p₀) Φ⁻¹(1 − p/2)`, so tables compare it with
//! [`critical_z`](super::critical_z).
//!
//! # Computation of a tail
//!
//! On the side of the mode the count lies on, the tail's terms decrease
//! monotonically away from `k`, with ratio
//!
//! ```text
//! P(j−1)/P(j) = j (1−p₀) / ((N−j+1) p₀)        (downwards, j ≤ mode)
//! P(j+1)/P(j) = (N−j) p₀ / ((j+1) (1−p₀))      (upwards, j ≥ mode)
//! ```
//!
//! which itself decreases away from the mode, so once a term `t` has ratio
//! `r < 1` the rest of the tail is below `t r / (1 − r)`; the sum stops when
//! that is below `10⁻¹⁷` of the sum. `P(k)` comes from `ln Γ` (statrs),
//! relative error about `10⁻¹⁶ · ln Γ(N) ≤ 10⁻⁷` for `N ≤ 10⁹`, ample for a
//! comparison with α = 10⁻¹⁰.

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, Normal};
use statrs::function::gamma::ln_gamma;

use super::family::{assertion_alpha, critical_z, power_z};
use super::ztest::ZTest;
use crate::stats::tolerance;

/// An observed count with its null distribution.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BinomialTest {
    pub count: u64,
    pub trials: u64,
    pub p0: f64,
    pub p_value: f64,
}

/// `ln P(X = k)` for `X ~ Binomial(n, p)`, `0 < p < 1`.
pub(crate) fn ln_pmf(n: u64, k: u64, p: f64) -> f64 {
    let (nf, kf) = (n as f64, k as f64);
    ln_gamma(nf + 1.0) - ln_gamma(kf + 1.0) - ln_gamma(nf - kf + 1.0)
        + kf * p.ln()
        + (nf - kf) * (-p).ln_1p()
}

/// `P(X ≤ k)` when `down`, else `P(X ≥ k)`, summed from `k` away from the
/// mode (the caller picks the side `k` is on).
fn tail(n: u64, k: u64, p: f64, down: bool) -> f64 {
    let mut term = ln_pmf(n, k, p).exp();
    let mut sum = term;
    let mut j = k;
    loop {
        if (down && j == 0) || (!down && j == n) {
            return sum.min(1.0);
        }
        let (jf, nf) = (j as f64, n as f64);
        let ratio = if down {
            jf * (1.0 - p) / ((nf - jf + 1.0) * p)
        } else {
            (nf - jf) * p / ((jf + 1.0) * (1.0 - p))
        };
        term *= ratio;
        sum += term;
        j = if down { j - 1 } else { j + 1 };
        if ratio < 1.0 && tolerance::series_tail_is_negligible(term * ratio / (1.0 - ratio), sum) {
            return sum.min(1.0);
        }
    }
}

/// The exact two-sided p-value of `count` successes in `trials` trials
/// against success probability `p0` (see the module docs).
pub fn binomial_test(count: u64, trials: u64, p0: f64) -> BinomialTest {
    BinomialTest {
        count,
        trials,
        p0,
        p_value: doubled_tail(count, trials, p0, 0.0),
    }
}

/// The two-sided mid-p value of the same test: the doubled tail with half
/// the observed count's own probability, `2 (P(X < k) + P(X = k)/2)` on the
/// side of the mode `k` lies on (capped at 1). It differs by at most
/// `P(X = k)` from the randomized p-value `2 min(U, 1 − U)`, `U = P(X < k)
/// + V P(X = k)` with `V ~ U(0, 1)`, which is exactly uniform under the
/// null (away from the mode, where both tails are near 1/2 and the cap
/// applies): so its cdf is within the largest atom `max_k P(X = k)` of the
/// uniform one, where the p-value above is stochastically larger than
/// uniform by up to that atom. It is what a uniformity test of the
/// discrete test's p-values reads ([`crate::conformance::verify::calibrate`]). Not a test: the
/// verdict uses [`binomial_test`], whose size is at most α.
pub fn binomial_mid_p(count: u64, trials: u64, p0: f64) -> f64 {
    let own = if count <= trials && p0 > 0.0 && p0 < 1.0 {
        ln_pmf(trials, count, p0).exp()
    } else {
        0.0
    };
    doubled_tail(count, trials, p0, own)
}

/// `min(1, 2 · tail − own)`, the tail on the mode's side of `count`
/// including `count` (the p-value for `own = 0`, the mid-p for `own =
/// P(X = count)`).
fn doubled_tail(count: u64, trials: u64, p0: f64, own: f64) -> f64 {
    if count > trials || !(0.0..=1.0).contains(&p0) {
        0.0
    } else if p0 == 0.0 || p0 == 1.0 {
        let certain = if p0 == 0.0 { 0 } else { trials };
        if count == certain { 1.0 } else { 0.0 }
    } else {
        let mode = ((trials as f64 + 1.0) * p0).floor() as u64;
        let smaller = if count <= mode {
            tail(trials, count, p0, true)
        } else {
            tail(trials, count, p0, false)
        };
        (2.0 * smaller - own).clamp(0.0, 1.0)
    }
}

/// The count `round(p̂ · N)` a proportion stands for (`u64::MAX`, an
/// impossible count, when it is negative or not finite).
fn observed_count(p_hat: f64, trials: u64) -> u64 {
    let observed = p_hat * trials as f64;
    if observed.is_finite() && observed >= 0.0 {
        observed.round() as u64
    } else {
        u64::MAX
    }
}

/// The mid-p value ([`binomial_mid_p`]) of the proportion `p_hat` of
/// `trials` trials against `p0`, the count read as [`proportion_test`]
/// reads it.
pub fn proportion_mid_p(p_hat: f64, trials: u64, p0: f64) -> f64 {
    binomial_mid_p(observed_count(p_hat, trials), trials, p0)
}

/// Tests the observed proportion `p_hat` of `trials` Bernoulli trials
/// against `p0`, as a [`ZTest`] row: `z` is the signed normal score of the
/// exact p-value and the MDE is `(z_crit + z_power) √(p₀(1−p₀)/N)`, the
/// normal-limit effect at the null's standard error.
pub fn proportion_test(p_hat: f64, trials: u64, p0: f64) -> ZTest {
    let expected = p0 * trials as f64;
    let observed = p_hat * trials as f64;
    let test = binomial_test(observed_count(p_hat, trials), trials, p0);
    let score = if test.p_value >= 1.0 {
        0.0
    } else if test.p_value <= 0.0 {
        f64::INFINITY
    } else {
        Normal::standard().inverse_cdf(1.0 - test.p_value / 2.0)
    };
    let sign = if observed < expected { -1.0 } else { 1.0 };
    let null_se = (p0 * (1.0 - p0) / trials.max(1) as f64).sqrt();
    ZTest {
        z: sign * score,
        p_value: test.p_value,
        mde: (critical_z() + power_z()) * null_se,
        rejected: test.p_value <= assertion_alpha(),
        critical: critical_z(),
    }
}

/// The rounding of a tail of `Binomial(n, ·)` summed from [`ln_pmf`]: each
/// term is `exp` of three `ln Γ(≤ n + 1)` and two products, so its relative
/// error is that exponent's absolute error,
/// [`tolerance::LN_PMF_ROUNDINGS`] ulps of `3 ln Γ(n + 1)`; then at most `n`
/// additions of terms summing to ≤ 1.
#[cfg(test)]
pub(crate) fn tail_rounding(n: u64) -> f64 {
    let exponent =
        tolerance::LN_PMF_ROUNDINGS * 3.0 * ln_gamma(n as f64 + 1.0).max(1.0) * f64::EPSILON;
    exponent + tolerance::gamma(n as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference tails by mpmath 1.3 (40 digits, exact sums of
    /// `binomial(n, j) p^j (1−p)^(n−j)`).
    #[test]
    fn tails_match_exact_sums() {
        // n = 2000, p = 0.3^6 = 0.000729: P(X = 0) = (1 − p)^2000.
        let p = 0.000729;
        let t = binomial_test(0, 2000, p);
        let want = 2.0 * 0.232_577_517_848_691_7;
        assert!((t.p_value - want).abs() < 1e-12, "{t:?}");
        // n = 10⁶, p = 0.7, k = 700 000 + 3000: upper tail 2.8468e-11, doubled.
        let t = binomial_test(703_000, 1_000_000, 0.7);
        let want = 2.0 * 2.846_753_646_622_116_8e-11;
        assert!((t.p_value - want).abs() < 1e-6 * want, "{t:?}");
    }

    #[test]
    fn the_mid_p_takes_half_the_observed_atom_off_the_doubled_tail() {
        // n = 10, p = 1/2, k = 2: P(X ≤ 2) = 56/1024, P(X = 2) = 45/1024,
        // so p = 112/1024 and mid-p = (112 − 45)/1024 = 67/1024.
        let (p, mid) = (
            binomial_test(2, 10, 0.5).p_value,
            binomial_mid_p(2, 10, 0.5),
        );
        // The doubled tail, and the atom off it: two tails' rounding each.
        let slack = 4.0 * tail_rounding(10);
        assert!((p - 112.0 / 1024.0).abs() <= slack, "{p}");
        assert!((mid - 67.0 / 1024.0).abs() <= slack, "{mid}");
        // Its mean over the null law is within the largest atom of the
        // uniform's 1/2: 0.530 here (the cap at 1 is reached at the mode,
        // 2·638/1024 − 252/1024 = 1), and at n = 1000, p = 0.3 (largest
        // atom 0.0275) far closer.
        for (n, p) in [(10, 0.5), (1000, 0.3)] {
            let atom = (0..=n).map(|k| ln_pmf(n, k, p).exp()).fold(0.0, f64::max);
            let mean: f64 = (0..=n)
                .map(|k| ln_pmf(n, k, p).exp() * binomial_mid_p(k, n, p))
                .sum();
            assert!((mean - 0.5).abs() <= atom, "{n} {mean} {atom}");
        }
        assert_eq!(proportion_mid_p(0.2, 10, 0.5), mid);
    }

    #[test]
    fn the_test_never_rejects_the_expected_count_and_always_an_impossible_one() {
        assert_eq!(binomial_test(700, 1000, 0.7).p_value, 1.0);
        assert_eq!(binomial_test(1001, 1000, 0.7).p_value, 0.0);
        assert_eq!(binomial_test(0, 10, 0.0).p_value, 1.0);
        assert_eq!(binomial_test(1, 10, 0.0).p_value, 0.0);
        let z = proportion_test(0.0, 2000, 0.000729);
        assert!(!z.rejected && z.z <= 0.0 && z.p_value > 0.4, "{z:?}");
        let z = proportion_test(0.05, 2000, 0.000729);
        assert!(z.rejected && z.z > critical_z(), "{z:?}");
    }
}
