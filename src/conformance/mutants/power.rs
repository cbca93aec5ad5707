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
    crate::stats::rejection_probability(effect / stderr)
}

/// `Φ(z_crit − λ)`: the probability of missing an effect `λ` standard
/// errors away (the far tail `Φ(−λ − z_crit)` is negligible beside it).
pub fn miss_probability(lambda: f64) -> f64 {
    Normal::standard().cdf(critical_z() - lambda)
}
