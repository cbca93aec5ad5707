//! Mutant `independent_for_shared`: draws an independent mask per entry where one mask shared over positions is specified.
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
    let shape = MaskShape::Independent;
    default_positions(&REFERENCE, x, positions, shape, p, rng, out, mask)
}

/// The mutant layer: the reference with positions replaced.
pub static LAYER: Patched = Patched {
    name: "independent_for_shared",
    positions: Some(positions),
    ..Patched::REFERENCE
};

/// The gallery entry.
pub fn mutant() -> Mutant {
    Mutant {
        id: "independent_for_shared",
        mistake: "Draws an independent mask per entry where one mask shared over positions is specified.",
        source: "seed 002",
        equivalent: None,
        effect: Some(Effect {
            claim: "mask_shape.shared_zero_column",
            // P(column all zero) is p^T instead of p, in each column.
            effect: || {
                use crate::claims::mask_shape::{D, P, T};
                vec![P.powi(T as i32) - P; D]
            },
        }),
        layer: &LAYER,
    }
}
