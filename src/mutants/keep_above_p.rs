//! Mutant `keep_above_p`: keeps a unit when u > p instead of u >= p.
//!
//! Source: seed 001.
//!
//! Equivalent: The rules differ only when u equals p exactly, which has probability at most 2^-53 per unit (u lives on a 2^-53 grid): unobservable at any feasible budget.

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
    train_with(x, p, rng, out, mask, |u, r| u > r.p(), |v, r| v / r.q())
}

/// The mutant layer: the reference with train replaced.
pub static LAYER: Patched = Patched {
    name: "keep_above_p",
    train,
    ..Patched::REFERENCE
};

/// The gallery entry.
pub fn mutant() -> Mutant {
    Mutant {
        id: "keep_above_p",
        mistake: "Keeps a unit when u > p instead of u >= p.",
        source: "seed 001",
        equivalent: Some(
            "The rules differ only when u equals p exactly, which has probability at most 2^-53 per unit (u lives on a 2^-53 grid): unobservable at any feasible budget.",
        ),
        effect: None,
        layer: &LAYER,
    }
}
