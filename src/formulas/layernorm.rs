//! LayerNorm after inverted dropout: the moments of the statistics it
//! computes, the shrink factor `c(μ, σ)`, its `ε` version, and the corrected
//! estimate of `E[LN(z)]`.
//!
//! # Setting
//!
//! Fixed `x ∈ R^d`, `μ = mean_k x_k`, `σ² = mean_k (x_k − μ)²`. Training
//! feeds LayerNorm `z_k = m_k x_k / q` with independent `m_k ~ Bernoulli(q)`.
//! LayerNorm computes `M = mean_k z_k`, `V = mean_k z_k² − M²` and outputs
//! `γ_k (z_k − M)/sqrt(V + ε) + β_k`. Evaluation feeds it `x` itself.
//!
//! # Derivation: the mean `M` (exact)
//!
//! ```text
//! E[M]  = mean_k E[z_k] = mean_k x_k = μ
//! Var M = (1/d²) Σ_k Var z_k                    (independent units)
//!       = (1/d²) Σ_k x_k² p/q
//!       = p (σ² + μ²) / (q d)                    (mean_k x_k² = σ² + μ²)
//! ```
//!
//! # Derivation: the variance `V` (exact, then leading order)
//!
//! ```text
//! E[mean_k z_k²] = mean_k x_k² / q = (σ² + μ²)/q
//! E[M²]          = Var M + E[M]² = μ² + p (σ² + μ²)/(q d)
//! E[V]           = (σ² + μ²)/q − μ² − p (σ² + μ²)/(q d)
//!                = (σ² + p μ²)/q − p (σ² + μ²)/(q d)   (since (σ²+μ²)/q − μ² = (σ² + pμ²)/q)
//! leading order:  E[V] ≈ (σ² + p μ²)/q               (drops the O(1/d) term)
//! ```
//!
//! # Derivation: the shrink factor (leading order)
//!
//! Replace the random denominator by its mean, `sqrt(V + ε) → sqrt(E[V] + ε)`,
//! and use `E[z_k − M] = x_k − μ` (exact):
//!
//! ```text
//! E[LN(z)_k] ≈ γ_k (x_k − μ)/sqrt(E[V] + ε) + β_k
//!            = β_k + c_ε · γ_k (x_k − μ)/sqrt(σ² + ε)
//!            = β_k + c_ε (LN(x)_k − β_k)
//! c_ε        = sqrt((σ² + ε) / ((σ² + p μ²)/q + ε))
//! ε = 0:  c  = sqrt(q σ² / (σ² + p μ²)) = sqrt(q / (1 + p (μ/σ)²))
//! ```
//!
//! The correction is β-preserving: it scales the centred part `LN(x) − β`
//! and leaves the shift alone. Consequences: `c(0, σ) = √q`; `c ≤ √q ≤ 1`
//! since the denominator `1 + p (μ/σ)² ≥ 1`; a large mean relative to the
//! spread shrinks the output further.
//!
//! # Assumptions and order of error
//!
//! Independent masks, `0 ≤ p < 1`, `σ > 0`, `d ≥ 2`. `E[M]`, `Var M`,
//! `E[V]` are exact. The corrected estimate is leading order: it ignores
//! (i) the `O(1/d)` term of `E[V]`, (ii) Jensen's gap
//! `E[1/sqrt(V)] − 1/sqrt(E[V])`, of order `Var V / E[V]^{5/2}` with
//! `Var V = O(1/d)`, and (iii) the covariance of `z_k − M` with `V`, also
//! `O(1/d)`. Its error is therefore `O(1/d)`, which the suite measures on
//! exact oracles up to `d = 4096` rather than assuming. With `ε = 0`, the
//! all-dropped mask (probability `p^d`) makes `V = 0`; the crate's LayerNorm
//! returns `β` there (the `ε → 0⁺` limit), a contribution of `p^d β_k`,
//! exponentially small.

use super::Rate;
use super::ShiftedNormParams;
use crate::error::{Error, check_all_finite, check_finite_vec, check_len};

/// `μ` and `σ²` (population) of `x`, rejecting inputs the family's formulas
/// divide by zero on: `d = 1` and `σ = 0` (constant or all-zero `x`).
pub fn input_moments(x: &[f64]) -> Result<(f64, f64), Error> {
    check_finite_vec("x", x)?;
    if x.len() < 2 {
        return Err(Error::Degenerate {
            what: "d = 1: LayerNorm of one unit is constant, so σ = 0 and c is undefined".into(),
        });
    }
    let (mu, sigma2) = super::mean_and_variance(x);
    if !(mu.is_finite() && sigma2.is_finite()) {
        return Err(Error::Degenerate {
            what: "the moments of x overflow f64 (rescale x)".into(),
        });
    }
    if sigma2 == 0.0 || x.iter().all(|&v| v == x[0]) {
        return Err(Error::Degenerate {
            what: "σ = 0 (x is constant): c(μ, σ) divides by σ".into(),
        });
    }
    Ok((mu, sigma2))
}

/// `E[M] = μ`.
pub fn mean_of_m(x: &[f64]) -> Result<f64, Error> {
    Ok(input_moments(x)?.0)
}

