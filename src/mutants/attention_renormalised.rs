//! Mutant `attention_renormalised`: renormalises the surviving attention weights so every row sums to one.
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
    REFERENCE.forward_train(a, p, rng, out, mask)?;
    let total: f64 = out.iter().sum();
    if total > 0.0 {
        for o in out.iter_mut() {
            *o /= total;
        }
    }
    Ok(())
}

/// The mutant layer: the reference with attention replaced.
pub static LAYER: Patched = Patched {
    name: "attention_renormalised",
    attention: Some(attention),
    ..Patched::REFERENCE
};

/// The gallery entry.
pub fn mutant() -> Mutant {
    Mutant {
        id: "attention_renormalised",
        mistake: "Renormalises the surviving attention weights so every row sums to one.",
        source: "seed 002",
        equivalent: None,
        effect: None,
        layer: &LAYER,
    }
}
