//! Mutant `multiply_by_q`: multiplies survivors (and gradients) by q in training instead of dividing.
//!
//! Source: seed 003.

use rand::Rng;

use super::{Mutant, REFERENCE, backward_with, train_with};
use crate::error::Error;
use crate::ops::DropoutLayer;

/// The mutant layer.
pub struct Layer;

impl DropoutLayer for Layer {
    fn name(&self) -> &str {
        "multiply_by_q"
    }

    fn forward_train(
        &self,
        x: &[f64],
        p: f64,
        rng: &mut dyn Rng,
        out: &mut [f64],
        mask: &mut [bool],
    ) -> Result<(), Error> {
        train_with(x, p, rng, out, mask, |u, r| u >= r.p(), |v, r| v * r.q())
    }

    fn forward_eval(
        &self,
        x: &[f64],
        p: f64,
        rng: &mut dyn Rng,
        out: &mut [f64],
    ) -> Result<(), Error> {
        REFERENCE.forward_eval(x, p, rng, out)
    }

    fn backward(
        &self,
        grad_out: &[f64],
        p: f64,
        mask: &[bool],
        grad_in: &mut [f64],
    ) -> Result<(), Error> {
        backward_with(grad_out, p, mask, grad_in, |g, r| g * r.q())
    }
}

/// The gallery entry.
pub fn mutant() -> Mutant {
    Mutant {
        id: "multiply_by_q",
        mistake: "Multiplies survivors (and gradients) by q in training instead of dividing.",
        source: "seed 003",
        equivalent: None,
        effect: None,
        layer: &Layer,
    }
}
