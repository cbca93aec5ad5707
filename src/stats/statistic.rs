//! What a claim's per-draw statistic is, which test it gets, and the
//! smallest budget at which that test has its stated size.
//!
//! # Three kinds
//!
//! * [`Statistic::Mean`]: the mean of a per-draw statistic with a sample
//!   standard error, tested with Student-t ([`z_test`]). Valid from
//!   [`mean_min_samples`] draws on (derivation below).
//! * [`Statistic::Indicator`]: each draw counts successes of `trials`
//!   Bernoulli(p₀) events and reports the fraction (an indicator when
//!   `trials = 1`); the total count is tested exactly against
//!   `Binomial(n · trials, p₀)` ([`proportion_test`]). Valid at every `n`.
//! * [`Statistic::ScaledCount`]: each draw is `c` with probability `keep`
//!   and 0 otherwise, `c = target / keep` per component (a unit's
//!   dropped-out output or its powers, the pair form `(z − z′)²/2` of one
//!   unit). On the fast path the mean is `c K / n` with `K` held exactly,
//!   and `K` is tested exactly against `Binomial(n, keep)`
//!   ([`proportion_test`]), valid at every `n`. Draws of an implementation
//!   need not be two-valued: the generic path runs the same exact test when
//!   the estimate reads as two-valued draws ([`reads_as_two_valued`]), and
//!   otherwise tests it as a mean with the two-point skewness
//!   ([`Statistic::on_generic_path_with`]).
//! * [`Statistic::Violations`]: the estimate is a count of violations of a
//!   rule that must hold on every draw; any violation refutes the claim, no
//!   sampling error is involved. Valid at every `n`.
//!
//! # The minimum budget of a mean test
//!
//! At α = 10⁻¹⁰ no Berry–Esseen bound helps: the non-uniform bound
//! `|P(T > x) − Φ̄(x)| ≤ C ρ / (σ³ √n (1 + x)³)` is about `0.06/√n` at
//! `x = 6.47`, which is below 10⁻¹⁰ only from `n ≈ 4·10¹⁷`. The size is
//! therefore controlled to leading order by the Cramér-type moderate
//! deviation of the self-normalized mean (Jing, Shao & Wang 2003, *Ann.
//! Probab.* 31; refined by Wang 2005): for i.i.d. draws with skewness `γ`
//!
//! ```text
//! P(T_n > x) / Φ̄(x) = exp(−γ x³ / (3 √n)) (1 + O((1 + x)⁴ / n))
//! P(T_n < −x) / Φ(−x) = exp(+γ x³ / (3 √n)) (1 + O((1 + x)⁴ / n))
//! ```
//!
//! so the two-sided size at the critical value `c` is, to that order,
//!
//! ```text
//! size / α = cosh(γ c³ / (3 √n)).
//! ```
//!
//! Step by step, the rule this module applies:
//!
//! 1. Allow the size at most [`MEAN_SIZE_FACTOR`] `= 2` times nominal:
//!    `γ c³ / (3 √n) ≤ acosh 2 = 1.3170`.
//! 2. Solve for `n` with `c = z_crit = 6.4670` (the t critical value is
//!    larger, which only helps): `n ≥ (γ c³ / (3 acosh 2))² = 4686 γ²`.
//! 3. Keep the neglected term small: `c⁴ / n ≤ 1`, i.e. `n ≥ c⁴ ≈ 1750`
//!    (the `O(x⁴/n)` term, whose coefficient involves the excess kurtosis
//!    and `γ²`, is then of the order of those moments over 12).
//!
//! The budget test (`tests/zz_budget.rs`) charges each mean assertion twice
//! its nominal α, so the family rate still holds.
//!
//! The skewness is the claim's declaration about its own statistic under
//! the null, for the estimator its sampler actually computes, from the
//! claim's exact moments ([`super::CentralMoments`]: a plain mean, the pair
//! form `(t − t′)²/2`, the single-draw sample variance;
//! [`super::BatchCumulants`] for moving averages of batch statistics;
//! [`two_point_skewness`] for a statistic with two values). Every mean
//! claim of the registry declares its own so; `tests/test_sizes.rs` derives
//! each declaration again independently and lists every component's size
//! at its claim's minimum budget. The default, [`DEFAULT_SKEWNESS`]
//! `= 2√2`, is that of `χ²₁` (the pair form of a normal statistic), what a
//! claim declaring nothing is taken to have; it is *not* an upper bound
//! (`batchnorm.li2018`'s pair form at `p = 0.5` has 3.97). It gives
//! `n_min = 37 489`.

