//! Mutant `eval_scales_by_q`: multiplies by q at evaluation after inverted training (mixes the two schemes).
//!
//! Source: seed 001.

use rand::Rng;

use super::{Mutant, REFERENCE};
use crate::error::Error;
use crate::ops::DropoutLayer;

/// The mutant layer.
pub struct Layer;

impl DropoutLayer for Layer {
    fn name(&self) -> &str {
        "eval_scales_by_q"
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
        crate::ops::Rate::new(p)?;
        let _ = rng;
        crate::error::check_len("eval output buffer", out, x.len())?;
        let q = 1.0 - p;
        for (o, v) in out.iter_mut().zip(x) {
            *o = v * q;
        }
        Ok(())
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
}

/// The gallery entry.
pub fn mutant() -> Mutant {
    Mutant {
        id: "eval_scales_by_q",
        mistake: "Multiplies by q at evaluation after inverted training (mixes the two schemes).",
        source: "seed 001",
        equivalent: None,
        effect: None,
        layer: &Layer,
    }
}
