//! The moment claims judged against what the dtype can hold: a composite
//! null per claim ([`dropmc::stats::interval_test`]).
//!
//! In float16 and bfloat16 no layer can output `x/q` itself: a correct
//! one keeps some admissible rounding `s` of it, and its moments are
//! those of `s`, not of `x/q` (torch's bfloat16 survivors at `p = 0.1` are
//! `x·1.109375`, −0.156 %, which a million draws resolve at `z ≈ −15`).
//! [`super::moment_nulls`] gives each moment claim the interval of
//! targets its admissible roundings span; [`judge_composite`] tests each
//! component's estimate against the nearest end of its interval (the
//! size argument is in [`dropmc::stats::interval_test`]'s module) and
//! keeps what the test against real arithmetic saw, so that a bias the
//! dtype puts into the moments is reported ([`RoundingBias`]) rather than
//! hidden.
//!
//! Below a claim's minimum budget a bounded component's test is the
//! distribution-free bound's ([`dropmc::stats::bernstein_test`]), so the
//! composite test there is the bound against the nearest end of the
//! interval, of the same width: the bound holds at any target inside it,
//! and rejecting only beyond the nearest end is the union of those tests.

use dropmc::claims::{ClaimResult, Verdict};
use dropmc::stats::{ZTest, bernstein_test, interval_test};

use crate::forward::Dtype;

/// A claim's composite null: per component, the interval `[lo, hi]` of
/// admissible targets.
#[derive(Debug, Clone)]
pub struct CompositeNull {
    pub id: &'static str,
    pub dtype: Dtype,
    pub intervals: Vec<(f64, f64)>,
}

/// A component the real-arithmetic target would have failed while the
/// composite null holds: the dtype's rounding biases this moment by more
/// than the test resolves.
#[derive(Debug, Clone, PartialEq)]
pub struct RoundingBias {
    pub id: &'static str,
    pub component: usize,
    /// The estimate over the real-arithmetic target, minus 1.
    pub relative: f64,
    /// `z` of the estimate against the real-arithmetic target.
    pub z_real: f64,
}

/// Re-judges the claims of `results` that have a composite null in
/// `nulls`: each component against its interval, the verdict from those
/// tests (an inconclusive or failed-to-run claim stays as it was). Returns
/// the components whose real-arithmetic test rejects while the composite
/// one does not.
pub fn judge_composite(results: &mut [ClaimResult], nulls: &[CompositeNull]) -> Vec<RoundingBias> {
    let mut biases = Vec::new();
    for result in results.iter_mut() {
        let Some(null) = nulls.iter().find(|n| n.id == result.id) else {
            continue;
        };
        if result.error.is_some() || null.intervals.len() != result.estimate.len() {
            continue;
        }
        for (k, &(lo, hi)) in null.intervals.iter().enumerate() {
            let real = result.tests[k];
            let real_target = result.target[k];
            let (test, target) = composite_test(result, k, lo, hi);
            if real.rejected && !test.rejected && real_target != 0.0 {
                biases.push(RoundingBias {
                    id: result.id,
                    component: k,
                    relative: result.estimate[k].value / real_target - 1.0,
                    z_real: real.z,
                });
            }
            result.tests[k] = test;
            result.target[k] = target;
        }
        let rejected = (0..result.tests.len())
            .filter(|&k| bounded(result, k) && result.tests[k].rejected)
            .count();
        if let Some(below) = result.below_budget.as_mut() {
            // Below the minimum budget only the bounded components decide.
            below.rejected = rejected;
            let failed = below.rejected > 0 || result.order_failed();
            result.verdict = if failed {
                Verdict::Fail
            } else {
                Verdict::Inconclusive
            };
        } else if result.verdict != Verdict::Inconclusive {
            result.verdict = if result.tests.iter().any(|t| t.rejected) {
                Verdict::Fail
            } else {
                Verdict::Pass
            };
        }
        let spans = null.intervals.iter().any(|(lo, hi)| lo != hi);
        let seen: Vec<String> = biases
            .iter()
            .filter(|b| b.id == result.id)
            .map(|b| {
                format!(
                    "unit {}: {:+.3}% from real arithmetic (z = {:.1} against x^r/q^(r-1))",
                    b.component,
                    100.0 * b.relative,
                    b.z_real
                )
            })
            .collect();
        let mut note = format!(
            "tested against the nearest target a {} layer can produce ({}",
            null.dtype.name(),
            if spans {
                "the interval its admissible roundings of x/q span"
            } else {
                "x/q rounded once"
            }
        );
        if !seen.is_empty() {
            note.push_str(&format!("); dtype bias: {}", seen.join("; ")));
        } else {
            note.push(')');
        }
        result.note = Some(match result.note.take() {
            Some(old) => format!("{old}; {note}"),
            None => note,
        });
    }
    biases
}

/// Whether component `k` of `result` was tested by the bound below the
/// minimum budget.
fn bounded(result: &ClaimResult, k: usize) -> bool {
    matches!(result.bound_widths.get(k), Some(Some(_)))
}

/// Component `k`'s test against `[lo, hi]` and the target it is tested
/// against: the bound at the nearest end for a bounded component below the
/// minimum budget (module docs), the interval test otherwise.
fn composite_test(result: &ClaimResult, k: usize, lo: f64, hi: f64) -> (ZTest, f64) {
    let estimate = result.estimate[k];
    if let Some(Some(width)) = result.bound_widths.get(k) {
        let target = estimate.value.clamp(lo, hi);
        if let Some(test) = bernstein_test(estimate, target, *width) {
            return (test, target);
        }
    }
    interval_test(result.statistic, estimate, lo, hi)
}
