//! LayerNorm and RMSNorm forward passes, with validated parameters.
//!
//! # Definitions
//!
//! ```text
//! LayerNorm:  M = mean_k z_k,  V = mean_k (z_k − M)²,
//!             LN(z)_k = γ_k (z_k − M) / sqrt(V + ε) + β_k
//! RMSNorm:    R² = mean_k z_k²,
//!             RMS(z)_k = γ_k z_k / sqrt(R² + ε)
//! ```
//!
//! `V` is the population variance (divide by `d`), as LayerNorm uses.
//!
//! # The degenerate input: a constant vector
//!
//! After dropout, `V = 0` happens with positive probability: when every unit
//! is dropped (probability `p^d`) the input is the zero vector. With `ε = 0`
//! the definition reads `0 / 0`. This crate takes the limit `ε → 0⁺`: for a
//! constant `z`, `z_k − M = 0` for every `ε > 0`, so `LN_ε(z) = β` for every
//! `ε > 0`, and we define `LN_0(z) = β` (likewise `RMS_0(0) = 0`). The rule
//! is tested by exact constancy (all entries equal), not by a threshold on
//! `V`, so it never fires on a vector with a small but real spread. Every
//! oracle and sampler in the crate uses these ops or the same rule, so the
//! expectations they compute are of one and the same function.

use crate::error::{Error, check_all_finite, check_finite_vec, check_len};

fn check_eps(eps: f64) -> Result<f64, Error> {
    if eps.is_finite() && eps >= 0.0 {
        Ok(eps)
    } else {
        Err(Error::Degenerate {
            what: format!("eps = {eps}: it must be a finite number >= 0"),
        })
    }
}

/// LayerNorm with per-unit gain `γ`, shift `β` and `ε ≥ 0`.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerNorm {
    gamma: Vec<f64>,
    beta: Vec<f64>,
    eps: f64,
}

impl LayerNorm {
    /// Validates `γ`, `β` (same non-zero length, finite) and `ε` (finite, `≥ 0`).
    pub fn new(gamma: Vec<f64>, beta: Vec<f64>, eps: f64) -> Result<Self, Error> {
        check_finite_vec("gamma", &gamma)?;
        check_len("beta", &beta, gamma.len())?;
        check_all_finite("beta", &beta)?;
        Ok(LayerNorm {
            gamma,
            beta,
            eps: check_eps(eps)?,
        })
    }

    /// `γ = 1`, `β = 0` over `d` units.
    pub fn plain(d: usize, eps: f64) -> Result<Self, Error> {
        LayerNorm::new(vec![1.0; d], vec![0.0; d], eps)
    }

    /// Optional `γ`, `β` with the defaults `γ = 1`, `β = 0` over `d` units.
    pub fn with_defaults(
        d: usize,
        gamma: Option<Vec<f64>>,
        beta: Option<Vec<f64>>,
        eps: f64,
    ) -> Result<Self, Error> {
        let gamma = gamma.unwrap_or_else(|| vec![1.0; d]);
        check_len("gamma", &gamma, d)?;
        let beta = beta.unwrap_or_else(|| vec![0.0; d]);
        LayerNorm::new(gamma, beta, eps)
    }

    /// Number of units.
    pub fn dim(&self) -> usize {
        self.gamma.len()
    }
    /// The gains `γ`.
    pub fn gamma(&self) -> &[f64] {
        &self.gamma
    }
    /// The shifts `β`.
    pub fn beta(&self) -> &[f64] {
        &self.beta
    }
    /// `ε`.
    pub fn eps(&self) -> f64 {
        self.eps
    }

    /// `LN(z)` into `out`; a constant `z` gives `β` (see the module docs).
    pub fn forward(&self, z: &[f64], out: &mut [f64]) -> Result<(), Error> {
        check_len("LayerNorm input", z, self.dim())?;
        check_len("LayerNorm output", out, self.dim())?;
        crate::error::check_all_finite("LayerNorm input", z)?;
        self.forward_unchecked(z, out);
        check_overflow("LayerNorm", out)
    }

    /// `LN(z)` without length checks (the caller guarantees them).
    pub(crate) fn forward_unchecked(&self, z: &[f64], out: &mut [f64]) {
        let (m, v) = mean_and_variance(z);
        let inv = if is_constant(z) {
            0.0
        } else {
            1.0 / (v + self.eps).sqrt()
        };
        for (((o, &zk), g), b) in out.iter_mut().zip(z).zip(&self.gamma).zip(&self.beta) {
            *o = g * (zk - m) * inv + b;
        }
    }
}

/// RMSNorm with per-unit gain `γ` and `ε ≥ 0`.
#[derive(Debug, Clone, PartialEq)]
pub struct RmsNorm {
    gamma: Vec<f64>,
    eps: f64,
}

impl RmsNorm {
    /// Validates `γ` (non-empty, finite) and `ε` (finite, `≥ 0`).
    pub fn new(gamma: Vec<f64>, eps: f64) -> Result<Self, Error> {
        check_finite_vec("gamma", &gamma)?;
        Ok(RmsNorm {
            gamma,
            eps: check_eps(eps)?,
        })
    }

