//! The likely cause a set of failing claims points to, in words.
//!
//! One claim's failure has several possible causes (a biased mean: a wrong
//! scale, an inverted keep rule, or masks reused so that the test's
//! standard error is too small); the *set* of failures, and the direction
//! of the variance's, tells them apart:
//!
//! 0. `dropout.kept_count` fails with a kept fraction off `q` while
//!    `dropout.mean` passes: an inverted dropout at another rate than the
//!    declared one (its mean is `x` at any rate). Named first, with the
//!    measured rate; the moments and survivors fail with it, so causes 1–5
//!    are not added.
//! 1. `semantics.survivors_exact` fails: the kept values are not `x/q` in
//!    the dtype — the survivors' scale is wrong (every moment then fails
//!    with it, for the same reason).
//! 2. `dropout.variance` fails *low*: two training passes differ less than
//!    two independent masks do — masks are reused (one mask for every row
//!    of a call, a generator re-seeded on each call, a short period). The
//!    other moments then fail because their rows are not independent draws.
//! 3. A per-unit moment and `dropout.kept_count` fail with the kept values
//!    right: the keep probability is not `q = 1 − p` (another rate, or the
//!    keep rule inverted, `u < p` kept instead of dropped).
//! 4. `dropout.kept_count` or `dropout.sum_variance` fails while every
//!    per-unit moment passes: each unit is kept with probability `q` but not
//!    independently of the others (a fixed number dropped, neighbouring units
//!    sharing a random bit, a mask shared along an axis).
//!
//! 5. (A warning, not a failure.) In float16 or bfloat16 the moments are
//!    judged against what the dtype can hold ([`super::composite`]); when
//!    a moment passes there but its real-arithmetic target would have
//!    failed, the survivors' rounding biases the moments by more than the
//!    budget resolves, and [`Rounding::warning`] says so with the effective
//!    scale (PyTorch's bfloat16 survivors at `p = 0.1` are `x·1.109375`,
//!    −0.156 %): the dtype's bias, not the mask's.
//!
//! 6. `semantics.masks_never_repeat` fails with the units otherwise
//!    independent: the generator's stream repeats (a short period, or
//!    re-seeded alike on each call). `calls.one_row_masks_never_repeat`
//!    fails alone: the mask recurs from call to call, not within one (a
//!    mask cached per input shape, a generator re-seeded on each call).
//!
//! The semantics rules name their own cause (eval path, input written in
//! place, backward mask). The causes are likely, not certain: they are the
//! simplest bug consistent with the pattern.

use dropmc::claims::dropout::ids as dropout_ids;
use dropmc::claims::semantics::ids as semantics_ids;
use dropmc::claims::{ClaimResult, Verdict};
use dropmc::ops::Rate;

use super::composite::RoundingBias;
use super::rules::{ONCE, RECIPROCAL, accepted_survivors};
use crate::forward::Dtype;

/// The per-unit moment claims.
const PER_UNIT: [&str; 5] = [
    dropout_ids::MEAN,
    dropout_ids::SECOND_MOMENT,
    dropout_ids::THIRD_MOMENT,
    dropout_ids::FOURTH_MOMENT,
    dropout_ids::VARIANCE,
];

/// Every moment claim (the per-unit ones, the sum's, the kept count).
const MOMENTS: [&str; 8] = [
    dropout_ids::MEAN,
    dropout_ids::SECOND_MOMENT,
    dropout_ids::THIRD_MOMENT,
    dropout_ids::FOURTH_MOMENT,
    dropout_ids::VARIANCE,
    dropout_ids::SUM_MEAN,
    dropout_ids::SUM_VARIANCE,
    dropout_ids::KEPT_COUNT,
];

/// The dtype and inputs of a run, for causes that depend on rounding.
pub struct Rounding<'a> {
    pub dtype: Dtype,
    pub rate: Rate,
    /// The moment claims' inputs.
    pub x: &'a [f64],
}

