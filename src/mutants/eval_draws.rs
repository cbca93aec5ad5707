//! Mutant `eval_draws`: draws the mask before the mode branch: evaluation returns x but consumes random numbers.
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
        "eval_draws"
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
        let _ = rng.next_u64();
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
        id: "eval_draws",
        mistake: "Draws the mask before the mode branch: evaluation returns x but consumes random numbers.",
        source: "seed 001",
        equivalent: None,
        effect: None,
        layer: &Layer,
    }
}
