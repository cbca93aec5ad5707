//! Mutant `attention_renormalised`: renormalises the surviving attention weights so every row sums to one.
//!
//! Source: seed 002.

use rand::Rng;

use super::{Mutant, REFERENCE};
use crate::error::Error;
use crate::ops::DropoutLayer;

/// The mutant layer.
pub struct Layer;

impl DropoutLayer for Layer {
    fn name(&self) -> &str {
        "attention_renormalised"
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

    fn forward_attention(
        &self,
        a: &[f64],
        p: f64,
        rng: &mut dyn Rng,
        out: &mut [f64],
        mask: &mut [bool],
    ) -> Result<(), Error> {
        REFERENCE.forward_train(a, p, rng, out, mask)?;
        let total: f64 = out.iter().sum();
        if total > 0.0 {
            for o in out.iter_mut() {
                *o /= total;
            }
        }
        Ok(())
    }
}

/// The gallery entry.
pub fn mutant() -> Mutant {
    Mutant {
        id: "attention_renormalised",
        mistake: "Renormalises the surviving attention weights so every row sums to one.",
        source: "seed 002",
        equivalent: None,
        effect: None,
        layer: &Layer,
    }
}
