//! Helpers shared by the integration tests.
#![allow(dead_code)]

use dropmc::claims::{ClaimResult, Verdict};

/// Panics with the full result (parameters, z, p, MDE) when a claim fails.
pub fn assert_pass(result: &ClaimResult) {
    assert_eq!(
        result.verdict,
        Verdict::Pass,
        "claim {} failed (seed {}, {} samples): error {:?}\n target {:?}\n estimate {:?}\n tests {:?}\n oracle agrees {:?}",
        result.id,
        result.seed,
        result.samples,
        result.error,
        result.target,
        result.estimate,
        result.tests,
        result.oracle_agrees
    );
}
