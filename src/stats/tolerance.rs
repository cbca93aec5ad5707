//! Every non-statistical comparison bound of the crate, named once and
//! derived next to its definition (in the manner of statrs' `prec.rs`).
//!
//! # The model
//!
//! IEEE 754 binary64 with round-to-nearest: each operation `∘ ∈ {+, −, ×, ÷,
//! √}` returns `fl(a ∘ b) = (a ∘ b)(1 + δ)` with `|δ| ≤ u = ε/2`
//! ([`UNIT_ROUNDOFF`]). Higham (*Accuracy and Stability of Numerical
//! Algorithms*, 2nd ed., Lemma 3.1) bounds `n` such factors:
//!
//! ```text
//! Π_{i≤n} (1 + δ_i)^{±1} = 1 + θ_n,   |θ_n| ≤ γ_n = n u / (1 − n u)     (n u < 1)
//! ```
//!
//! so a product / quotient chain of `n` roundings has relative error
//! `γ_n`, and recursive summation of `N` terms `t_i` has absolute error at
//! most `γ_{N−1} Σ |t_i|` (Higham, eq. 4.4). A bound on a difference of two
//! computed values adds both sides' bounds. Every function here takes the
//! count of roundings of the computation it guards; none is tuned.

/// Unit roundoff `u = ε/2` of binary64 with round-to-nearest.
pub const UNIT_ROUNDOFF: f64 = f64::EPSILON / 2.0;

/// Higham's `γ_n = n u / (1 − n u)`: the relative error of `n` roundings
/// (∞ when `n u ≥ 1`, where the bound says nothing).
pub fn gamma(n: f64) -> f64 {
    let nu = n * UNIT_ROUNDOFF;
    if nu >= 1.0 {
        f64::INFINITY
    } else {
        nu / (1.0 - nu)
    }
}

/// Absolute error bound of a value computed by `roundings` roundings whose
/// terms have absolute sum `magnitude` (for a product chain, `magnitude` is
/// the value itself): `γ_roundings · magnitude`.
pub fn bound(roundings: f64, magnitude: f64) -> f64 {
    gamma(roundings) * magnitude.abs()
}

/// `n u`: the first-order part of [`gamma`]`(n)`, for a bound whose
/// derivation counts its `n` roundings to first order (the `O(u²)` rest is
/// covered by a count that is itself generous, as said at each use).
pub fn first_order(n: f64) -> f64 {
    n * UNIT_ROUNDOFF
}

/// `n ε = 2 n u`, an upper bound on `γ_n` wherever `n u ≤ 1/2` (then
/// `1 − n u ≥ 1/2`, so `γ_n = n u/(1 − n u) ≤ 2 n u`): the bound the exact
/// enumerations charge for `n` roundings without computing `γ_n`'s
/// denominator.
pub fn gamma_upper(n: f64) -> f64 {
    n * f64::EPSILON
}

/// Roundings of one term of an enumeration `Σ_masks w · f`: the weight `w`
/// is a product of `factors` probabilities (`factors` roundings, counting
/// the last multiplication by `f`'s value as one of them: `factors − 1`
/// products and one more), and the running sum over `masks` terms adds at
/// most `masks − 1` roundings (Higham 4.4), so with [`gamma_upper`] the
/// bound is `(masks + factors) ε · Σ w |f|`. The per-bit enumeration has
/// `2^bits` masks of `bits` factors; the grouped one a mask per count
/// vector, of one table weight per group.
pub fn enumeration_roundings(masks: f64, factors: f64) -> f64 {
    masks + factors
}

/// Relative error of one `Binomial(n, q)` probability computed as `exp` of
/// its logarithm (statrs's `Binomial::pmf`, like the crate's own
/// `binomial::ln_pmf`): `ln P(K = k) = lnΓ(n+1) − lnΓ(k+1) − lnΓ(n−k+1) +
/// k ln q + (n−k) ln p`.
///
/// 1. The three `lnΓ` terms are each at most `lnΓ(n+1)`; the two logarithm
///    terms together at most `n |ln min(p, q)|`.
/// 2. Each term is within a few ulps of its value and the four additions
///    round once each: [`LN_PMF_ROUNDINGS`] on the absolute sum
///    `A = 3 lnΓ(n+1) + n |ln min(p, q)|`, an absolute error of at most
///    `8 ε A` in the exponent.
/// 3. `exp(y + δ) = exp(y)(1 + δ + O(δ²))`: an absolute error `δ` of the
///    exponent is a relative error `δ` of the probability, plus `exp`'s own
///    rounding (one more `ε`).
pub fn binomial_pmf_relative_error(n: u64, q: f64) -> f64 {
    let n_f = n as f64;
    let ln_gamma_n = statrs::function::gamma::ln_gamma(n_f + 1.0).max(1.0);
    let log_terms = n_f * q.min(1.0 - q).ln().abs();
    gamma_upper(LN_PMF_ROUNDINGS) * (3.0 * ln_gamma_n + log_terms) + gamma_upper(1.0)
}

