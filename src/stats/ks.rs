//! The one-sample Kolmogorov-Smirnov test against the uniform distribution
//! on `[0, 1]`, used to check that a claim's p-values are uniform across
//! seeds (a calibrated test produces uniform p-values under its null).
//!
//! ```text
//! D = max_i max(i/n − u_(i), u_(i) − (i−1)/n)          (u sorted ascending)
//! λ = (√n + 0.12 + 0.11/√n) · D                          (Stephens' correction)
//! p = Q_KS(λ) = 2 Σ_{j≥1} (−1)^(j−1) exp(−2 j² λ²)
//! ```
//!
//! The asymptotic series with Stephens' small-sample correction is accurate
//! to a few per cent in `p` for `n ≥ 5`, which is ample for flagging.

use crate::stats::tolerance;

/// KS statistic `D` and its p-value.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct KsTest {
    pub n: usize,
    pub d: f64,
    pub p_value: f64,
}

/// Tests the sample `values` (each in `[0, 1]`) for uniformity. `None` for an
/// empty sample.
pub fn ks_uniform(values: &[f64]) -> Option<KsTest> {
    if values.is_empty() {
        return None;
    }
    let mut u: Vec<f64> = values.to_vec();
    u.sort_by(f64::total_cmp);
    let n = u.len() as f64;
    let d = u
        .iter()
        .enumerate()
        .map(|(i, &v)| ((i as f64 + 1.0) / n - v).max(v - i as f64 / n))
        .fold(0.0, f64::max);
    let lambda = stephens_lambda(u.len(), d);
    Some(KsTest {
        n: u.len(),
        d,
        p_value: kolmogorov_q(lambda),
    })
}

/// Stephens' scaled statistic `λ = (√n + 0.12 + 0.11/√n) · D`.
fn stephens_lambda(n: usize, d: f64) -> f64 {
    let root = (n as f64).sqrt();
    (root + 0.12 + 0.11 / root) * d
}

/// The smallest p-value [`ks_uniform`] can return for a sample of `n`.
///
/// `D ≤ 1`, with `D = 1` attained when every value is 0 (or every value is
/// 1): then `i/n − u_(i) = 1` at `i = n`. `Q_KS` decreases in `λ` and `λ`
/// increases in `D`, so the floor is `Q_KS(λ(n, 1)) = Q_KS(√n + 0.12 +
/// 0.11/√n)`; `n = 8` gives `3.5·10⁻⁸`. (The exact finite-`n` tail goes to 0
/// as `D → 1`; the asymptotic series does not, so near `D = 1` it is
/// conservative: the p-value it reports is larger than the exact one.)
pub fn smallest_p_value(n: usize) -> f64 {
    if n == 0 {
        return 1.0;
    }
    kolmogorov_q(stephens_lambda(n, 1.0))
}

/// The fewest values at which [`ks_uniform`] can return a p-value below
/// `level`: the least `n` with [`smallest_p_value`]`(n) < level`. Below it a
/// KS test at `level` cannot flag whatever the data, so it is skipped.
///
/// Derivation for `level = 10⁻¹⁰`: the series is dominated by its first
/// term, `Q_KS(λ) ≈ 2 e^{−2λ²}`, so `λ > √(ln(2·10¹⁰)/2) = 3.444`;
/// `λ(10, 1) = 3.162 + 0.12 + 0.035 = 3.317 < 3.444 < λ(11, 1) = 3.317 +
/// 0.12 + 0.033 = 3.470`, hence 11. `None` when `level ≤ 0` or no `n` up to
/// 10⁶ reaches it (`Q_KS` underflows to 0 at `λ ≈ 19`, `n ≈ 360`, so any
/// positive level is reached long before).
pub fn min_sample_for(level: f64) -> Option<usize> {
    if level.is_nan() || level <= 0.0 {
        return None;
    }
    (1..=1_000_000).find(|&n| smallest_p_value(n) < level)
}

/// `Q_KS(λ) = 2 Σ_{j≥1} (−1)^(j−1) exp(−2 j² λ²)`, clamped to `[0, 1]`.
fn kolmogorov_q(lambda: f64) -> f64 {
    if lambda < 0.2 {
        return 1.0;
    }
    let mut sum = 0.0;
    for j in 1..=100 {
        let j = j as f64;
        let term = (-2.0 * j * j * lambda * lambda).exp();
        sum += if j as u64 % 2 == 1 { term } else { -term };
        if tolerance::series_tail_is_negligible(term, sum) {
            break;
        }
    }
    (2.0 * sum).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q_ks_matches_the_kolmogorov_table() {
        // Q_KS(1.36) = 0.0494 and Q_KS(1.63) = 0.0098: the 5 % and 1 % points
        // of the Kolmogorov distribution (1.3581 and 1.6276 exactly).
        assert!((kolmogorov_q(1.3581) - 0.05).abs() < 5e-4);
        assert!((kolmogorov_q(1.6276) - 0.01).abs() < 2e-4);
        assert_eq!(kolmogorov_q(0.1), 1.0);
    }

    #[test]
    fn the_floor_of_the_p_value_and_the_fewest_values_that_can_flag() {
        // λ(8, 1) = √8 + 0.12 + 0.11/√8 = 2.98727; 2 e^{−2λ²} = 3.5455·10⁻⁸
        // (the j = 2 term, e^{−8λ²} ≈ 10⁻³¹, is negligible).
        let lambda: f64 = 8f64.sqrt() + 0.12 + 0.11 / 8f64.sqrt();
        let first_term = 2.0 * (-2.0 * lambda * lambda).exp();
        assert!((smallest_p_value(8) / first_term - 1.0).abs() < 1e-12);
        assert!((smallest_p_value(8) - 3.5455e-8).abs() < 1e-11);
        // The floor is attained: eight zeros have D = 1.
        let zeros = ks_uniform(&[0.0; 8]).unwrap();
        assert_eq!((zeros.d, zeros.p_value), (1.0, smallest_p_value(8)));
        // Worked out by hand in the doc comment of `min_sample_for`.
        assert_eq!(min_sample_for(1e-10), Some(11));
        assert!(smallest_p_value(10) >= 1e-10 && smallest_p_value(11) < 1e-10);
        assert_eq!(min_sample_for(0.0), None);
        assert_eq!(min_sample_for(2.0), Some(1));
    }

    #[test]
    fn an_evenly_spread_sample_is_uniform_and_a_clumped_one_is_not() {
        let even: Vec<f64> = (0..200).map(|i| (i as f64 + 0.5) / 200.0).collect();
        assert!(ks_uniform(&even).unwrap().p_value > 0.99);
        let clumped: Vec<f64> = (0..200).map(|i| 0.5 + i as f64 / 1000.0).collect();
        let t = ks_uniform(&clumped).unwrap();
        assert!(t.d >= 0.5 && t.p_value < 1e-20, "{t:?}");
    }
}
