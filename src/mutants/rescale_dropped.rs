//! Mutant `rescale_dropped`: applies the 1/q scale to the dropped units too: (m x) / q.
//!
//! Source: seed 003.
//!
//! Equivalent: A dropped unit is 0 and 0 / q is 0 bit for bit, so every output, mask and gradient equals the reference's.

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
    // Mask first, then scale every unit, dropped ones included.
    train_with(x, p, rng, out, mask, |u, r| u >= r.p(), |v, _| v)?;
    let q = 1.0 - p;
    for o in out.iter_mut() {
        *o /= q;
    }
    Ok(())
}

/// The mutant layer: the reference with train replaced.
pub static LAYER: Patched = Patched {
    name: "rescale_dropped",
    train,
    ..Patched::REFERENCE
};

/// The gallery entry.
pub fn mutant() -> Mutant {
    Mutant {
        id: "rescale_dropped",
        mistake: "Applies the 1/q scale to the dropped units too: (m x) / q.",
        source: "seed 003",
        equivalent: Some(
            "A dropped unit is 0 and 0 / q is 0 bit for bit, so every output, mask and gradient equals the reference's.",
        ),
        effect: None,
        layer: &LAYER,
    }
}
