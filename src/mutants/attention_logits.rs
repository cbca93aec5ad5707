//! Mutant `attention_logits`: drops the attention logits before the softmax instead of the probabilities after it.
//!
//! Source: seed 002.

use rand::Rng;

use super::{Mutant, Patched, REFERENCE};
use crate::error::Error;
use crate::ops::DropoutLayer;

fn attention(
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

/// The mutant layer: the reference with attention replaced.
pub static LAYER: Patched = Patched {
    name: "attention_logits",
    attention: Some(attention),
    ..Patched::REFERENCE
};

/// The gallery entry.
pub fn mutant() -> Mutant {
    Mutant {
        id: "attention_logits",
        mistake: "Drops the attention logits before the softmax instead of the probabilities after it.",
        source: "seed 002",
        equivalent: None,
        effect: None,
        layer: &LAYER,
    }
}
