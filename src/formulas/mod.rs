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