/// Roundings charged to the exponent of a binomial probability computed as
/// `exp` of its logarithm (three `lnΓ` values and two logarithm terms, each a
/// few ulps from its value, and the four additions joining them): 8, on the
/// exponent's absolute sum ([`binomial_pmf_relative_error`], and the tail
/// slack of `stats::binomial`'s tests).
pub const LN_PMF_ROUNDINGS: f64 = 8.0;

/// Roundings of one term `w · s` (and `w · s · s`) of the equal-units sum
/// oracle, `s = k a / q`: the product and the division forming `s`, then
/// one or two multiplications by it: at most 4.
pub const EQUAL_UNITS_TERM_ROUNDINGS: f64 = 4.0;

/// Roundings charged to `Var t = E[t²] − E[t]²` beyond its moments' own
/// bounds ([`crate::exact::variance_from_moments`]): the square `E[t]²` and
/// the subtraction round once each, on values at most `|E[t²]|`
/// (`E[t]² ≤ E[t²]`): two roundings, charged as 4 with [`gamma_upper`] (the
/// crate's count from the start, kept: twice what the derivation needs).
pub const VARIANCE_FROM_MOMENTS_ROUNDINGS: f64 = 4.0;

/// Relative rounding of the `Binomial(n, q)` weights as
/// [`crate::exact::binomial_weights`] builds them, with [`gamma_upper`].
///
/// # Derivation
///
/// From the mode (weight 1, exact) each weight is the previous one times a
/// ratio `(n − k)/(k + 1)` (one division) and the odds (one product), and
/// the product itself (one more): at most `3n` roundings along the longest
/// chain. The normalization sums `n + 1` positive weights (`n` roundings,
/// relative to the total since every term has one sign) and divides (1):
/// `4n + 1`. Charged `5n + 4`, the crate's count from the start (the odds
/// `q/p` add one rounding per step of the chain: `n` more, and 3 to spare).
pub fn binomial_weight_roundings(n: usize) -> f64 {
    (5 * n + 4) as f64
}

/// Roundings of one evaluation of a norm on the `2K` value classes of a
/// grouped site (the grouped oracle's `standardise` / `rms_scale`), per
/// norm stage, with [`gamma_upper`] on the magnitude `Σ w |f|`.
///
/// # Derivation
///
/// The mean is a weighted sum over the `2K` classes (a product each,
/// `2K − 1` additions) and a division: `4K`; the variance a subtraction and
/// two products per class, `2K − 1` additions and a division: `8K`; then
/// `+ ε`, the root and the reciprocal (3), per class a subtraction and a
/// product (2), and the kept share's weighting of the two classes (a
/// division, `1 − share`, two products, a sum: 5): `12K + 10` per stage.
/// Charged `16K + 32`, the crate's count from the start.
pub fn class_norm_roundings(k: usize) -> f64 {
    16.0 * k as f64 + 32.0
}

/// Roundings of one draw's scalar norm statistic over `d` units, to first
/// order ([`first_order`]): `M = Σ y/d` is `d` roundings, `R² = Σ y²/d`
/// `2d`, and `V = Σ (y − M)²/d` the mean's `d` and then per unit a
/// subtraction and a square (`2d`), `d − 1` sums and a division: `4d`
/// (the mean's own error enters `V` only at second order, since
/// `Σ (y − M) = 0`). Charged `4d + 16`, the `O(u²)` rest inside the 16.
pub fn norm_statistic_roundings(d: usize) -> f64 {
    4.0 * d as f64 + 16.0
}

/// Roundings of `γ · s + β`, the affine step after a norm: the product and
/// the addition.
pub const AFFINE_ROUNDINGS: f64 = 2.0;

