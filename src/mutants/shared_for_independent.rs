//! Mutant `shared_for_independent`: shares one mask over all positions where an independent mask per entry is specified.
//!
//! Source: seed 002.

use rand::Rng;

use super::{Effect, Mutant, Patched, REFERENCE};
use crate::error::Error;
use crate::ops::{MaskShape, default_positions};

fn positions(
    x: &[f64],
    positions: usize,
    _shape: MaskShape,
    p: f64,
    rng: &mut dyn Rng,
    out: &mut [f64],
    mask: &mut [bool],
) -> Result<(), Error> {
    let shape = MaskShape::SharedOverPositions;
    default_positions(&REFERENCE, x, positions, shape, p, rng, out, mask)
}

/// The mutant layer: the reference with positions replaced.
pub static LAYER: Patched = Patched {
    name: "shared_for_independent",
    positions: Some(positions),
    ..Patched::REFERENCE
};

/// The gallery entry.
pub fn mutant() -> Mutant {
    Mutant {
        id: "shared_for_independent",
        mistake: "Shares one mask over all positions where an independent mask per entry is specified.",
        source: "seed 002",
        equivalent: None,
        effect: Some(Effect {
            claim: "mask_shape.independent_zero_column",
            // P(column all zero) is p instead of p^T, in each column.
            effect: || {
                use crate::claims::mask_shape::{D, P, T};
                vec![P - P.powi(T as i32); D]
            },
        }),
        layer: &LAYER,
    }
}
