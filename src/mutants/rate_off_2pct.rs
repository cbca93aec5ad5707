//! Mutant `rate_off_2pct`: keeps with probability q' = 0.98 q (a drop rate 2 % off) but still scales by 1/q.
//!
//! Source: dropmc (a subtle misconfiguration).

use rand::Rng;

use super::{Effect, Mutant, Patched, train_with};
use crate::error::Error;

fn train(
    x: &[f64],
    p: f64,
    rng: &mut dyn Rng,
    out: &mut [f64],
    mask: &mut [bool],
) -> Result<(), Error> {
    train_with(
        x,
        p,
        rng,
        out,
        mask,
        |u, r| u >= 1.0 - 0.98 * r.q(),
        |v, r| v / r.q(),
    )
}

/// The mutant layer: the reference with train replaced.
pub static LAYER: Patched = Patched {
    name: "rate_off_2pct",
    train,
    ..Patched::REFERENCE
};

/// The gallery entry.
pub fn mutant() -> Mutant {
    Mutant {
        id: "rate_off_2pct",
        mistake: "Keeps with probability q' = 0.98 q (a drop rate 2 % off) but still scales by 1/q.",
        source: "dropmc (a subtle misconfiguration)",
        equivalent: None,
        effect: Some(Effect {
            claim: "semantics.keep_fraction",
            // The kept fraction is 0.98 q instead of q (q = 0.7 there).
            effect: || vec![-0.02 * (1.0 - crate::claims::semantics::P)],
        }),
        layer: &LAYER,
    }
}
