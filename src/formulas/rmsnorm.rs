//! RMSNorm after inverted dropout: the exact mean of `R²` and the `√q`
//! shrink of the output.
//!
//! # Setting
//!
//! `z_k = m_k x_k / q` as in [`super::layernorm`]; RMSNorm computes
//! `R² = mean_k z_k²` and outputs `γ_k z_k / sqrt(R² + ε)`. No centring.
//!
//! # Derivation: `E[R²]` (exact)
//!
//! ```text
//! E[z_k²] = q (x_k/q)² + p · 0 = x_k²/q
//! E[R²]   = mean_k x_k² / q            (every μ: no mean is subtracted)
//! ```
//!
//! # Derivation: the output (leading order)
//!
//! Replace `sqrt(R² + ε)` by `sqrt(E[R²] + ε)` and use `E[z_k] = x_k`, with
//! `r² = mean_k x_k²`:
//!
//! ```text
//! E[RMS(z)_k] ≈ γ_k x_k / sqrt(r²/q + ε)
//!             = c_rms · γ_k x_k / sqrt(r² + ε) = c_rms · RMS(x)_k
//! c_rms       = sqrt((r² + ε)/(r²/q + ε))
//! ε = 0:  c_rms = √q,  so  E[RMS(z)] ≈ √q · RMS(x)
//! ```
//!
//! Unlike LayerNorm, the factor does not depend on the mean: RMSNorm's
//! statistic is a raw second moment, inflated by exactly `1/q`.
//!
//! # Assumptions and order of error
//!
//! Independent masks, `0 ≤ p < 1`, `r² > 0` (not the zero vector), `d ≥ 2`
//! (the expansion is in `1/d`). `E[R²]` is exact; the output is leading
//! order, with an `O(1/d)` error from Jensen's gap on `1/sqrt(R²)` and the
//! covariance of `z_k` with `R²`. The zero vector (all dropped, probability
//! `p^d`) gives output 0 under the crate's `ε → 0⁺` convention.

use super::NormParams;
use super::Rate;
use crate::error::{Error, check_all_finite, check_finite_vec, check_len};

/// `r² = mean_k x_k²`, rejecting `d = 1` and the zero vector.
pub fn mean_square(x: &[f64]) -> Result<f64, Error> {
    check_finite_vec("x", x)?;
    if x.len() < 2 {
        return Err(Error::Degenerate {
            what: "d = 1: the RMSNorm expansion in 1/d needs d >= 2".into(),
        });
    }
    let r2 = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    if !r2.is_finite() {
        return Err(Error::Degenerate {
            what: "the mean square of x overflows f64 (rescale x)".into(),
        });
    }
    if r2 == 0.0 {
        return Err(Error::Degenerate {
            what: "x is all zero: RMSNorm divides by its root mean square".into(),
        });
    }
    Ok(r2)
}

/// `E[R²] = mean_k x_k² / q`.
pub fn mean_of_r2(x: &[f64], rate: Rate) -> Result<f64, Error> {
    super::representable_value("E[R²]", mean_square(x)? / rate.q())
}

/// `c_rms = sqrt((r² + ε)/(r²/q + ε))`, `√q` at `ε = 0`.
///
/// Computed as `sqrt(q (a + b)/(a + q b))` with `a = r²/s`, `b = ε/s`,
/// `s = max(r², ε)`: the same value, without the overflow of `r²/q` (or of
/// `r² + ε`) that turned a huge input at `p` near 1 into `c = 0` or NaN.
pub fn shrink(r2: f64, eps: f64, rate: Rate) -> f64 {
    let s = r2.max(eps);
    if s.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
        return rate.q().sqrt(); // r² = ε = 0: the limit ε → 0 of the formula
    }
    let (a, b) = (r2 / s, eps / s);
    (rate.q() * (a + b) / (a + rate.q() * b)).sqrt()
}

/// `RMS(x)_k = γ_k x_k / sqrt(r² + ε)`, the uncorrected output, from the
/// definition rather than by running a layer; the zero vector gives zero,
/// the `ε → 0⁺` limit the crate takes ([`crate::ops::RmsNorm`]). The roundings
/// are the crate RMSNorm's, in order.
pub fn uncorrected(x: &[f64], rms: &impl NormParams) -> Result<Vec<f64>, Error> {
    check_len("RMSNorm input", x, rms.gamma().len())?;
    check_all_finite("RMSNorm input", x)?;
    let r2 = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let inv = if r2 + rms.eps() > 0.0 {
        1.0 / (r2 + rms.eps()).sqrt()
    } else {
        0.0
    };
    let out = x.iter().zip(rms.gamma()).map(|(a, g)| g * a * inv);
    super::finite_norm_output("RMSNorm", out.collect())
}

/// `c_rms · RMS(x)`, the leading-order estimate of `E[RMS(z)]`.
pub fn corrected(x: &[f64], rms: &impl NormParams, rate: Rate) -> Result<Vec<f64>, Error> {
    let c = shrink(mean_square(x)?, rms.eps(), rate);
    let out = uncorrected(x, rms)?.iter().map(|u| c * u).collect();
    // c is inf/inf when r² + ε overflows (a huge ε): an error, not NaN.
    super::representable("the corrected RMSNorm output", out)
}
