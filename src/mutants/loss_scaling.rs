//! Mutant `loss_scaling`: scales the loss by 1/q instead of the activations: forward m x, gradient g m / q.
//!
//! Source: seed 003.

use rand::Rng;

use super::{Mutant, Patched, train_with};
use crate::error::Error;

fn train(
    x: &[f64],
    p: f64,
    rng: &mut dyn Rng,
    out: &mut [f64],
    mask: &mut [bool],
) -> Result<(), Error> {
    train_with(x, p, rng, out, mask, |u, r| u >= r.p(), |v, _| v)
}

/// The mutant layer: the reference with train replaced.
pub static LAYER: Patched = Patched {
    name: "loss_scaling",
    train,
    ..Patched::REFERENCE
};

/// The gallery entry.
pub fn mutant() -> Mutant {
    Mutant {
        id: "loss_scaling",
        mistake: "Scales the loss by 1/q instead of the activations: forward m x, gradient g m / q.",
        source: "seed 003",
        equivalent: None,
        effect: None,
        layer: &LAYER,
    }
}
