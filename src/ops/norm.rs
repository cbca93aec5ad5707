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

use crate::error::{Error, check_all_finite, check_eps, check_finite_vec, check_len};
use crate::formulas::mean_and_variance;

/// A normalization layer over `d` units: the per-unit gain `γ` and `ε ≥ 0`
/// every norm has, and what its kind `K` adds and computes ([`LayerNormKind`]: the
/// shift `β` and centring; [`RmsNormKind`]: nothing more). The accessors and the
/// checked [`forward`](Norm::forward) are written once here; each kind
/// supplies only its arithmetic.
#[derive(Debug, Clone, PartialEq)]
pub struct Norm<K> {
    gamma: Vec<f64>,
    eps: f64,
    kind: K,
}

/// LayerNorm with per-unit gain `γ`, shift `β` and `ε ≥ 0`.
pub type LayerNorm = Norm<LayerNormKind>;

/// RMSNorm with per-unit gain `γ` and `ε ≥ 0`.
pub type RmsNorm = Norm<RmsNormKind>;

/// What LayerNorm adds to `γ` and `ε`: the shift `β` (and centring by the
/// mean).
#[derive(Debug, Clone, PartialEq)]
pub struct LayerNormKind {
    beta: Vec<f64>,
}

/// RMSNorm adds nothing to `γ` and `ε` (no centring, no shift).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RmsNormKind;

/// A kind of norm: the names its errors use and its arithmetic.
pub trait NormKind: Sized {
    /// The norm's name (`"LayerNorm"`).
    const NAME: &'static str;
    /// What a wrong-length or non-finite input is called in an error.
    const INPUT: &'static str;
    /// What a wrong-length output buffer is called in an error.
    const OUTPUT: &'static str;
    /// The norm of `z` into `out`, lengths already checked.
    fn apply(norm: &Norm<Self>, z: &[f64], out: &mut [f64]);
}

impl<K: NormKind> Norm<K> {
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

    /// The norm of `z` into `out`; a constant `z` gives `β` (LayerNorm) and
    /// the zero vector zero (RMSNorm), see the module docs.
    pub fn forward(&self, z: &[f64], out: &mut [f64]) -> Result<(), Error> {
        check_len(K::INPUT, z, self.dim())?;
        check_len(K::OUTPUT, out, self.dim())?;
        check_all_finite(K::INPUT, z)?;
        self.forward_unchecked(z, out);
        check_overflow(K::NAME, out)
    }

    /// The norm of `z` without length checks (the caller guarantees them).
    pub(crate) fn forward_unchecked(&self, z: &[f64], out: &mut [f64]) {
        K::apply(self, z, out)
    }
}

impl LayerNorm {
    /// Validates `γ`, `β` (same non-zero length, finite) and `ε` (finite, `≥ 0`).
    pub fn new(gamma: Vec<f64>, beta: Vec<f64>, eps: f64) -> Result<Self, Error> {
        check_finite_vec("gamma", &gamma)?;
        check_len("beta", &beta, gamma.len())?;
        check_all_finite("beta", &beta)?;
        Ok(Norm {
            gamma,
            eps: check_eps("eps", eps)?,
            kind: LayerNormKind { beta },
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

    /// The shifts `β`.
    pub fn beta(&self) -> &[f64] {
        &self.kind.beta
    }
}

impl NormKind for LayerNormKind {
    const NAME: &'static str = "LayerNorm";
    const INPUT: &'static str = "LayerNorm input";
    const OUTPUT: &'static str = "LayerNorm output";

    fn apply(ln: &LayerNorm, z: &[f64], out: &mut [f64]) {
        let (m, v) = mean_and_variance(z);
        let inv = if is_constant(z) {
            0.0
        } else {
            1.0 / (v + ln.eps).sqrt()
        };
        for (((o, &zk), g), b) in out.iter_mut().zip(z).zip(&ln.gamma).zip(ln.beta()) {
            *o = g * (zk - m) * inv + b;
        }
    }
}

impl RmsNorm {
    /// Validates `γ` (non-empty, finite) and `ε` (finite, `≥ 0`).
    pub fn new(gamma: Vec<f64>, eps: f64) -> Result<Self, Error> {
        check_finite_vec("gamma", &gamma)?;
        Ok(Norm {
            gamma,
            eps: check_eps("eps", eps)?,
            kind: RmsNormKind,
        })
    }

    /// Optional `γ` with the default `γ = 1` over `d` units.
    pub fn with_defaults(d: usize, gamma: Option<Vec<f64>>, eps: f64) -> Result<Self, Error> {
        let gamma = gamma.unwrap_or_else(|| vec![1.0; d]);
        check_len("gamma", &gamma, d)?;
        RmsNorm::new(gamma, eps)
    }
}

impl NormKind for RmsNormKind {
    const NAME: &'static str = "RMSNorm";
    const INPUT: &'static str = "RMSNorm input";
    const OUTPUT: &'static str = "RMSNorm output";

    fn apply(rms: &RmsNorm, z: &[f64], out: &mut [f64]) {
        let r2 = z.iter().map(|v| v * v).sum::<f64>() / z.len() as f64;
        let inv = if r2 + rms.eps > 0.0 {
            1.0 / (r2 + rms.eps).sqrt()
        } else {
            0.0
        };
        for ((o, &zk), g) in out.iter_mut().zip(z).zip(&rms.gamma) {
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

fn is_constant(z: &[f64]) -> bool {
    z.iter().all(|&v| v == z[0])
}

impl<K: NormKind> crate::formulas::NormParams for Norm<K> {
    fn gamma(&self) -> &[f64] {
        Norm::gamma(self)
    }
    fn eps(&self) -> f64 {
        Norm::eps(self)
    }
}

impl crate::formulas::ShiftedNormParams for LayerNorm {
    fn beta(&self) -> &[f64] {
        LayerNorm::beta(self)
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
        // Mean, variance, a square root and a quotient of three values: ten
        // roundings of magnitudes at most 3, and the reference's last digit.
        let slack = crate::stats::tolerance::bound(10.0, 3.0) + 1e-15;
        assert!((out[0] + 1.224744871391589).abs() <= slack);
        assert_eq!(out[1], 0.0);
        let rms = RmsNorm::new(vec![1.0; 2], 0.0).unwrap();
        let mut out = [0.0; 2];
        // z = (3, 4): R² = 12.5, RMS = (3, 4)/sqrt(12.5).
        rms.forward(&[3.0, 4.0], &mut out).unwrap();
        assert!((out[1] - 4.0 / 12.5f64.sqrt()).abs() <= crate::stats::tolerance::bound(10.0, 4.0));
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
