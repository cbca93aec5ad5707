//! The layers under test, and the door every implementation goes through.
//!
//! [`DropoutLayer`] is the conformance trait: the crate's reference
//! [`InvertedDropout`], every known-wrong mutant, and adapters around other
//! libraries' layers implement it, and the claims run against any of them
//! through a [`Subject`].

pub mod adapters;
mod batchnorm;
mod buffers;
mod dropout;
pub mod fast;
mod norm;
mod norm_choice;
mod pass;
mod shape;
mod site;

pub use crate::formulas::Rate;
/// Defined once, in [`crate::formulas`]; this path stays for `src/audit` (edited by issue 32
/// in the same round) and is to go when that lands.
pub use crate::formulas::mean_and_variance;
pub use batchnorm::{BatchNorm, Linear, relu};
pub use buffers::check_buffers;
pub use dropout::{
    DropoutLayer, InvertedDropout, Subject, SubjectKind, default_positions, keep_and_scale,
    scale_kept_gradients,
};
pub use norm::{LayerNorm, LayerNormKind, Norm, NormKind, RmsNorm, RmsNormKind};
pub use norm_choice::{AnyNorm, Normalization};
pub use pass::{BackwardPass, BlockPass, EvalPass, TrainPass};
pub use shape::{CountingRng, MaskShape, row_width};
pub use site::Site;
