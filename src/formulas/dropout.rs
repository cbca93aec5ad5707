//! Inverted dropout: moments of one unit, of a sum, of the kept count, and the
//! original (non-inverted) scheme.
//!
//! # Setting
//!
//! One unit with fixed pre-dropout value `a`, drop rate `p`, keep probability
//! `q = 1 − p`, mask `m ~ Bernoulli(q)` and output `z = m a / q`.
//!
//! # Derivation: raw moments of one unit (exact)
//!
//! `z` takes two values: `a/q` with probability `q` (kept) and `0` with
//! probability `p` (dropped). For any power `r ≥ 1`, the dropped branch
//! contributes `0^r = 0`, so
//!
//! ```text
//! E[z^r] = q · (a/q)^r + p · 0
//!        = a^r / q^(r−1)
//! r = 1:  E[z]  = a                         (the mean is preserved)
//! r = 2:  E[z²] = a² / q                    (the second moment grows by 1/q)
//! r = 3:  E[z³] = a³ / q²
//! r = 4:  E[z⁴] = a⁴ / q³
//! Var z = E[z²] − E[z]² = a² (1/q − 1) = a² p / q
//! ```
//!
//! # Derivation: a sum of d units (exact)
//!
//! `S = Σ_k z_k` with independent masks. Expectation is linear, and the
//! variance of a sum of independent terms is the sum of their variances:
//!
//! ```text
//! E[S]   = Σ_k E[z_k]   = Σ_k x_k
//! Var S  = Σ_k Var z_k  = (p/q) Σ_k x_k²
//! ```
//!
//! Worked case: `d = 512`, every `x_k = 1`, `p = 0.5` (so `p/q = 1`):
//! `E[S] = 512`, `Var S = 512`, `sd S = √512 ≈ 22.63`, which is about 4.42 %
//! of the mean. The relative spread `sd/mean = sqrt(p/(q d))` for equal units
//! shrinks like `1/√d`: wide layers average the mask noise away.
//!
//! # Derivation: the kept count (exact)
//!
//! `K = Σ_k m_k` counts independent Bernoulli(q) successes, so
//! `K ~ Binomial(d, q)`: `P(K = k) = C(d, k) q^k p^(d−k)`.
//!
//! # Derivation: the original scheme (exact)
//!
//! The original scheme trains with `y = m a` (no rescale) and evaluates with
//! `y = q a`. Then `E_train[y] = q a + p · 0 = q a`, the evaluation output:
//! both schemes match train and eval in expectation; they differ only in
//! where the constant `q` is applied.
//!
//! # Assumptions
//!
//! Masks are independent across units and draws; `0 <= p < 1`.

use statrs::distribution::{Binomial, Discrete};

use super::Rate;
use crate::error::Error;

/// `E[z^r] = a^r / q^(r−1)` for one unit with value `a`, `r ≥ 1`.
pub fn unit_raw_moment(a: f64, rate: Rate, r: i32) -> f64 {
    super::ipow(a, r.max(0) as u32) / super::ipow(rate.q(), (r - 1).max(0) as u32)
}

/// `E[z] = a`.
pub fn unit_mean(a: f64) -> f64 {
    a
}

/// `Var z = a² p / q`.
pub fn unit_variance(a: f64, rate: Rate) -> f64 {
    a * a * rate.odds()
}

/// `E[S] = Σ x_k`.
pub fn sum_mean(x: &[f64]) -> f64 {
    x.iter().sum()
}

/// `Var S = (p/q) Σ x_k²`.
pub fn sum_variance(x: &[f64], rate: Rate) -> f64 {
    rate.odds() * x.iter().map(|v| v * v).sum::<f64>()
}

/// `P(K = k)` for `k = 0..=d`, `K ~ Binomial(d, q)` (through statrs).
pub fn kept_count_pmf(d: u64, rate: Rate) -> Result<Vec<f64>, Error> {
    let binomial = Binomial::new(rate.q(), d).map_err(|e| Error::Degenerate {
        what: format!("Binomial(d = {d}, q): {e}"),
    })?;
    Ok((0..=d).map(|k| binomial.pmf(k)).collect())
}

/// Training-mode mean of the original scheme, `E[m a] = q a`, which is also
/// its evaluation output.
pub fn original_scheme_mean(a: f64, rate: Rate) -> f64 {
    rate.q() * a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worked_case_has_sd_22_63_and_4_42_percent() {
        let rate = Rate::new(0.5).unwrap();
        let x = [1.0; 512];
        assert_eq!(sum_mean(&x), 512.0);
        assert_eq!(sum_variance(&x, rate), 512.0);
        let sd = sum_variance(&x, rate).sqrt();
        // √512 = 16√2 = 22.6274…; 22.6274 / 512 = 0.044194.
        assert!((sd - 16.0 * 2f64.sqrt()).abs() < 1e-12);
        assert_eq!(format!("{sd:.2} {:.2}", 100.0 * sd / 512.0), "22.63 4.42");
    }

    #[test]
    fn the_kept_count_pmf_sums_to_one_and_matches_a_hand_value() {
        let rate = Rate::new(0.3).unwrap();
        let pmf = kept_count_pmf(8, rate).unwrap();
        assert!((pmf.iter().sum::<f64>() - 1.0).abs() < 1e-14);
        // P(K = 8) = 0.7^8 = 0.05764801.
        assert!((pmf[8] - 0.05764801).abs() < 1e-15);
    }
}