use serde::Serialize;

use super::accumulator::Estimate;
use super::binomial::{proportion_mid_p, proportion_test};
use super::family::critical_z;
use super::ztest::{ZTest, exact_agreement, z_test};
use crate::stats::tolerance;

/// Largest real size of a mean test at or above its minimum budget, as a
/// multiple of the nominal per-assertion level (step 1 of the module docs).
pub const MEAN_SIZE_FACTOR: f64 = 2.0;

/// The skewness a claim's mean statistic is taken to have when it declares
/// none (the `χ²₁` value `2√2`, not a bound; see the module docs).
pub const DEFAULT_SKEWNESS: f64 = 2.0 * std::f64::consts::SQRT_2;

/// The kind of a claim's per-draw statistic (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Statistic {
    /// A mean with a sample standard error, skewness at most `skewness` in
    /// absolute value under the null.
    Mean { skewness: f64 },
    /// The fraction of `trials` Bernoulli events per draw; exact binomial.
    Indicator { trials: u64 },
    /// A draw is `target / keep` with probability `keep`, else 0; exact
    /// binomial on the fast path (module docs).
    ScaledCount { keep: f64 },
    /// A count of violations of a rule that holds on every draw.
    Violations,
}

impl Default for Statistic {
    fn default() -> Self {
        Statistic::DEFAULT
    }
}

impl Statistic {
    /// A mean with the default skewness bound [`DEFAULT_SKEWNESS`] (what
    /// [`Statistic::default`] returns, usable in a `const`).
    pub const DEFAULT: Statistic = Statistic::Mean {
        skewness: DEFAULT_SKEWNESS,
    };

    /// Tests one component's estimate against its target.
    pub fn test(self, estimate: Estimate, target: f64) -> ZTest {
        match self {
            Statistic::Mean { .. } => z_test(estimate, target),
            Statistic::Indicator { trials } => proportion_test(
                estimate.value,
                estimate.n.saturating_mul(trials.max(1)),
                target,
            ),
            Statistic::ScaledCount { keep } => scaled_count_test(estimate, target, keep),
            Statistic::Violations => exact_agreement(estimate.value - target),
        }
    }

    /// True when the test divides the estimate's deviation by its standard
    /// error (Student-t on a mean): the tests whose size a wrong standard
    /// error changes. The exact tests have no standard error to be wrong.
    pub fn standardizes_by_stderr(self) -> bool {
        matches!(self, Statistic::Mean { .. })
    }

    /// The mid-p value of the exact binomial test ([`binomial_mid_p`] of the
    /// count [`Statistic::test`] reads), `None` for the other statistics
    /// (their test's own p-value is continuous, or a deterministic rule's).
    ///
    /// [`binomial_mid_p`]: crate::stats::binomial_mid_p
    pub fn mid_p(self, estimate: Estimate, target: f64) -> Option<f64> {
        match self {
            Statistic::Indicator { trials } => Some(proportion_mid_p(
                estimate.value,
                estimate.n.saturating_mul(trials.max(1)),
                target,
            )),
            Statistic::ScaledCount { keep } if target != 0.0 => Some(proportion_mid_p(
                estimate.value / (target / keep),
                estimate.n,
                keep,
            )),
            _ => None,
        }
    }

    /// The test the generic path runs: a scaled count's draws from an
    /// implementation need not take two values, so it is a mean there, with
    /// the skewness the two values would give ([`two_point_skewness`]);
    /// every other statistic is tested alike on both paths.
    pub fn on_generic_path(self) -> Statistic {
        match self {
            Statistic::ScaledCount { keep } => Statistic::Mean {
                skewness: two_point_skewness(keep),
            },
            other => other,
        }
    }

    /// The test the generic path runs on its estimates `estimates` of
    /// `targets`: a scaled count stays the exact binomial test when every
    /// component's estimate is that of draws in `{0, c}`, `c = target /
    /// keep` ([`reads_as_two_valued`]; always so for a correct
    /// implementation, up to the rounding it is checked to); otherwise, and
    /// for every other statistic, [`Statistic::on_generic_path`].
    pub fn on_generic_path_with(self, estimates: &[Estimate], targets: &[f64]) -> Statistic {
        match self {
            Statistic::ScaledCount { keep }
                if estimates.len() == targets.len()
                    && estimates
                        .iter()
                        .zip(targets)
                        .all(|(e, &t)| reads_as_two_valued(*e, t, keep)) =>
            {
                self
            }
            other => other.on_generic_path(),
        }
    }

