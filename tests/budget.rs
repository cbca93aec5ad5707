//! The suite stays within its declared false-alarm budget.
//!
//! Statistical assertions made by the default suite:
//! * `tests/report_snapshot.rs`: every component of every claim, once;
//! * `tests/dropout_claims.rs`: every component of every dropout claim, once
//!   per seed in `OTHER_SEEDS` (2 seeds);
//! * `tests/cli.rs`: `mc` of `eval moments` on a 3-unit input (3·3 + 2 = 11
//!   components);
//! * `tests/calibration.rs`: the reference check's flag level, one
//!   assertion per test calibration makes: a failure count per dropout
//!   claim, a KS test per dropout component, one pooled KS test (the
//!   planted-claim tests assert power, not size);
//! * `tests/norm_eval.rs` (`exact_matches_an_independent_enumeration_and_mc_is_within_error`):
//!   `mc` of `eval ln|rms|bypass|compound` at d = 4, 9, 14, i.e.
//!   Σ_d (9 + 4d) = 135 components;
//! * `tests/conformance.rs`: every component of the semantics, attention,
//!   mask_shape and ensemble claims, once more (on a layer written outside
//!   the crate);
//! * `tests/attention_cli.rs`: `mc` of `eval attn` on the seed row with
//!   values (3 + 4 = 7 components).
//! * `tests/mutants.rs` and `mutants --json` make no assertion that can fail
//!   by chance: kills are expected failures, and the equivalent mutants'
//!   results are bit-identical to the reference's, whose failures at a small
//!   budget are excluded from the kill matrix.
//! * `tests/stack.rs`: the deep-stack contrasts: rate steps 2·6, depth
//!   steps 5 + 1, after-last-BN nulls 2·6, re-estimation nulls 2·6, fold
//!   2·6 + 2·6 + 6, LayerNorm 2·6, readout 2·2 (88);
//! * `tests/cli.rs`: `mc` of `eval bn` on 2 channels (c and the fold: 4);
//! * `tests/fast_path.rs`: `fast_norm_matches_the_exact_formulas` (6),
//!   `fast_layernorm_matches_full_enumeration` (23),
//!   `fast_layernorm_agrees_with_the_reference_sampler` (67),
//!   `fast_attention_matches_the_formulas_and_the_reference` (6),
//!   `bernoulli_bits_keep_with_probability_q` (8): 110;
//! * `tests/fast_vs_generic_families.rs`: every component of the dropout,
//!   attention, mask_shape and ensemble claims once more (fast against
//!   generic), plus `eval moments` on 4 units (14), `eval attn` on 5 keys
//!   (9) and one replicate check of a variance's standard error (1);
//! * `tests/fast_vs_generic.rs`: every norm-family claim component (118)
//!   and the `mc` components of `eval ln|rms|bypass|compound` at d = 12
//!   (86), fast against generic, and `eval bypass` with an often-constant
//!   `y` against its exact value (8): 212;
//! * `tests/second_order.rs` makes none: it compares exact oracles with
//!   closed forms (rounding bounds, no sampling); the `second_order`
//!   claims' Monte Carlo runs in the registry (first bullet).
//!
//! `tests/frameworks_candle.rs`, `tests/frameworks_burn.rs` and
//! `tests/frameworks_norm.rs` run only with `--features candle,burn` (a
//! separate CI step) and state their own budgets.

use dropmc::claims::registry;
use dropmc::stats::{FAMILY_ALPHA, SUITE_ASSERTION_BUDGET, assertion_alpha, critical_z};

fn components(family: Option<&str>) -> u64 {
    registry()
        .into_iter()
        .filter(|c| family.is_none_or(|f| c.family() == f))
        .map(|c| c.analytic().expect("analytic").len() as u64)
        .sum()
}

/// Statistical assertions of `tests/fast_path.rs` (see the module docs).
const FAST_PATH: u64 = 110;

/// Statistical assertions of `tests/fast_vs_generic.rs` (see the module docs).
const FAST_VS_GENERIC: u64 = 118 + 86 + 8;

/// `tests/norm_eval.rs`: Σ_{d ∈ {4, 9, 14}} (9 + 4d).
const NORM_EVAL: u64 = 135;

/// `tests/fast_vs_generic_families.rs` beyond the claims' components:
/// `eval moments` (3·4 + 2), `eval attn` (5 + 4), the replicate check (1).
const FAST_VS_GENERIC_EVAL: u64 = 14 + 9 + 1;

/// Every statistical assertion the default suite makes.
fn statistical_assertions() -> u64 {
    let dropout = components(Some("dropout"));
    let dropout_claims = registry()
        .iter()
        .filter(|c| c.family() == "dropout")
        .count() as u64;
    let conformance: u64 = ["semantics", "attention", "mask_shape", "ensemble"]
        .into_iter()
        .map(|f| components(Some(f)))
        .sum();
    let fast_vs_generic: u64 = ["dropout", "attention", "mask_shape", "ensemble"]
        .into_iter()
        .map(|f| components(Some(f)))
        .sum::<u64>()
        + FAST_VS_GENERIC_EVAL;
    // tests/stack.rs: 88; tests/cli.rs, eval bn: 4.
    let batchnorm = 88 + 4;
    components(None)
        + 2 * dropout
        + 11
        + dropout_claims
        + dropout
        + 1
        + NORM_EVAL
        + conformance
        + 7
        + batchnorm
        + FAST_PATH
        + fast_vs_generic
        + FAST_VS_GENERIC
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
