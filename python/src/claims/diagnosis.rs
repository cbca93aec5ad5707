//! The likely cause a set of failing claims points to, in words.
//!
//! One claim's failure has several possible causes (a biased mean: a wrong
//! scale, an inverted keep rule, or masks reused so that the test's
//! standard error is too small); the *set* of failures, and the direction
//! of the variance's, tells them apart:
//!
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
//! The semantics rules name their own cause (eval path, input written in
//! place, backward mask). The causes are likely, not certain: they are the
//! simplest bug consistent with the pattern.

use dropmc::claims::{ClaimResult, Verdict};

/// The per-unit moment claims.
const PER_UNIT: [&str; 5] = [
    "dropout.mean",
    "dropout.second_moment",
    "dropout.third_moment",
    "dropout.fourth_moment",
    "dropout.variance",
];

/// One line per cause the failing claims of `results` point to (empty when
/// nothing failed).
pub fn likely_causes(results: &[ClaimResult]) -> Vec<String> {
    let failed = |id: &str| {
        results
            .iter()
            .any(|r| r.id == id && r.verdict == Verdict::Fail)
    };
    let worst_z = |id: &str| {
        results
            .iter()
            .find(|r| r.id == id)
            .and_then(|r| r.worst().map(|k| r.tests[k].z))
    };
    let mut causes = Vec::new();
    for (id, cause) in [
        (
            "semantics.forward_preserves_input",
            "the forward writes into the array it is given (an in-place dropout, such as \
             F.dropout(x, inplace=True)): the caller's input is overwritten",
        ),
        (
            "semantics.eval_identity",
            "the eval path is not the identity: it rescales or drops in eval mode",
        ),
        (
            "semantics.eval_draws_nothing",
            "eval mode draws random numbers from the generator",
        ),
        (
            "semantics.backward_mask",
            "backward does not reuse the forward's mask (it draws a fresh one, or scales by \
             other than 1/q)",
        ),
        (
            "semantics.p_zero_identity",
            "at p = 0 the layer is not the identity",
        ),
    ] {
        if failed(id) {
            causes.push(cause.to_string());
        }
    }
    let per_unit_fails = PER_UNIT.iter().any(|id| failed(id));
    let moments_fail = per_unit_fails
        || failed("dropout.sum_mean")
        || failed("dropout.sum_variance")
        || failed("dropout.kept_count");
    if failed("semantics.survivors_exact") {
        causes.push(
            "the kept values are not x/q in the input's dtype: the survivors' scale is wrong \
             (x*q, x/p, or 1/q rounded in a lower precision); the moments fail with it"
                .into(),
        );
    } else if failed("dropout.variance") && worst_z("dropout.variance").is_some_and(|z| z < 0.0) {
        causes.push(
            "two training passes differ less than two independent masks do: masks are reused \
             (one mask for every row of a call, a generator re-seeded on each call, or a short \
             period); the other moments fail because their draws are not independent"
                .into(),
        );
    } else if per_unit_fails && failed("dropout.kept_count") {
        causes.push(
            "the kept values are right but the keep probability is not q = 1 - p: the layer \
             drops at another rate, or its keep rule is inverted (kept when u < p)"
                .into(),
        );
    } else if !per_unit_fails && (failed("dropout.kept_count") || failed("dropout.sum_variance")) {
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
    causes
}
