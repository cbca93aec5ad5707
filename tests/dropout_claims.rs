//! The dropout family at its default budget, under the default seed and two
//! more, and against implementations that must fail.
//!
//! False-alarm accounting: each run of a claim makes one assertion per
//! component, at the suite's per-assertion level; `statistical_assertions`
//! in `tests/zz_budget.rs` counts these runs.

mod common;

use dropmc::claims::{Verdict, check};
use dropmc::conformance::report::{Options, run};
use dropmc::engine::{Budget, derive_seed};
use dropmc::ops::Subject;

/// Seeds other than the default under which the family must also pass.
pub const OTHER_SEEDS: [u64; 2] = [2, 3];
/// Sample count for the other-seed runs (a fifth of the default budget).
pub const OTHER_SEED_SAMPLES: u64 = 200_000;

#[test]
fn every_dropout_claim_passes_under_other_seeds() {
    for seed in OTHER_SEEDS {
        let options = Options {
            seed: Some(seed),
            samples: Some(OTHER_SEED_SAMPLES),
            family: Some("dropout".into()),
        };
        let report = run(
            &dropmc::Registry::default(),
            &Subject::reference(),
            &options,
        )
        .expect("runs");
        for result in &report.results {
            common::assert_pass(result);
        }
    }
}

#[test]
fn every_exact_oracle_agrees_with_its_closed_form() {
    for claim in dropmc::claims::registry() {
        // A leading-order closed form is never compared as if exact.
        if claim.kind() != dropmc::claims::Kind::Exact {
            continue;
        }
        let analytic = claim.analytic().expect("analytic");
        if let Some(oracle) = claim.oracle().expect("oracle") {
            assert!(
                oracle.agrees_with(&analytic),
                "{}: oracle {:?} vs closed form {:?}",
                claim.id(),
                oracle.values,
                analytic
            );
        }
    }
}

#[test]
fn a_wrong_scale_fails_the_moment_claims() {
    // A deliberate failure: no false-alarm budget is spent (the assertion is
    // that the test rejects, which is power, not size).
    let divides_by_p = dropmc::conformance::mutants::gallery()
        .into_iter()
        .find(|m| m.id == "divide_by_p")
        .expect("in the gallery");
    let subject = Subject::with_dropout(divides_by_p.layer);
    for claim in dropmc::claims::registry() {
        if ["dropout.mean", "dropout.second_moment", "dropout.sum_mean"].contains(&claim.id()) {
            let budget = Budget::new(100_000, derive_seed(1, claim.id())).unwrap();
            let result = check(claim, &subject, budget);
            assert_eq!(
                result.verdict,
                Verdict::Fail,
                "{} did not catch the 1/p scale",
                claim.id()
            );
        }
    }
}
