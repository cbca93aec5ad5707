//! [`Patched`]: the reference with some of its parts replaced by function
//! pointers.

use rand::Rng;

use crate::error::Error;
use crate::ops::{DropoutLayer, InvertedDropout, MaskShape, default_positions};

/// The reference, for the parts a patch leaves alone.
const REFERENCE: InvertedDropout = InvertedDropout;

/// A training pass: `(x, p, rng, out, mask)`.
pub type TrainFn = fn(&[f64], f64, &mut dyn Rng, &mut [f64], &mut [bool]) -> Result<(), Error>;
/// An evaluation pass: `(x, p, rng, out)`.
pub type EvalFn = fn(&[f64], f64, &mut dyn Rng, &mut [f64]) -> Result<(), Error>;
/// A backward pass: `(grad_out, p, mask, grad_in)`.
pub type BackwardFn = fn(&[f64], f64, &[bool], &mut [f64]) -> Result<(), Error>;
/// A pass over a `T × d` block: `(x, positions, shape, p, rng, out, mask)`.
pub type PositionsFn =
    fn(&[f64], usize, MaskShape, f64, &mut dyn Rng, &mut [f64], &mut [bool]) -> Result<(), Error>;

/// The reference layer with some of its parts replaced by function
/// pointers: the door for a one-off wrong layer outside the gallery (a
/// test's deviation that no [`super::Deviation`] names). Define the parts
/// that carry the mistake and take the rest from [`Patched::REFERENCE`] by
/// struct update.
pub struct Patched {
    pub name: &'static str,
    pub train: TrainFn,
    pub eval: EvalFn,
    pub backward: BackwardFn,
    /// Attention rows; `None` runs the training pass on the row.
    pub attention: Option<TrainFn>,
    /// `T × d` blocks; `None` is [`default_positions`] over this layer.
    pub positions: Option<PositionsFn>,
}

impl Patched {
    /// Every part the reference's.
    pub const REFERENCE: Patched = Patched {
        name: "reference",
        train: |x, p, rng, out, mask| REFERENCE.forward_train(x, p, rng, out, mask),
        eval: |x, p, rng, out| REFERENCE.forward_eval(x, p, rng, out),
        backward: |g, p, mask, gi| REFERENCE.backward(g, p, mask, gi),
        attention: None,
        positions: None,
    };
}

impl DropoutLayer for Patched {
    fn name(&self) -> &str {
        self.name
    }

    fn forward_train(
        &self,
        x: &[f64],
        p: f64,
        rng: &mut dyn Rng,
        out: &mut [f64],
        mask: &mut [bool],
    ) -> Result<(), Error> {
        (self.train)(x, p, rng, out, mask)
    }

    fn forward_eval(
        &self,
        x: &[f64],
        p: f64,
        rng: &mut dyn Rng,
        out: &mut [f64],
    ) -> Result<(), Error> {
        (self.eval)(x, p, rng, out)
    }

    fn backward(
        &self,
        grad_out: &[f64],
        p: f64,
        mask: &[bool],
        grad_in: &mut [f64],
    ) -> Result<(), Error> {
        (self.backward)(grad_out, p, mask, grad_in)
    }

    fn forward_attention(
        &self,
        a: &[f64],
        p: f64,
        rng: &mut dyn Rng,
        out: &mut [f64],
        mask: &mut [bool],
    ) -> Result<(), Error> {
        (self.attention.unwrap_or(self.train))(a, p, rng, out, mask)
    }

    fn forward_positions(
        &self,
        x: &[f64],
        positions: usize,
        shape: MaskShape,
        p: f64,
        rng: &mut dyn Rng,
        out: &mut [f64],
        mask: &mut [bool],
    ) -> Result<(), Error> {
        match self.positions {
            Some(f) => f(x, positions, shape, p, rng, out, mask),
            None => default_positions(self, x, positions, shape, p, rng, out, mask),
        }
    }
}
