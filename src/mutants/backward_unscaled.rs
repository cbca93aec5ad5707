//! Mutant `backward_unscaled`: backward pass applies the mask but forgets the 1/q scale.
//!
//! Source: seed 001.

use rand::Rng;

use super::{Mutant, REFERENCE, backward_with};
use crate::error::Error;
use crate::ops::DropoutLayer;

/// The mutant layer.
pub struct Layer;

impl DropoutLayer for Layer {
    fn name(&self) -> &str {
        "backward_unscaled"
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
        REFERENCE.forward_eval(x, p, rng, out)
    }

    fn backward(
        &self,
        grad_out: &[f64],
        p: f64,
        mask: &[bool],
        grad_in: &mut [f64],
    ) -> Result<(), Error> {
        backward_with(grad_out, p, mask, grad_in, |g, _| g)
    }
}

/// The gallery entry.
pub fn mutant() -> Mutant {
    Mutant {
        id: "backward_unscaled",
        mistake: "Backward pass applies the mask but forgets the 1/q scale.",
        source: "seed 001",
        equivalent: None,
        effect: None,
        layer: &Layer,
    }
}
