//! Mutant `multiply_by_q`: multiplies survivors (and gradients) by q in training instead of dividing.
//!
//! Source: seed 003.

use rand::Rng;

use super::{Mutant, Patched, backward_with, train_with};
use crate::error::Error;

fn train(
    x: &[f64],
    p: f64,
    rng: &mut dyn Rng,
    out: &mut [f64],
    mask: &mut [bool],
) -> Result<(), Error> {
    train_with(x, p, rng, out, mask, |u, r| u >= r.p(), |v, r| v * r.q())
}

fn backward(grad_out: &[f64], p: f64, mask: &[bool], grad_in: &mut [f64]) -> Result<(), Error> {
    backward_with(grad_out, p, mask, grad_in, |g, r| g * r.q())
}

/// The mutant layer: the reference with train, backward replaced.
pub static LAYER: Patched = Patched {
    name: "multiply_by_q",
    train,
    backward,
    ..Patched::REFERENCE
};

/// The gallery entry.
pub fn mutant() -> Mutant {
    Mutant {
        id: "multiply_by_q",
        mistake: "Multiplies survivors (and gradients) by q in training instead of dividing.",
        source: "seed 003",
        equivalent: None,
        effect: None,
        layer: &LAYER,
    }
}