    /// Optional `γ` with the default `γ = 1` over `d` units.
    pub fn with_defaults(d: usize, gamma: Option<Vec<f64>>, eps: f64) -> Result<Self, Error> {
        let gamma = gamma.unwrap_or_else(|| vec![1.0; d]);
        check_len("gamma", &gamma, d)?;
        RmsNorm::new(gamma, eps)
    }

    /// Number of units.
    pub fn dim(&self) -> usize {
        self.gamma.len()
    }
    /// The gains `γ`.
    pub fn gamma(&self) -> &[f64] {
        &self.gamma
    }
    /// `ε`.
    pub fn eps(&self) -> f64 {
        self.eps
    }

    /// `RMS(z)` into `out`; the zero vector gives zero (see the module docs).
    pub fn forward(&self, z: &[f64], out: &mut [f64]) -> Result<(), Error> {
        check_len("RMSNorm input", z, self.dim())?;
        check_len("RMSNorm output", out, self.dim())?;
        crate::error::check_all_finite("RMSNorm input", z)?;
        self.forward_unchecked(z, out);
        check_overflow("RMSNorm", out)
    }

    pub(crate) fn forward_unchecked(&self, z: &[f64], out: &mut [f64]) {
        let r2 = z.iter().map(|v| v * v).sum::<f64>() / z.len() as f64;
        let inv = if r2 + self.eps > 0.0 {
            1.0 / (r2 + self.eps).sqrt()
        } else {
            0.0
        };
        for ((o, &zk), g) in out.iter_mut().zip(z).zip(&self.gamma) {
            *o = g * zk * inv;
        }
    }
}

/// A finite input whose moments overflow gives a non-finite output: a
/// typed error instead of a silent NaN.
fn check_overflow(what: &str, out: &[f64]) -> Result<(), Error> {
    if out.iter().all(|v| v.is_finite()) {
        Ok(())
    } else {
        Err(Error::Degenerate {
            what: format!("{what} of this input overflows f64 (rescale the input)"),
        })
    }
}

/// `(mean, population variance)` by two passes.
pub fn mean_and_variance(z: &[f64]) -> (f64, f64) {
    let n = z.len() as f64;
    let m = z.iter().sum::<f64>() / n;
    let v = z.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / n;
    (m, v)
}

fn is_constant(z: &[f64]) -> bool {
    z.iter().all(|&v| v == z[0])
}

impl crate::formulas::NormParams for LayerNorm {
    fn gamma(&self) -> &[f64] {
        LayerNorm::gamma(self)
    }
    fn eps(&self) -> f64 {
        LayerNorm::eps(self)
    }
}

impl crate::formulas::ShiftedNormParams for LayerNorm {
    fn beta(&self) -> &[f64] {
        LayerNorm::beta(self)
    }
}

impl crate::formulas::NormParams for RmsNorm {
    fn gamma(&self) -> &[f64] {
        RmsNorm::gamma(self)
    }
    fn eps(&self) -> f64 {
        RmsNorm::eps(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layernorm_of_a_hand_vector() {
        // z = (1, 2, 3): M = 2, V = 2/3, LN = (−1, 0, 1)/sqrt(2/3) = ∓1.224744871391589.
        let ln = LayerNorm::plain(3, 0.0).unwrap();
        let mut out = [0.0; 3];
        ln.forward(&[1.0, 2.0, 3.0], &mut out).unwrap();
        assert!((out[0] + 1.224744871391589).abs() < 1e-15);
        assert_eq!(out[1], 0.0);
        let rms = RmsNorm::new(vec![1.0; 2], 0.0).unwrap();
        let mut out = [0.0; 2];
        // z = (3, 4): R² = 12.5, RMS = (3, 4)/sqrt(12.5).
        rms.forward(&[3.0, 4.0], &mut out).unwrap();
        assert!((out[1] - 4.0 / 12.5f64.sqrt()).abs() < 1e-15);
    }

    #[test]
    fn constant_inputs_give_beta_and_bad_parameters_are_errors() {
        let ln = LayerNorm::new(vec![2.0; 3], vec![0.5, -1.0, 0.0], 0.0).unwrap();
        let mut out = [9.0; 3];
        ln.forward(&[0.0; 3], &mut out).unwrap();
        assert_eq!(out, [0.5, -1.0, 0.0]);
        ln.forward(&[0.1; 3], &mut out).unwrap();
        assert_eq!(out, [0.5, -1.0, 0.0]);
        assert!(LayerNorm::new(vec![1.0; 3], vec![0.0; 2], 0.0).is_err());
        assert!(LayerNorm::new(vec![1.0; 3], vec![0.0; 3], -1.0).is_err());
        assert!(LayerNorm::new(vec![], vec![], 0.0).is_err());
        assert!(ln.forward(&[1.0; 2], &mut out).is_err());
        assert!(RmsNorm::new(vec![1.0], f64::NAN).is_err());
    }
}
