//! The layers under test, and the door every implementation goes through.
//!
//! [`DropoutLayer`] is the conformance trait: the crate's reference
//! [`InvertedDropout`], every known-wrong mutant, and adapters around other
//! libraries' layers implement it, and the claims run against any of them
//! through a [`Subject`].

mod dropout;
mod rate;

pub use dropout::{DropoutLayer, InvertedDropout, Subject};
pub use rate::Rate;

mod batchnorm;
pub use batchnorm::{BatchNorm, Linear, relu};
