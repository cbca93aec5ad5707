//! Mutant `eval_masks`: applies the training mask in evaluation mode too.
//!
//! Source: seed 001.

use rand::Rng;

use super::{Mutant, REFERENCE};
use crate::error::Error;
use crate::ops::DropoutLayer;

/// The mutant layer.
pub struct Layer;

impl DropoutLayer for Layer {
    fn name(&self) -> &str {
        "eval_masks"
    }

    fn forward_train(
        &self,
        x: &[f64],
        p: f64,
        rng: &mut dyn Rng,
        out: &mut [f64],
        mask: &mut [bool],
    ) -> Result<(), Error> {
        REFERENCE.forward_train(x, p, rng, out, mask)
    }

    fn forward_eval(
        &self,
        x: &[f64],
        p: f64,
        rng: &mut dyn Rng,
        out: &mut [f64],
    ) -> Result<(), Error> {
        let mut mask = vec![false; x.len()];
        REFERENCE.forward_train(x, p, rng, out, &mut mask)
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
        id: "eval_masks",
        mistake: "Applies the training mask in evaluation mode too.",
        source: "seed 001",
        equivalent: None,
        effect: None,
        layer: &Layer,
    }
}
