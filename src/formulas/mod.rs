//! Closed forms, one file per family, each with its derivation.
//!
//! Every function takes already-validated inputs ([`crate::ops::Rate`],
//! finite vectors) or validates them itself and returns a typed error.

pub mod attention;
pub mod batchnorm;
pub mod bypass;
pub mod compound;
pub mod dropout;
pub mod ensemble;
#[cfg(feature = "example-family")]
pub mod example;
pub mod layernorm;
pub mod linear_path;
pub mod mask_shape;
pub mod network;
mod rate;
pub mod rmsnorm;
pub mod second_order;
pub mod semantics;
pub mod shared_mask;

/// `x^n` by `n` multiplications from the left, `((1·x)·x)·…`: a fixed
/// sequence of IEEE 754 roundings (each correctly rounded), so the same bits
/// on every platform and ISA level, with relative error at most `γ_n`
/// ([`crate::stats::tolerance::gamma`]). `f64::powi` is documented as having
/// unspecified precision (it may lower to a libm call or a different
/// multiplication order), so results under the determinism contract
/// ([`crate::engine`]) use this instead.
pub fn ipow(x: f64, n: u32) -> f64 {
    let mut r = 1.0;
    for _ in 0..n {
        r *= x;
    }
    r
}

use crate::error::Error;
pub use rate::Rate;

/// What the closed forms read of a normalization layer: its gains and its
/// ε. The crate's validated layers ([`crate::ops::LayerNorm`],
/// [`crate::ops::RmsNorm`]) implement it, so the formulas depend on these
/// few numbers only, not on the layers' code.
pub trait NormParams {
    /// The gains γ, one per unit.
    fn gamma(&self) -> &[f64];
    /// The ε under the square root.
    fn eps(&self) -> f64;
}

/// A normalization layer with shifts β as well (LayerNorm).
pub trait ShiftedNormParams: NormParams {
    /// The shifts β, one per unit.
    fn beta(&self) -> &[f64];
}

/// What the closed forms read of a dropout site `y = h + Σ_j dropout_{p_j}(v_j)`
/// ([`crate::ops::Site`] implements it).
pub trait DropoutSite {
    /// The undropped part `h`.
    fn h(&self) -> &[f64];
    /// The dropped terms `v_j` and their rates.
    fn terms(&self) -> &[(Vec<f64>, Rate)];
    /// Number of units.
    fn dim(&self) -> usize {
        self.h().len()
    }
    /// The noise-free input `x = h + Σ_j v_j` (what evaluation mode sees).
    fn clean(&self) -> Vec<f64> {
        let mut x = self.h().to_vec();
        for (v, _) in self.terms() {
            for (a, b) in x.iter_mut().zip(v) {
                *a += b;
            }
        }
        x
    }
}

/// Passes a formula's computed `values` through when all are finite; an
/// input whose moments overflow or underflow `f64` is a typed error, not NaN.
pub(crate) fn representable(what: &str, values: Vec<f64>) -> Result<Vec<f64>, Error> {
    if values.iter().all(|v| v.is_finite()) {
        Ok(values)
    } else {
        Err(Error::Overflow {
            what: what.to_string(),
        })
    }
}

/// [`representable`] for one value.
pub(crate) fn representable_value(what: &str, value: f64) -> Result<f64, Error> {
    Ok(representable(what, vec![value])?[0])
}

/// `(mean, population variance)` of `z` by two passes: the same roundings,
/// in the same order, as the crate's norm ops ([`crate::ops::LayerNorm`], [`crate::ops::RmsNorm`]), so a
/// formula's `μ`, `σ²` and uncorrected output are those of the layer.
pub fn mean_and_variance(z: &[f64]) -> (f64, f64) {
    let n = z.len() as f64;
    let m = z.iter().sum::<f64>() / n;
    (m, z.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / n)
}

/// Passes a norm's output through when every entry is finite; a finite
/// input whose moments overflow is the error the crate's norm ops give.
fn finite_norm_output(norm: &str, out: Vec<f64>) -> Result<Vec<f64>, Error> {
    if out.iter().all(|v| v.is_finite()) {
        Ok(out)
    } else {
        Err(Error::Overflow {
            what: format!("{norm} of the input"),
        })
    }
}
