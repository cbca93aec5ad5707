//! Mutant `keep_below_p`: keeps a unit when u < p, the complement of the intended mask: keeps a fraction p.
//!
//! Source: seed 001.

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
    train_with(x, p, rng, out, mask, |u, r| u < r.p(), |v, r| v / r.q())
}

/// The mutant layer: the reference with train replaced.
pub static LAYER: Patched = Patched {
    name: "keep_below_p",
    train,
    ..Patched::REFERENCE
};

/// The gallery entry.
pub fn mutant() -> Mutant {
    Mutant {
        id: "keep_below_p",
        mistake: "Keeps a unit when u < p, the complement of the intended mask: keeps a fraction p.",
        source: "seed 001",
        equivalent: None,
        effect: None,
        layer: &LAYER,
    }
}
