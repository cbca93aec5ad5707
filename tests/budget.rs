//! The suite stays within its declared false-alarm budget.
//!
//! Statistical assertions made by the default suite:
//! * `tests/report_snapshot.rs`: every component of every claim, once;
//! * `tests/dropout_claims.rs`: every component of every dropout claim, once
//!   per seed in `OTHER_SEEDS` (2 seeds);
//! * `tests/cli.rs`: `mc` of `eval moments` on a 3-unit input (3·3 + 2 = 11
//!   components);
//! * `tests/calibration.rs`: every dropout component once per seed (8 seeds),
//!   plus one KS test per dropout component and one pooled KS test.
//!
//! `tests/frameworks_candle.rs` and `tests/frameworks_burn.rs` run only with
//! `--features candle,burn` (a separate CI step) and state their own budgets.

use dropmc::claims::registry;
use dropmc::stats::{FAMILY_ALPHA, SUITE_ASSERTION_BUDGET, assertion_alpha, critical_z};

fn components(family: Option<&str>) -> u64 {
    registry()
        .into_iter()
        .filter(|c| family.is_none_or(|f| c.family() == f))
        .map(|c| c.analytic().expect("analytic").len() as u64)
        .sum()
}

/// Every statistical assertion the default suite makes.
fn statistical_assertions() -> u64 {
    let dropout = components(Some("dropout"));
    components(None) + 2 * dropout + 11 + 8 * dropout + dropout + 1
}

#[test]
fn the_suite_makes_no_more_assertions_than_its_budget() {
    let n = statistical_assertions();
    assert!(
        n <= SUITE_ASSERTION_BUDGET,
        "{n} assertions exceed the budget"
    );
    // The union bound then caps the chance of any false alarm.
    assert!(n as f64 * assertion_alpha() <= FAMILY_ALPHA);
}

#[test]
fn the_critical_value_matches_the_normal_table() {
    // Φ⁻¹(1 − 5·10⁻¹¹) = 6.466951 by Python's statistics.NormalDist, an
    // implementation independent of statrs.
    assert!(
        (critical_z() - 6.466951).abs() < 1e-5,
        "critical z = {}",
        critical_z()
    );
}
