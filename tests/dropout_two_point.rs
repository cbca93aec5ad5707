//! The dropout family's two-point statistics on their two paths: the
//! per-unit variance's fast path runs the pair form its statistic declares,
//! and the generic path keeps the exact test of a scaled count whose draws
//! are two-valued. (Moved from `tests/test_sizes.rs`, which names no claim.)
//! No statistical assertion is recorded: the reference layer's verdicts at
//! 1 001 draws are exact binomial tests (their size is listed by
//! `tests/test_sizes.rs`).

use dropmc::claims::{Claim, registry};
use dropmc::engine::Budget;
use dropmc::formulas::dropout as f;
use dropmc::ops::Rate;
use dropmc::stats::Statistic;

fn dropout_claims() -> Vec<&'static dyn Claim> {
    registry()
        .into_iter()
        .filter(|c| c.family() == "dropout")
        .collect()
}

#[test]
fn the_per_unit_variance_is_conclusive_from_the_pair_forms_budget() {
    // Issue 22: the pair form's exact test is conclusive on either path
    // from at most 1 750 draws (the single-draw variance needed 37 500).
    let claim = dropout_claims()
        .into_iter()
        .find(|c| c.id() == "dropout.variance")
        .unwrap();
    let n = claim
        .min_samples()
        .max(claim.statistic().on_generic_path().min_samples());
    assert!(n <= 1750, "{n}");
}

#[test]
fn the_per_unit_variance_runs_the_pair_form_it_declares() {
    // The pair form's mean over n pairs is c J / n with J an integer count
    // of discordant pairs, c = x²/(2q²); the single-draw sample variance
    // c'² K (n − K)/(n (n − 1)) (c' = x/q) is not on that lattice. The
    // budget (odd, not a multiple of a chunk) keeps the two apart.
    let claim = dropout_claims()
        .into_iter()
        .find(|c| c.id() == "dropout.variance")
        .unwrap();
    let budget = Budget::new(1_751, 7).unwrap();
    let estimates = claim.fast_estimate(budget).unwrap().unwrap();
    let rate = Rate::new(dropmc::claims::dropout::UNIT_P).unwrap();
    for (e, &x) in estimates.iter().zip(&dropmc::claims::dropout::UNIT_X) {
        if x == 0.0 {
            assert_eq!(e.value, 0.0);
            continue;
        }
        let c = x * x / (2.0 * rate.q() * rate.q());
        let count = e.value * budget.samples as f64 / c;
        // The mean is within γ_{16n} of c J / n (tolerance.rs,
        // TWO_POINT_ROUNDINGS_PER_DRAW), so the count within n γ_{16n} of J.
        let n = budget.samples as f64;
        let slack = n * dropmc::stats::tolerance::two_point_accumulation(n);
        assert!((count - count.round()).abs() <= slack, "x = {x}: {count}");
        let _ = f::unit_variance(x, rate);
    }
}

#[test]
fn the_generic_path_tests_a_scaled_count_exactly_when_its_draws_are_two_valued() {
    use dropmc::claims::{Verdict, check};
    use dropmc::ops::{InvertedDropout, Subject};
    // The reference layer as an implementation (its own forward pass every
    // draw): below the two-point t-test's 3 571 draws the claim used to be
    // inconclusive; its draws are two-valued, so it now gets the exact test.
    let layer = InvertedDropout;
    let subject = Subject::with_dropout(&layer);
    for id in ["dropout.mean", "dropout.fourth_moment", "dropout.variance"] {
        let claim = dropout_claims().into_iter().find(|c| c.id() == id).unwrap();
        let result = check(claim, &subject, Budget::new(1_001, 11).unwrap());
        assert!(
            matches!(result.statistic, Statistic::ScaledCount { .. }),
            "{id}: {:?}",
            result.statistic
        );
        assert_eq!(result.verdict, Verdict::Pass, "{id}: {result:?}");
    }
}
