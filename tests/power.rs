//! Power of the conformance claims against every mutant of the gallery,
//! from the effect sizes, at a cheap budget.
//!
//! Budget: 2 000 draws per claim, one seed (≈ 1/500 of the default budget
//! of the million-draw claims). The power of a z-test at a fixed effect only
//! grows with the draws, so a power of at least 0.999 here implies at least
//! 0.999 at the default budget; the conservative extrapolation
//! (`at_default_budget`, a lower confidence bound on each effect) must show
//! it too. This test expects FAILURES of wrong layers: it spends no
//! false-alarm budget (tests/zz_budget.rs). Its own risk is the noise of a
//! one-seed effect estimate (SD 1 in z). Power 0.999 needs some component
//! with |z| ≥ z_c + 3.1 ≈ 9. At this budget the subtlest mutant,
//! `rate_off_2pct`, has z ≈ −21 on `dropout.worked_512_mean` (`dropmc
//! mutants --samples 2000`), 12 SD of margin; the others break a
//! deterministic rule (z = ±inf) or have larger effects. An infinite z is a
//! certain detection, counted and never averaged: a mutant caught only that
//! way has a conservative power bounded by its seed count (0.05 from one
//! seed), which the test checks instead of 0.999.

use dropmc::Registry;
use dropmc::conformance::verify::Replication;
use dropmc::conformance::verify::power::{PowerOptions, mutant_candidates, power, table};

#[test]
fn every_non_equivalent_mutant_is_caught_with_power_at_least_0_999() {
    let options = PowerOptions {
        replication: Replication {
            seeds: 1,
            first_seed: 7100,
            family: None,
        },
        samples: Some(2_000),
    };
    let candidates = mutant_candidates();
    let run = power(&Registry::default(), &candidates, &options, |_, _| {}).unwrap();
    let shown = table(&run);
    assert_eq!(
        run.rows.len(),
        dropmc::conformance::mutants::gallery().len(),
        "{shown}"
    );
    for row in run.rows.iter().filter(|r| !r.equivalent) {
        assert!(row.from_effect >= 0.999, "{}: {shown}", row.subject);
        assert_eq!(row.detections, 1, "{}: {shown}", row.subject);
        if row.certain.count < row.seeds {
            assert!(row.at_default_budget >= 0.999, "{}: {shown}", row.subject);
        } else {
            // Caught only through an infinite z (a violated rule or an
            // underflowed exact p-value): one seed bounds that rate below
            // only by 0.05, and the conservative power says no more.
            assert!(row.at_default_budget >= 0.05, "{}: {shown}", row.subject);
            // Its two-sided 95 % interval from one seed is [0.025, 1]
            // (0.95 and 1 − 0.95 are rounded at the scale of 1: within ε).
            let lower_room = f64::EPSILON;
            assert!((row.certain.lower - 0.025).abs() <= lower_room, "{shown}");
            assert_eq!(row.certain.upper, 1.0, "{shown}");
        }
    }
    // The equivalent mutants are listed and none is caught. This spends no
    // false-alarm budget either: they reproduce the reference's outputs
    // from the same streams (bit for bit, or unless u == p exactly), and a
    // claim the reference fails at this seed is left out as unusable, so
    // their detections are 0 by construction, not by chance.
    for row in run.rows.iter().filter(|r| r.equivalent) {
        assert_eq!(row.detections, 0, "{}: {shown}", row.subject);
    }
}

#[test]
fn an_unknown_family_and_zero_seeds_are_typed_errors() {
    let mut options = PowerOptions {
        replication: Replication {
            seeds: 0,
            first_seed: 1,
            family: None,
        },
        samples: Some(100),
    };
    assert!(
        power(
            &Registry::default(),
            &mutant_candidates(),
            &options,
            |_, _| {}
        )
        .is_err()
    );
    options.replication.seeds = 1;
    options.replication.family = Some("no_such_family".into());
    assert!(
        power(
            &Registry::default(),
            &mutant_candidates(),
            &options,
            |_, _| {}
        )
        .is_err()
    );
}
