//! Mutant `attention_logits`: drops the attention logits before the softmax instead of the probabilities after it.
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
        "attention_logits"
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
        // Logits whose softmax is `a`, dropped, then normalised.
        let logits: Vec<f64> = a.iter().map(|v| v.ln()).collect();
        let mut dropped = vec![0.0; a.len()];
        REFERENCE.forward_train(&logits, p, rng, &mut dropped, mask)?;
        let top = dropped.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let total: f64 = dropped.iter().map(|l| (l - top).exp()).sum();
        for (o, l) in out.iter_mut().zip(&dropped) {
            *o = (l - top).exp() / total;
        }
        Ok(())
    }
}

/// The gallery entry.
pub fn mutant() -> Mutant {
    Mutant {
        id: "attention_logits",
        mistake: "Drops the attention logits before the softmax instead of the probabilities after it.",
        source: "seed 002",
        equivalent: None,
        effect: None,
        layer: &Layer,
    }
}