impl Rounding<'_> {
    /// The range over the normal, non-zero inputs of the survivors'
    /// effective relative scale `q·s/x − 1`, for the survivor rounding
    /// `rounding` (an index into [`accepted_survivors`]).
    fn scale_bias_range(&self, rounding: usize) -> Option<(f64, f64)> {
        let biases: Vec<f64> = self
            .x
            .iter()
            .map(|&v| self.dtype.round(v))
            .filter(|v| v.abs() >= self.dtype.smallest_normal())
            .map(|v| {
                self.rate.q() * accepted_survivors(v, self.rate, self.dtype)[rounding] / v - 1.0
            })
            .collect();
        let lo = biases.iter().copied().reduce(f64::min)?;
        let hi = biases.iter().copied().reduce(f64::max)?;
        Some((lo, hi))
    }

    /// Cause 5 in words, with the numbers: `None` when no moment resolved
    /// a rounding bias, and when `semantics.survivors_exact` failed (the
    /// kept values are then not the dtype's roundings of `x/q`, which the
    /// warning would state). "Every moment is consistent with them" is said
    /// only when no moment claim of `results` failed; otherwise the
    /// failing ones are named as not explained by the rounding.
    pub fn warning(&self, results: &[ClaimResult], biases: &[RoundingBias]) -> Option<String> {
        if failed_in(results, semantics_ids::SURVIVORS_EXACT) {
            return None;
        }
        let failing: Vec<&str> = MOMENTS
            .iter()
            .copied()
            .filter(|id| failed_in(results, id))
            .collect();
        let consistency = if failing.is_empty() {
            "every moment is consistent with them".to_string()
        } else {
            format!(
                "yet {} fail against them, which this rounding does not explain",
                failing.join(", ")
            )
        };
        let largest = biases
            .iter()
            .max_by(|a, b| a.z_real.abs().total_cmp(&b.z_real.abs()))?;
        let name = self.dtype.name();
        let exact = 1.0 / self.rate.q();
        let rounded = self.dtype.round(exact);
        let range = |k: usize| {
            self.scale_bias_range(k).map_or_else(
                || "-".to_string(),
                |(lo, hi)| format!("{} … {}", percent(lo), percent(hi)),
            )
        };
        Some(format!(
            "warning: the kept values are {name} roundings of x/q and {consistency}; \
             {name} cannot hold x/q closely enough to keep the mean: {} is {} from \
             real arithmetic at unit {} (z = {:.1}), a bias this budget resolves. 1/q = \
             {exact:.6} rounds to {rounded:.6} ({}); at your inputs the survivors' effective \
             scale q*s/x is off by {} for s = x*fl(1/q) and by {} for s = x/q rounded once. It \
             comes from rounding in {name}, not from the mask; rounding=\"once\" fails anything \
             beyond one rounding of x/q",
            largest.id,
            percent(largest.relative),
            largest.component,
            largest.z_real,
            percent(rounded / exact - 1.0),
            range(RECIPROCAL),
            range(ONCE),
        ))
    }
}

/// A relative deviation as a signed percentage, three significant digits.
fn percent(r: f64) -> String {
    format!("{:+.3}%", 100.0 * r)
}

/// Whether the claim `id` ran in `results` and failed *low*: its worst
/// component's estimate below the analytic value (`z < 0`).
pub fn failed_low(results: &[ClaimResult], id: &str) -> bool {
    results
        .iter()
        .find(|r| r.id == id && r.verdict == Verdict::Fail)
        .and_then(|r| r.worst().map(|k| r.tests[k].z < 0.0))
        .unwrap_or(false)
}

/// Whether the claim `id` ran in `results` and failed.
pub fn failed_in(results: &[ClaimResult], id: &str) -> bool {
    results
        .iter()
        .any(|r| r.id == id && r.verdict == Verdict::Fail)
}

/// Whether the claim `id` ran in `results` and passed.
fn passed_in(results: &[ClaimResult], id: &str) -> bool {
    results
        .iter()
        .any(|r| r.id == id && r.verdict == Verdict::Pass)
}

/// Cause 0, a rate other than the declared one: `dropout.kept_count`
/// fails while `dropout.mean` passes, and the kept fraction itself is off
/// `q`. An inverted dropout at another rate `p'` keeps `E[z] = x` (its
/// survivors are `x/q'`), so the mean passes, while its kept fraction is
/// `q'`; a keep rule inverted or a wrong scale fails the mean with the
/// count, and units kept with probability `q` but not independently (a
/// fixed number dropped, cause 4) fail the count's law with its mean right.
///
/// The kept fraction is read off the count's law over the `d` units of its
/// input and `n` draws: `K̄ = Σ_k k P̂(K = k)`, whose null standard error
/// is `√(d p q / n)` (a `Binomial(d, q)` count per draw); the fraction is
/// off when `|K̄ − d q|` exceeds the suite's critical `z` times that
/// (independent units; dependent ones only widen the count's spread, and
/// their mean `d q` still holds).
fn rate_mismatch(results: &[ClaimResult], rate: Rate) -> Option<String> {
    if !(failed_in(results, dropout_ids::KEPT_COUNT) && passed_in(results, dropout_ids::MEAN)) {
        return None;
    }
    let count = results.iter().find(|r| r.id == dropout_ids::KEPT_COUNT)?;
    let d = count.estimate.len().checked_sub(1).filter(|&d| d > 0)? as f64;
    let mean_count: f64 = count
        .estimate
        .iter()
        .enumerate()
        .map(|(k, e)| k as f64 * e.value)
        .sum();
    let null_se = (d * rate.p() * rate.q() / count.samples as f64).sqrt();
    if (mean_count - d * rate.q()).abs() <= dropmc::stats::critical_z() * null_se {
        return None;
    }
    let kept = mean_count / d;
    Some(format!(
        "the layer drops at another rate than the declared p = {}: its kept fraction is {kept:.4} \
         (p ≈ {:.4}) over {} draws, while its mean E[z] = x holds (an inverted dropout at its own \
         rate); pass the rate the layer runs at (the other claims then judge it), or fix the \
         layer's rate",
        rate.p(),
        1.0 - kept,
        count.samples,
    ))
}