/// Roundings allowed on *each* side when a zero-spread Monte Carlo estimate
/// (every draw gave the same value `v`) is compared with its closed form.
///
/// # Derivation
///
/// * The estimate: the Welford mean of identical values is `v` exactly
///   (`δ = v − mean = 0` after the first draw; merging equal means adds
///   `0 · n_b / n`), so its only rounding is that of one draw's statistic.
/// * The registry's zero-spread statistics are a dropout output of a zero
///   or deterministic unit (`x · (1/q)` or `x / q`, at most two roundings),
///   a count of violations (exact integers) or a normalized output of a
///   constant vector (LayerNorm/RMSNorm: sums of `d ≤ 8` terms, a square
///   root, a division: at most `d + 8 ≤ 16` roundings, Higham 4.4 with the
///   terms' magnitude bounded by the output's when every term has one sign).
/// * The closed form: at most the same 16 roundings.
///
/// Hence `|v − target| ≤ γ_16 (|v| + |target|) ≤ 2 γ_16 max(|v|, |target|)`,
/// which is `16.0000…02 ε · max`: the 16 ulp the z-test used, now derived.
pub const ZERO_SPREAD_ROUNDINGS: f64 = 16.0;

/// The tolerance of [`ZERO_SPREAD_ROUNDINGS`]:
/// `γ_16 (|value| + |target|)`.
pub fn zero_spread(value: f64, target: f64) -> f64 {
    gamma(ZERO_SPREAD_ROUNDINGS) * (value.abs() + target.abs())
}

/// How far beyond its first-order estimate the fitted log-log slope of a
/// leading-order gap may sit, as a multiple of that estimate
/// ([`crate::claims::order::GapCurve::fit`]).
///
/// # Derivation
///
/// With `gap(d) = A/d^n + B/d^(n+1) + C/d^(n+2) + …`, the local slope is
/// `−n − (B/A)/d + O(1/d²)`, so over `d ≥ d₀` every local slope is within
/// `|B/A|/d₀` of `−n` to first order. The factor 2 leaves the `O(1/d²)`
/// remainder as much room again; the order check itself requires that
/// remainder to be small (the two-term model must fit within `B/d₀`), so
/// the factor is never what admits a wrong rate.
pub const ORDER_REMAINDER_FACTOR: f64 = 2.0;

/// The widest slope bound that still tells the stated rate `d^(−n)` from
/// its neighbours.
///
/// # Derivation
///
/// The nearest simple rates a wrong closed form could leave are
/// `d^(−n ± 1/2)` (and `d^(−n ± 1)` for a dropped or mis-scaled correction
/// term): 1/2 away in slope. A bound below half that distance, 1/4, puts a
/// slope within it of `−n` strictly closer to `−n` than to any neighbour.
pub const ORDER_SLOPE_RESOLUTION: f64 = 0.25;

/// Largest a-priori rounding bias of an estimate, as a share of its
/// standard error, that a test may ignore (the fast kernels fall back to the
/// per-element path above it: [`crate::ops::fast::FastSite`]'s bound `κ` on the
/// rounding of a mask's `V`).
///
/// # Derivation
///
/// A bias `b = δ · SE` moves the statistic `Z` of a two-sided test at the
/// critical value `c` to `Z + δ`. For a normal `Z` the rejection density
/// ratio is `φ(c − δ)/φ(c) = exp(c δ − δ²/2) ≤ exp(c δ)`, so the size grows by
/// at most the factor `exp(c δ)`. At the suite's per-assertion critical value
/// (`c = 6.47`, [`crate::stats::critical_z`]) and `δ = 10⁻³` the factor is
/// `exp(0.0065) = 1.0065`: 0.65 % of the size, against the factor 2 the
/// suite charges a mean test ([`crate::stats::MEAN_SIZE_FACTOR`]).
pub const ROUNDING_BIAS_SHARE_OF_STDERR: f64 = 1e-3;

/// Whether a convergent series may stop: the bound `tail` on the sum of
/// the terms not yet added is at most one rounding of the partial `sum`,
/// `u |sum|` ([`UNIT_ROUNDOFF`]).
///
/// # Derivation
///
/// Stopping changes the result by at most `tail ≤ u |sum|`, the error one
/// more floating-point addition makes anyway; the series' own summation
/// already carries `γ_n |sum|` for its `n` terms, so the truncation adds one
/// rounding to that bound and nothing else.
pub fn series_tail_is_negligible(tail: f64, sum: f64) -> bool {
    tail <= UNIT_ROUNDOFF * sum.abs()
}

