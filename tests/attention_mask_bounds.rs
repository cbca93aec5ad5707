//! Issue 44 item 1 on the attention and mask-shape families: below a
//! claim's minimum (CLT) budget the distribution-free bound on the
//! statistic's known range (`Claim::null_range`, derived in
//! `claims::dropout::range` and the families' `widths`) decides a gross
//! error, and never fails a correct layer. Run on the engine's own
//! implementations (the reference layer as an implementation, and two
//! mutants of the gallery), so every draw calls a forward pass.

use dropmc::claims::{ClaimResult, attention, mask_shape};
use dropmc::conformance::mutants::gallery;
use dropmc::ops::InvertedDropout;
use dropmc::{Budget, Claim, Subject, Verdict, check};

fn mutant(id: &str) -> Subject<'static> {
    let m = gallery()
        .into_iter()
        .find(|m| m.id == id)
        .expect("a mutant of the gallery");
    Subject::with_dropout(m.layer)
}

fn run(claims: &[&dyn Claim], subject: &Subject, samples: u64, seed: u64) -> Vec<ClaimResult> {
    let budget = Budget::new(samples, seed).expect("a budget");
    claims.iter().map(|c| check(*c, subject, budget)).collect()
}

fn shown(results: &[ClaimResult]) -> String {
    results
        .iter()
        .map(|r| {
            format!(
                "{} {:?} min {} {:?}",
                r.id, r.verdict, r.min_samples, r.note
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Keep-below-p at `p = 0.1` keeps a fraction 0.1 and scales by `1/0.9`:
/// every mean is `1/9` of its target (the variances `p q / q²` are unchanged,
/// so only the means can see it). At 1 000 draws, far below their minimum
/// budgets, the bound fails the entry, row-sum and output means.
#[test]
fn keep_below_p_fails_the_attention_means_at_1000_draws() {
    let claims = attention::at(&attention::A, &attention::V, 0.1);
    let refs: Vec<&dyn Claim> = claims.iter().map(|c| c as &dyn Claim).collect();
    let results = run(&refs, &mutant("keep_below_p"), 1_000, 3);
    for id in [
        "attention.entry_mean",
        "attention.row_sum_mean",
        "attention.output_mean",
    ] {
        fails_below_its_budget(&results, id);
    }
}

/// Survivors divided by `p = 0.3` instead of `q = 0.7`: each unit's
/// variance `p q x²/p²` is `(q/p)² = 5.4` times the claimed `(p/q) x²`. At
/// 1 000 draws, below its minimum budget, the bound fails the independent
/// mask's column-sum variance.
#[test]
fn divide_by_p_fails_the_mask_shape_variance_at_1000_draws() {
    let claims = mask_shape::at(&mask_shape::X, mask_shape::T, mask_shape::P);
    let refs: Vec<&dyn Claim> = claims.iter().map(|c| c as &dyn Claim).collect();
    let results = run(&refs, &mutant("divide_by_p"), 1_000, 5);
    fails_below_its_budget(&results, "mask_shape.independent_variance");
}

/// Claim `id` ran at 1 000 draws, below its minimum budget, and its
/// distribution-free bound rejected: a FAIL decided by the range bound.
fn fails_below_its_budget(results: &[ClaimResult], id: &str) {
    let r = results.iter().find(|r| r.id == id).expect("the claim");
    assert!(r.min_samples > 1_000, "{}", shown(results));
    assert_eq!(r.verdict, Verdict::Fail, "{}", shown(results));
    assert!(
        r.below_budget.is_some_and(|b| b.rejected > 0),
        "{}",
        shown(results)
    );
}

/// The reference layer, called as an implementation, over budgets 20 to
/// 5 000 and three rates: no claim of either family fails (each is
/// inconclusive or passes), and every inconclusive moment below its budget
/// states the smallest effect its bound decides.
#[test]
fn correct_attention_and_mask_shape_dropouts_never_fail_at_small_budgets() {
    let subject = Subject::with_dropout(&InvertedDropout);
    let mut checks = 0;
    for (i, &p) in [0.1, 0.3, 0.5].iter().enumerate() {
        let att = attention::at(&attention::A, &attention::V, p);
        let mask = mask_shape::at(&mask_shape::X, mask_shape::T, p);
        let refs: Vec<&dyn Claim> = att
            .iter()
            .map(|c| c as &dyn Claim)
            .chain(mask.iter().map(|c| c as &dyn Claim))
            .collect();
        for (j, samples) in [20u64, 200, 1_000, 5_000].into_iter().enumerate() {
            let results = run(&refs, &subject, samples, (10 * i + j) as u64);
            checks += results.len();
            for r in &results {
                assert_ne!(
                    r.verdict,
                    Verdict::Fail,
                    "p = {p}, n = {samples}\n{}",
                    shown(&results)
                );
                if r.verdict == Verdict::Inconclusive && r.bound_widths.iter().any(Option::is_some)
                {
                    assert!(r.bound_mde().is_some(), "{}", shown(&results));
                }
            }
        }
    }
    println!("{checks} claim checks, 0 FAIL");
}
