//! The power of a claim against a mutant of known effect.

use statrs::distribution::{ContinuousCDF, Normal};

use crate::stats::critical_z;

/// Probability that the two-sided z-test at [`critical_z`] rejects when the
/// true deviation is `effect` and the estimate's standard error is
/// `stderr`: with `λ = |effect| / stderr`,
///
/// ```text
/// power = Φ(λ − z_crit) + Φ(−λ − z_crit)
/// ```
pub fn rejection_power(effect: f64, stderr: f64) -> f64 {
    let normal = Normal::standard();
    let lambda = effect.abs() / stderr;
    normal.cdf(lambda - critical_z()) + normal.cdf(-lambda - critical_z())
}
