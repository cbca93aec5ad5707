//! Mutant `shared_for_independent`: shares one mask over all positions where an independent mask per entry is specified.
//!
//! Source: seed 002.

use rand::Rng;

use super::{Effect, Mutant, REFERENCE};
use crate::error::Error;
use crate::ops::{DropoutLayer, MaskShape, default_positions};

/// The mutant layer.
pub struct Layer;

impl DropoutLayer for Layer {
    fn name(&self) -> &str {
        "shared_for_independent"
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
        REFERENCE.backward(grad_out, p, mask, grad_in)
    }

    fn forward_positions(
        &self,
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
}

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
        layer: &Layer,
    }
}
