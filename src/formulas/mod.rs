//! Closed forms, one file per family, each with its derivation.
//!
//! Every function takes already-validated inputs ([`Rate`](crate::ops::Rate),
//! finite vectors) or validates them itself and returns a typed error.

pub mod batchnorm;
pub mod dropout;
