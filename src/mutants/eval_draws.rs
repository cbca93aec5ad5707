//! Mutant `eval_draws`: draws the mask before the mode branch: evaluation returns x but consumes random numbers.
//!
//! Source: seed 001.

use rand::Rng;

use super::{Mutant, Patched, REFERENCE};
use crate::error::Error;
use crate::ops::DropoutLayer;

fn eval(x: &[f64], p: f64, rng: &mut dyn Rng, out: &mut [f64]) -> Result<(), Error> {
    let _ = rng.next_u64();
    REFERENCE.forward_eval(x, p, rng, out)
}

/// The mutant layer: the reference with eval replaced.
pub static LAYER: Patched = Patched {
    name: "eval_draws",
    eval,
    ..Patched::REFERENCE
};

/// The gallery entry.
pub fn mutant() -> Mutant {
    Mutant {
        id: "eval_draws",
        mistake: "Draws the mask before the mode branch: evaluation returns x but consumes random numbers.",
        source: "seed 001",
        equivalent: None,
        effect: None,
        layer: &LAYER,
    }
}