/// The slack with which two computed distances to a reference value, `gap_a
/// = ‖a − r‖` and `gap_b = ‖b − r‖` over `d` entries, may be ordered when
/// the reference `r` carries per-entry rounding bounds of Euclidean norm
/// `reference_rounding`: `gap_a > gap_b + slack` then holds for the exact
/// distances to the exact reference too.
///
/// # Derivation
///
/// * The reference: by the triangle inequality, replacing `r` by the exact
///   `r*` moves each distance by at most `‖r − r*‖ ≤ reference_rounding`,
///   so the two distances' difference moves by at most twice that.
/// * The distances themselves: `sqrt(Σ (a_k − r_k)²)` rounds the
///   difference, the square (2 roundings per term), the sum of `d` terms of
///   one sign (`γ_{d−1}`, Higham 4.4) and the root (halving the relative
///   error of its argument, plus one rounding): relative error at most
///   `γ_{d+2}` on the square sum, so at most `γ_{d+2}` on the distance.
///   Each side adds `γ_{d+2} · gap`.
pub fn distance_order_slack(reference_rounding: f64, gap_a: f64, gap_b: f64, d: usize) -> f64 {
    2.0 * reference_rounding + gamma(d as f64 + 2.0) * (gap_a + gap_b)
}

/// Roundings charged per draw when a generic-path estimate is read back as
/// the count of a two-valued statistic `{0, c}`
/// ([`crate::stats::Statistic::on_generic_path_with`]).
///
/// # Derivation
///
/// * The draw: an implementation computes `c` as `x · (1/q)` or `x / q`
///   (two roundings) and the statistic as at most its fourth power
///   (`ipow`: two more products), at most `4 · 2 + 2 = 10 ≤ 12` roundings
///   of `c` (relative error `γ_12`).
/// * The accumulation ([`crate::stats::MeanAccumulator`], Welford): per
///   draw one subtraction, one division and one addition into the mean, a
///   subtraction, a product and an addition into `M2` (three each, four
///   charged for the merges of chunks, each no costlier than a draw); every
///   term is at most `|c|` (mean) or `c²` (`M2`) in size.
///
/// Charged as `12 + 4 = 16` per draw: after `n` draws the mean is within
/// `γ_{16n} |c|` of the two-point value and `M2` within `γ_{16n} n c²`.
/// Hence the count `K̂ = n · mean / c` is within `n γ_{16n}` of an integer,
/// and the standard error's square `M2/(n (n − 1))` within
/// `γ_{16n} c²/(n − 1)` of `c² K (n − K)/(n² (n − 1))`.
pub const TWO_POINT_ROUNDINGS_PER_DRAW: f64 = 16.0;

/// How close to an integer a count read back from a mean must be known to
/// be for the integer to be resolved: half of the half-way point 1/2, so
/// that the slack cannot reach the next integer's range.
pub const COUNT_RESOLUTION: f64 = 0.25;

/// The slack of [`TWO_POINT_ROUNDINGS_PER_DRAW`] after `n` draws: `γ_{16n}`.
pub fn two_point_accumulation(n: f64) -> f64 {
    gamma(TWO_POINT_ROUNDINGS_PER_DRAW * n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gamma_is_n_u_to_first_order_and_infinite_past_its_domain() {
        // γ_1 = u/(1−u) exactly representable as computed: about 1.11e-16.
        assert!((gamma(1.0) - 2f64.powi(-53)).abs() <= 2f64.powi(-105));
        assert!(
            gamma(16.0) > 8.0 * f64::EPSILON && gamma(16.0) < 8.0 * f64::EPSILON * (1.0 + 1e-14)
        );
        assert_eq!(gamma(2f64.powi(53)), f64::INFINITY);
    }

    #[test]
    fn zero_spread_admits_one_rounding_and_rejects_a_percent() {
        // 0.1 + 0.2 is one rounding away from 0.3 (it is 0.30000000000000004).
        assert!((0.1 + 0.2 - 0.3f64).abs() <= zero_spread(0.1 + 0.2, 0.3));
        assert!(0.003 > zero_spread(0.303, 0.3));
    }

    #[test]
    fn a_tail_below_one_rounding_is_negligible_and_one_above_is_not() {
        assert!(series_tail_is_negligible(UNIT_ROUNDOFF, 1.0));
        assert!(!series_tail_is_negligible(4.0 * UNIT_ROUNDOFF, 1.0));
        // Adding such a tail does not change the rounded sum.
        assert_eq!(1.0 + UNIT_ROUNDOFF, 1.0);
    }

    #[test]
    fn distances_to_a_rounded_reference_are_ordered_only_past_its_rounding() {
        // Reference 0 with rounding 0.1: a at 1.0 and b at 1.15 cannot be
        // ordered (the exact reference could sit 0.1 towards b), at 1.3 they can.
        let slack = distance_order_slack(0.1, 1.15, 1.0, 1);
        assert!(slack > 0.15 && 1.15 <= 1.0 + slack);
        assert!(1.3 > 1.0 + distance_order_slack(0.1, 1.3, 1.0, 1));
    }
}