/// `Var M = p (σ² + μ²)/(q d)`.
pub fn variance_of_m(x: &[f64], rate: Rate) -> Result<f64, Error> {
    let (mu, s2) = input_moments(x)?;
    let var_m = rate.odds() * (s2 + mu * mu) / x.len() as f64;
    super::representable_value("Var M", var_m)
}

/// `E[V] = (σ² + p μ²)/q − p (σ² + μ²)/(q d)` (exact).
pub fn mean_of_v(x: &[f64], rate: Rate) -> Result<f64, Error> {
    let (mu, s2) = input_moments(x)?;
    let mean_v = mean_of_v_leading(mu, s2, rate) - rate.odds() * (s2 + mu * mu) / x.len() as f64;
    super::representable_value("E[V]", mean_v)
}

/// `E[V] ≈ (σ² + p μ²)/q` (leading order).
pub fn mean_of_v_leading(mu: f64, sigma2: f64, rate: Rate) -> f64 {
    (sigma2 + rate.p() * mu * mu) / rate.q()
}

/// `c(μ, σ) = sqrt(q / (1 + p (μ/σ)²))`; `σ = 0` is an error.
pub fn shrink(mu: f64, sigma: f64, rate: Rate) -> Result<f64, Error> {
    if !(sigma.is_finite() && sigma > 0.0 && mu.is_finite()) {
        return Err(Error::Degenerate {
            what: format!("c(μ, σ) needs finite μ and σ > 0 (μ = {mu}, σ = {sigma})"),
        });
    }
    Ok((rate.q() / (1.0 + p_r2(mu, sigma, rate))).sqrt())
}

/// `p (μ/σ)²`, exactly 0 at `p = 0` even when `μ/σ` overflows (`0 · ∞`
/// would be NaN).
pub(crate) fn p_r2(mu: f64, sigma: f64, rate: Rate) -> f64 {
    if rate.p() == 0.0 {
        return 0.0;
    }
    let r = mu / sigma;
    rate.p() * r * r
}

/// `c_ε = sqrt((σ² + ε)/((σ² + p μ²)/q + ε))`.
pub fn shrink_eps(mu: f64, sigma2: f64, eps: f64, rate: Rate) -> f64 {
    ((sigma2 + eps) / (mean_of_v_leading(mu, sigma2, rate) + eps)).sqrt()
}

/// `LN(x)_k = γ_k (x_k − μ)/sqrt(σ² + ε) + β_k`, the uncorrected
/// (evaluation-mode) output, from the definition rather than by running a
/// layer; a constant `x` gives `β`, the `ε → 0⁺` limit the crate takes
/// ([`crate::ops::LayerNorm`]). The roundings are the crate LayerNorm's, in order.
pub fn uncorrected(x: &[f64], ln: &impl ShiftedNormParams) -> Result<Vec<f64>, Error> {
    check_len("LayerNorm input", x, ln.gamma().len())?;
    check_all_finite("LayerNorm input", x)?;
    let (mu, s2) = super::mean_and_variance(x);
    let inv = if x.iter().all(|&a| a == x[0]) {
        0.0
    } else {
        1.0 / (s2 + ln.eps()).sqrt()
    };
    let gains = ln.gamma().iter().zip(ln.beta());
    let out = x
        .iter()
        .zip(gains)
        .map(|(a, (g, b))| g * (a - mu) * inv + b);
    super::finite_norm_output("LayerNorm", out.collect())
}

/// `β + c_ε (LN(x) − β)`, the leading-order estimate of `E[LN(z)]`.
pub fn corrected(x: &[f64], ln: &impl ShiftedNormParams, rate: Rate) -> Result<Vec<f64>, Error> {
    let (mu, s2) = input_moments(x)?;
    let c = shrink_eps(mu, s2, ln.eps(), rate);
    let out = shrink_towards_beta(&uncorrected(x, ln)?, ln.beta(), c);
    // c is inf/inf when σ² + ε overflows (a huge ε): an error, not NaN.
    super::representable("the corrected LayerNorm output", out)
}

/// `β + c (u − β)`, component-wise.
pub fn shrink_towards_beta(u: &[f64], beta: &[f64], c: f64) -> Vec<f64> {
    u.iter().zip(beta).map(|(u, b)| b + c * (u - b)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_values() {
        // x = (1, 3): μ = 2, σ² = 1; p = 0.5: c = sqrt(0.5 / (1 + 0.5·4)) = sqrt(1/6).
        let rate = Rate::new(0.5).unwrap();
        let (mu, s2) = input_moments(&[1.0, 3.0]).unwrap();
        assert!((shrink(mu, s2.sqrt(), rate).unwrap() - (1.0f64 / 6.0).sqrt()).abs() < 1e-15);
        // E[V] = (1 + 0.5·4)/0.5 − 0.5·5/(0.5·2) = 6 − 2.5 = 3.5.
        assert!((mean_of_v(&[1.0, 3.0], rate).unwrap() - 3.5).abs() < 1e-14);
        assert!(input_moments(&[2.0]).is_err());
        assert!(input_moments(&[0.0, 0.0]).is_err());
    }
}
