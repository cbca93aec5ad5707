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
