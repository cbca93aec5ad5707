//! Closed forms, one file per family, each with its derivation.
//!
//! Every function takes already-validated inputs ([`Rate`](crate::ops::Rate),
//! finite vectors) or validates them itself and returns a typed error.

pub mod attention;
pub mod batchnorm;
pub mod bypass;
pub mod compound;
pub mod dropout;
pub mod ensemble;
pub mod layernorm;
pub mod mask_shape;
pub mod rmsnorm;
pub mod second_order;
pub mod semantics;

/// `x^n` by `n` multiplications from the left, `((1·x)·x)·…`: a fixed
/// sequence of IEEE 754 roundings (each correctly rounded), so the same bits
/// on every platform and ISA level, with relative error at most `γ_n`
/// ([`crate::tolerance::gamma`]). `f64::powi` is documented as having
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

/// Passes a formula's computed `values` through when all are finite; an
/// input whose moments overflow or underflow `f64` is a typed error, not NaN.
pub(crate) fn representable(what: &str, values: Vec<f64>) -> Result<Vec<f64>, Error> {
    if values.iter().all(|v| v.is_finite()) {
        Ok(values)
    } else {
        Err(Error::Degenerate {
            what: format!("{what} is not representable in f64 for this input"),
        })
    }
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
        Err(Error::Degenerate {
            what: format!("{norm} of this input overflows f64 (rescale the input)"),
        })
    }
}