    /// The pair form `(z − z′)²/2` of two independent passes over one unit
    /// dropped at rate `p` (or a sum under one shared mask bit): `c` when
    /// exactly one pass keeps it (probability `2pq`), 0 otherwise, a scaled
    /// count with `keep = 2pq`.
    pub fn unit_pair_form(p: f64) -> Statistic {
        Statistic::ScaledCount {
            keep: 2.0 * p * (1.0 - p),
        }
    }

    /// A mean test on the inverted-dropout sum `S = Σ_i m_i x_i / keep`
    /// (`m_i ~ Bernoulli(keep)`) at any width: of `S` itself, or with
    /// `pairs` of its pair form `(S − S′)²/2` (two passes per draw), with
    /// the skewness of `S`'s exact moments
    /// ([`super::CentralMoments::of_dropped_sum`]).
    pub fn masked_sum(x: &[f64], keep: f64, pairs: bool) -> Statistic {
        let moments = super::CentralMoments::of_dropped_sum(x, keep);
        let skewness = if pairs {
            moments.pair_form_skewness()
        } else {
            moments.skewness()
        };
        Statistic::Mean {
            skewness: skewness.abs(),
        }
    }

    /// The smallest number of draws at which the test has its stated size
    /// (1 for the exact tests).
    pub fn min_samples(self) -> u64 {
        match self {
            Statistic::Mean { skewness } => mean_min_samples(skewness),
            Statistic::Indicator { .. } | Statistic::ScaledCount { .. } | Statistic::Violations => {
                1
            }
        }
    }

    /// How the report names the test.
    pub fn label(self) -> &'static str {
        match self {
            Statistic::Mean { .. } => "student-t",
            Statistic::Indicator { .. } | Statistic::ScaledCount { .. } => "exact binomial",
            Statistic::Violations => "deterministic",
        }
    }

    /// How many multiples of the per-assertion level one component's test
    /// may spend: [`MEAN_SIZE_FACTOR`] for a mean, 1 for the exact binomial
    /// test, 0 for a deterministic rule.
    pub fn size_factor(self) -> f64 {
        match self {
            Statistic::Mean { .. } => MEAN_SIZE_FACTOR,
            Statistic::Indicator { .. } | Statistic::ScaledCount { .. } => 1.0,
            Statistic::Violations => 0.0,
        }
    }
}

/// The exact test of a scaled count: the draw takes `c = target / keep`
/// with probability `keep` under the null, so the count is `K = n · value /
/// c`, tested against `Binomial(n, keep)`; the MDE is the count's, in the
/// claim's units (`|c|` times the proportion's). A zero target (a unit with
/// `x = 0`, whose draws are all 0) is an exact comparison.
fn scaled_count_test(estimate: Estimate, target: f64, keep: f64) -> ZTest {
    if target == 0.0 {
        return exact_agreement(estimate.value);
    }
    let scale = target / keep;
    let mut test = proportion_test(estimate.value / scale, estimate.n, keep);
    test.mde *= scale.abs();
    if scale < 0.0 {
        test.z = -test.z;
    }
    test
}

/// Whether a mean estimate is, to its accumulation's rounding, that of `n`
/// draws taking the values `c = target / keep` and 0: the count `K̂ = n ·
/// value / c` within `n γ_{16n}` of an integer `K ∈ [0, n]` (and that slack
/// below [`tolerance::COUNT_RESOLUTION`], so the integer is resolved) and the squared standard error
/// within `γ_{16n} c² / (n − 1)` (plus its own few roundings) of the
/// two-point value `c² K (n − K)/(n² (n − 1))`
/// ([`tolerance::TWO_POINT_ROUNDINGS_PER_DRAW`]). A zero target reads as two-valued
/// when every draw was 0 (value and standard error 0). Draws with a
/// third value match both power sums only by a coincidence of measure zero
/// for a continuous error; a wrong two-valued implementation (another `c`
/// or `keep`) either fails the check (another `c`) or is a count that the
/// exact test judges (another `keep`).
pub fn reads_as_two_valued(estimate: Estimate, target: f64, keep: f64) -> bool {
    if target == 0.0 {
        return estimate.value == 0.0 && estimate.stderr == 0.0;
    }
    if estimate.n < 2 {
        return false;
    }
    let n = estimate.n as f64;
    let c = target / keep;
    let slack = tolerance::two_point_accumulation(n);
    let count_slack = n * slack;
    let count_read = estimate.value * n / c;
    let count = count_read.round();
    if count_slack >= tolerance::COUNT_RESOLUTION
        || (count_read - count).abs() > count_slack
        || count < 0.0
        || count > n
    {
        return false;
    }
    let two_point = c * c * count * (n - count) / (n * n * (n - 1.0));
    let se2 = estimate.stderr * estimate.stderr;
    (se2 - two_point).abs()
        <= slack * c * c / (n - 1.0) + tolerance::bound(SE_SQUARE_ROUNDINGS, two_point + se2)
}