/// The causes the semantics rules name themselves (eval path, input written
/// in place, backward mask, `p = 0`), one line per failing rule.
pub fn rule_causes(results: &[ClaimResult]) -> Vec<String> {
    let mut causes = Vec::new();
    for (id, cause) in [
        (
            "semantics.forward_preserves_input",
            "the forward writes into the array it is given (an in-place dropout, such as \
             F.dropout(x, inplace=True)): the caller's input is overwritten",
        ),
        (
            semantics_ids::EVAL_IDENTITY,
            "the eval path is not the identity: it rescales or drops in eval mode",
        ),
        (
            "semantics.eval_draws_nothing",
            "eval mode draws random numbers from the generator",
        ),
        (
            semantics_ids::BACKWARD_MASK,
            "backward does not reuse the forward's mask (it draws a fresh one, or scales by \
             other than 1/q)",
        ),
        (
            semantics_ids::P_ZERO_IDENTITY,
            "at p = 0 the layer is not the identity",
        ),
    ] {
        if failed_in(results, id) {
            causes.push(cause.to_string());
        }
    }
    causes
}

/// One line per cause the failing claims of `results` point to (empty when
/// nothing failed), a rate other than the declared one first; then the
/// warning of cause 5 when `biases` (from [`super::judge_composite`]) holds
/// a moment the dtype's rounding biases.
pub fn likely_causes(
    results: &[ClaimResult],
    rounding: &Rounding,
    biases: &[RoundingBias],
) -> Vec<String> {
    let failed = |id: &str| failed_in(results, id);
    let worst_z = |id: &str| {
        results
            .iter()
            .find(|r| r.id == id)
            .and_then(|r| r.worst().map(|k| r.tests[k].z))
    };
    let mismatch = rate_mismatch(results, rounding.rate);
    let mut causes: Vec<String> = mismatch.iter().cloned().collect();
    causes.extend(rule_causes(results));
    // Masks that recur point to the generator's stream (a short period, a
    // re-seeded generator) when the units are otherwise independent; when
    // the kept count or the sum's variance fails too, the units of a row
    // may share bits (cause 4), so a window holds fewer random bits than
    // the rule assumed and recurs for that reason as well.
    if failed("semantics.masks_never_repeat") {
        let units_dependent = failed(dropout_ids::KEPT_COUNT) || failed(dropout_ids::SUM_VARIANCE);
        causes.push(if units_dependent {
            "the keep masks recur (runs of consecutive rows repeat earlier ones bit for bit) \
             while the kept count or the sum's variance fails: the generator has a short period, \
             or the units of a row share random bits (then each row holds fewer random bits \
             than units)"
                .into()
        } else {
            "the keep masks recur: a run of consecutive rows repeats an earlier one bit for bit \
             (a generator with a short period, or re-seeded alike on each call)"
                .into()
        });
    }
    if failed(crate::small_calls::ONE_ROW_MASKS_NEVER_REPEAT)
        && !failed("semantics.masks_never_repeat")
    {
        causes.push(
            "the keep mask recurs from call to call though not within a call: a mask kept \
             per input shape, or a generator re-seeded alike on each call"
                .into(),
        );
    }
    let per_unit_fails = PER_UNIT.iter().any(|id| failed(id));
    let moments_fail = per_unit_fails
        || failed(dropout_ids::SUM_MEAN)
        || failed(dropout_ids::SUM_VARIANCE)
        || failed(dropout_ids::KEPT_COUNT);
    if mismatch.is_some() {
        // The moments and the survivors fail with the rate: cause 0 says so.
    } else if failed(semantics_ids::SURVIVORS_EXACT) {
        // "The moments fail with it" only when one does (issue 44).
        let moments = if moments_fail {
            "the moments fail with it"
        } else {
            "the moments do not resolve it at this budget"
        };
        causes.push(format!(
            "the kept values are not x/q in the input's dtype: the survivors' scale is wrong \
             (x*q, x/p, or 1/q rounded in a lower precision); {moments}"
        ));
    } else if failed(dropout_ids::VARIANCE)
        && worst_z(dropout_ids::VARIANCE).is_some_and(|z| z < 0.0)
    {
        causes.push(
            "two training passes differ less than two independent masks do: masks are reused \
             (one mask for every row of a call, a generator re-seeded on each call, or a short \
             period); the other moments fail because their draws are not independent"
                .into(),
        );
    } else if per_unit_fails && failed(dropout_ids::KEPT_COUNT) {
        causes.push(
            "the kept values are right but the keep probability is not q = 1 - p: the layer \
             drops at another rate, or its keep rule is inverted (kept when u < p)"
                .into(),
        );
    } else if !per_unit_fails
        && (failed(dropout_ids::KEPT_COUNT) || failed(dropout_ids::SUM_VARIANCE))
    {
        causes.push(
            "each unit is kept with probability q, but not independently of the others (a fixed \
             number dropped, neighbouring units sharing a random bit, or a mask shared along an \
             axis: a channel-wise dropout is checked with its mask shape)"
                .into(),
        );
    } else if moments_fail {
        causes.push(
            "the moments are off while the kept values are right: the keep probability depends \
             on the input or the unit"
                .into(),
        );
    }
    causes.extend(rounding.warning(results, biases));
    causes
}
