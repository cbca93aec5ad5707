//! The suite-wide false-alarm rate and how it is split.
//!
//! The whole default suite (every claim of the registry, every component of a
//! vector claim, and every statistical assertion in `tests/`) may fail by
//! chance with probability at most [`FAMILY_ALPHA`]. It is split by
//! Bonferroni over a declared ceiling of [`SUITE_ASSERTION_BUDGET`]
//! assertions: each assertion runs at level `FAMILY_ALPHA / budget`, so by the
//! union bound the suite's chance of any false alarm is at most
//! `FAMILY_ALPHA` as long as it makes no more assertions than the ceiling
//! (a test checks that it does not). A fixed ceiling, rather than the exact
//! count, keeps every threshold stable as claims are added.

use statrs::distribution::{ContinuousCDF, Normal};

/// Probability that the whole default suite fails by chance on a correct
/// implementation.
pub const FAMILY_ALPHA: f64 = 1e-6;

/// Declared ceiling on the number of statistical assertions in the suite.
pub const SUITE_ASSERTION_BUDGET: u64 = 10_000;

/// Power at which minimum detectable effects are quoted.
pub const POWER: f64 = 0.8;

/// Per-assertion two-sided level: `FAMILY_ALPHA / SUITE_ASSERTION_BUDGET`.
pub fn assertion_alpha() -> f64 {
    FAMILY_ALPHA / SUITE_ASSERTION_BUDGET as f64
}

fn standard_normal() -> Normal {
    Normal::standard()
}

/// Two-sided critical value: `|z|` above this fails an assertion at level
/// [`assertion_alpha`]. About 6.47.
pub fn critical_z() -> f64 {
    standard_normal().inverse_cdf(1.0 - assertion_alpha() / 2.0)
}

/// The normal quantile of [`POWER`], `Φ⁻¹(0.8) ≈ 0.84`.
pub fn power_z() -> f64 {
    standard_normal().inverse_cdf(POWER)
}

/// The sample-size guide: how many masks a Monte Carlo run needs before it
/// can tell a formula from the truth (for the second-order forms of
/// [`crate::formulas::second_order`], whose per-draw spreads give `sd`).
///
/// A z-test at the suite's level detects a true gap `g` with probability
/// [`POWER`] once its standard error `sd/√n` falls to
/// `g / (z_crit + z_power)`, i.e. at
///
/// ```text
/// n* = ((z_crit + z_power) · sd / g)²
/// ```
///
/// Over a vector the easiest component (largest `|g_k| / sd_k`) decides.
/// `None` when every gap is zero (no sample size resolves it). Below `n*`
/// the formula is, for Monte Carlo purposes, as good as exact.
pub fn masks_to_resolve(gap: &[f64], draw_sd: &[f64]) -> Option<f64> {
    let factor = critical_z() + power_z();
    let best = gap
        .iter()
        .zip(draw_sd)
        .filter(|(g, s)| **s > 0.0 && g.abs() > 0.0)
        .map(|(g, s)| g.abs() / s)
        .fold(0.0, f64::max);
    (best > 0.0).then(|| (factor / best) * (factor / best))
}