/// Roundings of the two squared standard errors compared by
/// [`reads_as_two_valued`]: `√(M2/(n−1)/n)` squared (two divisions, a square
/// root, a square: 4) and `c² K (n − K)/(n² (n − 1))` (7 operations), at
/// most 11 on either side of the comparison.
const SE_SQUARE_ROUNDINGS: f64 = 11.0;

/// Skewness of a statistic that takes one value with probability `r` and
/// another with `1 − r`: `|1 − 2r| / √(r (1 − r))` (0 at `r = 1/2`).
pub fn two_point_skewness(r: f64) -> f64 {
    (1.0 - 2.0 * r).abs() / (r * (1.0 - r)).sqrt()
}

/// The minimum budget of a mean test with skewness at most `skewness`:
/// `max((γ c³ / (3 acosh 2))², c⁴)` rounded up, `c = z_crit` (module docs).
pub fn mean_min_samples(skewness: f64) -> u64 {
    let c = critical_z();
    let acosh2 = MEAN_SIZE_FACTOR.acosh();
    let root = skewness.abs() * c * c * c / (3.0 * acosh2);
    let skew = root * root;
    let tail = (c * c) * (c * c);
    skew.max(tail).ceil() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimum_budgets_follow_the_derivation() {
        // c = 6.466951, c³ = 270.4573, acosh 2 = 1.3169579 (Python math):
        // (c³/(3 acosh 2))² = 4686.3 per unit γ², c⁴ = 1749.0.
        assert_eq!(mean_min_samples(0.0), 1750);
        let chi2 = mean_min_samples(DEFAULT_SKEWNESS);
        assert!((37_480..=37_500).contains(&chi2), "{chi2}");
        // A Bernoulli(0.7) unit: γ = 0.4 / √0.21 = 0.8729, n = 3571.
        let unit = mean_min_samples(two_point_skewness(0.7));
        assert!((3565..=3580).contains(&unit), "{unit}");
        assert_eq!(Statistic::Violations.min_samples(), 1);
        assert_eq!(Statistic::Indicator { trials: 1 }.min_samples(), 1);
    }

    #[test]
    fn two_point_skewness_is_zero_at_one_half_and_grows_for_rare_events() {
        assert_eq!(two_point_skewness(0.5), 0.0);
        // 1 − 2r, r(1 − r), a root and a quotient on each side: 2 γ_6 of 0.87.
        let want = 0.4 / 0.21f64.sqrt();
        assert!(
            (two_point_skewness(0.3) - want).abs()
                <= 2.0 * crate::stats::tolerance::bound(6.0, want)
        );
        assert!(two_point_skewness(0.01) > 9.0);
    }

    #[test]
    fn a_scaled_counts_mid_p_reads_the_count_its_test_reads() {
        // 10 draws of c = 2 / 0.5 = 4 with probability 1/2, two kept: the
        // mean is 4·2/10 = 0.8 against the target 2, so K = 2 of 10 and
        // the mid-p is 67/1024 (the binomial module's worked case).
        let e = Estimate {
            value: 0.8,
            stderr: 0.5,
            n: 10,
            dof: 9.0,
        };
        let scaled = Statistic::ScaledCount { keep: 0.5 };
        let mid = scaled.mid_p(e, 2.0).expect("a count");
        let slack = 4.0 * super::super::binomial::tail_rounding(10);
        assert!((mid - 67.0 / 1024.0).abs() <= slack, "{mid}");
        assert!(scaled.mid_p(e, 0.0).is_none());
        assert!(Statistic::DEFAULT.mid_p(e, 2.0).is_none());
        assert!(Statistic::DEFAULT.standardizes_by_stderr());
        assert!(!scaled.standardizes_by_stderr());
        assert!(scaled.on_generic_path().standardizes_by_stderr());
    }

    #[test]
    fn violations_fail_on_one_and_pass_on_none() {
        let e = |value| Estimate {
            value,
            stderr: 0.0,
            n: 100,
            dof: 99.0,
        };
        assert!(!Statistic::Violations.test(e(0.0), 0.0).rejected);
        assert!(Statistic::Violations.test(e(1.0), 0.0).rejected);
    }
}
