//! Mutant `eval_scales_by_q`: multiplies by q at evaluation after inverted training (mixes the two schemes).
//!
//! Source: seed 001.

use rand::Rng;

use super::{Mutant, Patched};
use crate::error::Error;

fn eval(x: &[f64], p: f64, rng: &mut dyn Rng, out: &mut [f64]) -> Result<(), Error> {
    crate::ops::Rate::new(p)?;
    let _ = rng;
    crate::error::check_len("eval output buffer", out, x.len())?;
    let q = 1.0 - p;
    for (o, v) in out.iter_mut().zip(x) {
        *o = v * q;
    }
    Ok(())
}

/// The mutant layer: the reference with eval replaced.
pub static LAYER: Patched = Patched {
    name: "eval_scales_by_q",
    eval,
    ..Patched::REFERENCE
};

/// The gallery entry.
pub fn mutant() -> Mutant {
    Mutant {
        id: "eval_scales_by_q",
        mistake: "Multiplies by q at evaluation after inverted training (mixes the two schemes).",
        source: "seed 001",
        equivalent: None,
        effect: None,
        layer: &LAYER,
    }
}
