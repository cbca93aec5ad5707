//! Mutant `backward_unscaled`: backward pass applies the mask but forgets the 1/q scale.
//!
//! Source: seed 001.

use super::{Mutant, Patched, backward_with};
use crate::error::Error;

fn backward(grad_out: &[f64], p: f64, mask: &[bool], grad_in: &mut [f64]) -> Result<(), Error> {
    backward_with(grad_out, p, mask, grad_in, |g, _| g)
}

/// The mutant layer: the reference with backward replaced.
pub static LAYER: Patched = Patched {
    name: "backward_unscaled",
    backward,
    ..Patched::REFERENCE
};

/// The gallery entry.
pub fn mutant() -> Mutant {
    Mutant {
        id: "backward_unscaled",
        mistake: "Backward pass applies the mask but forgets the 1/q scale.",
        source: "seed 001",
        equivalent: None,
        effect: None,
        layer: &LAYER,
    }
}
