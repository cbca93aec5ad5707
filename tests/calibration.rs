//! A reduced calibration run in CI: the dropout family under several seeds
//! fails nowhere and its p-values are uniform.
//!
//! Budget (recorded by `tests/common`, summed by `tests/zz_budget.rs`):
//! every component of every dropout claim once per seed (`SEEDS` runs), at
//! its test's size, plus one KS test per component and one pooled KS test,
//! each at the per-assertion level.

mod common;

use dropmc::ops::Subject;
use dropmc::stats::assertion_alpha;
use dropmc::verify::calibrate::{CalibrationOptions, calibrate};

/// Seeds of the reduced run.
pub const SEEDS: u64 = 8;

#[test]
fn the_dropout_family_is_calibrated_across_seeds() {
    let components: usize = dropmc::claims::registry()
        .iter()
        .filter(|c| c.family() == "dropout")
        .map(|c| c.analytic().unwrap().len())
        .sum();
    let options = CalibrationOptions {
        seeds: SEEDS,
        first_seed: 5000,
        samples: Some(30_000),
        family: Some("dropout".into()),
        // All KS tests together spend the false-alarm budget of
        // `components + 1` assertions.
        flag_alpha: assertion_alpha() * (components + 1) as f64,
    };
    for claim in dropmc::claims::registry() {
        if claim.family() == "dropout" {
            let n = claim.analytic().unwrap().len() as u64;
            common::record(SEEDS * n, claim.statistic().size_factor());
        }
    }
    common::record(components as u64 + 1, 1.0);
    let c = calibrate(&Subject::reference(), &options, |_, _| {}).unwrap();
    assert_eq!(c.failed_runs, 0, "{}", dropmc::verify::calibrate::table(&c));
    assert!(c.calibrated(), "{}", dropmc::verify::calibrate::table(&c));
}

#[test]
fn a_wrong_standard_error_is_flagged() {
    // Power, not size: the statistic's estimator is right but a test that
    // used half the true standard error would put p-values near 0. We
    // emulate it by checking that the pooled KS of z-scores doubled is
    // rejected, using the same KS routine the calibration uses.
    let z: Vec<f64> = (1..=400)
        .map(|i| {
            let u = i as f64 / 401.0;
            let normal = statrs::distribution::Normal::standard();
            2.0 * statrs::distribution::ContinuousCDF::inverse_cdf(&normal, u)
        })
        .collect();
    let p: Vec<f64> = z.iter().map(|&z| dropmc::stats::two_sided_p(z)).collect();
    let ks = dropmc::stats::ks_uniform(&p).unwrap();
    assert!(ks.p_value < assertion_alpha(), "{ks:?}");
}

#[test]
fn deterministic_rules_are_explained_not_ks_tested() {
    // No statistical assertion: only the notes are checked (the verdicts of
    // this run are not asserted, so it spends no false-alarm budget).
    let options = CalibrationOptions {
        seeds: 2,
        first_seed: 5100,
        samples: Some(2_000),
        family: Some("semantics".into()),
        flag_alpha: 0.01,
    };
    let c = calibrate(&Subject::reference(), &options, |_, _| {}).unwrap();
    let rule = c
        .claims
        .iter()
        .find(|x| x.id == "semantics.eval_identity")
        .expect("registered");
    assert!(rule.components.is_empty(), "{rule:?}");
    assert!(!rule.flagged);
    assert!(
        rule.note
            .as_deref()
            .is_some_and(|n| n.contains("deterministic")),
        "{rule:?}"
    );
    // Every claim without a KS-tested component says why.
    for claim in c.claims.iter().filter(|x| x.components.is_empty()) {
        assert!(claim.note.is_some(), "{claim:?}");
    }
}
