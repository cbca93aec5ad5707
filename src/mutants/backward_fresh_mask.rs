//! Mutant `backward_fresh_mask`: backward pass draws a fresh mask instead of reusing the forward pass's.
//!
//! Source: seed 001.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{Mutant, Patched, REFERENCE};
use crate::error::Error;
use crate::ops::DropoutLayer;

/// Counts backward calls: each seeds its own fresh mask.
static CALLS: AtomicU64 = AtomicU64::new(0);

fn backward(grad_out: &[f64], p: f64, mask: &[bool], grad_in: &mut [f64]) -> Result<(), Error> {
    let _ = mask;
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    let mut own = crate::engine::stream(0x5eed, call);
    let mut fresh = vec![false; grad_out.len()];
    for m in fresh.iter_mut() {
        *m = crate::engine::keep(&mut own, p);
    }
    REFERENCE.backward(grad_out, p, &fresh, grad_in)
}

/// The mutant layer: the reference with backward replaced.
pub static LAYER: Patched = Patched {
    name: "backward_fresh_mask",
    backward,
    ..Patched::REFERENCE
};

/// The gallery entry.
pub fn mutant() -> Mutant {
    Mutant {
        id: "backward_fresh_mask",
        mistake: "Backward pass draws a fresh mask instead of reusing the forward pass's.",
        source: "seed 001",
        equivalent: None,
        effect: None,
        layer: &LAYER,
    }
}
