//! Mutant `eval_masks`: applies the training mask in evaluation mode too.
//!
//! Source: seed 001.

use rand::Rng;

use super::{Mutant, Patched, REFERENCE};
use crate::error::Error;
use crate::ops::DropoutLayer;

fn eval(x: &[f64], p: f64, rng: &mut dyn Rng, out: &mut [f64]) -> Result<(), Error> {
    let mut mask = vec![false; x.len()];
    REFERENCE.forward_train(x, p, rng, out, &mut mask)
}

/// The mutant layer: the reference with eval replaced.
pub static LAYER: Patched = Patched {
    name: "eval_masks",
    eval,
    ..Patched::REFERENCE
};

/// The gallery entry.
pub fn mutant() -> Mutant {
    Mutant {
        id: "eval_masks",
        mistake: "Applies the training mask in evaluation mode too.",
        source: "seed 001",
        equivalent: None,
        effect: None,
        layer: &LAYER,
    }
}
