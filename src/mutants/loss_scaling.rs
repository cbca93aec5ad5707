//! Mutant `loss_scaling`: scales the loss by 1/q instead of the activations: forward m x, gradient g m / q.
//!
//! Source: seed 003.

use rand::Rng;

use super::{Mutant, REFERENCE, train_with};
use crate::error::Error;
use crate::ops::DropoutLayer;

/// The mutant layer.
pub struct Layer;

impl DropoutLayer for Layer {
    fn name(&self) -> &str {
        "loss_scaling"
    }

    fn forward_train(
        &self,
        x: &[f64],
        p: f64,
        rng: &mut dyn Rng,
        out: &mut [f64],
        mask: &mut [bool],
    ) -> Result<(), Error> {
        train_with(x, p, rng, out, mask, |u, r| u >= r.p(), |v, _| v)
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
        REFERENCE.backward(grad_out, p, mask, grad_in)
    }
}

/// The gallery entry.
pub fn mutant() -> Mutant {
    Mutant {
        id: "loss_scaling",
        mistake: "Scales the loss by 1/q instead of the activations: forward m x, gradient g m / q.",
        source: "seed 003",
        equivalent: None,
        effect: None,
        layer: &Layer,
    }
}
