//! `semantics.survivors_exact` accepts both standard roundings of a kept
//! unit, `fl(x/q)` (the reference) and `fl(x · fl(1/q))` (candle, burn and
//! most frameworks multiply by a precomputed reciprocal), says which one a
//! layer uses, and still refuses a layer that is off by more.
//!
//! Deterministic: a rule checked on every draw, no statistical assertion.

use dropmc::claims::{Verdict, check, registry};
use dropmc::engine::{Budget, derive_seed, keep};
use dropmc::error::Error;
use dropmc::mutants::Patched;
use dropmc::ops::{DropoutLayer, InvertedDropout, Rate, Subject};
use rand::Rng;

/// Kept units scaled by `scale(x, q)`; everything else the reference's
/// (the gallery's [`Patched`] door).
fn scaled(
    x: &[f64],
    p: f64,
    rng: &mut dyn Rng,
    out: &mut [f64],
    mask: &mut [bool],
    scale: fn(f64, f64) -> f64,
) -> Result<(), Error> {
    let rate = Rate::new(p)?;
    for ((o, m), &v) in out.iter_mut().zip(mask.iter_mut()).zip(x) {
        *m = keep(rng, rate.p());
        *o = if *m { scale(v, rate.q()) } else { 0.0 };
    }
    Ok(())
}

fn survivors(layer: &dyn DropoutLayer) -> dropmc::claims::ClaimResult {
    let claim = registry()
        .into_iter()
        .find(|c| c.id() == "semantics.survivors_exact")
        .expect("registered");
    let budget = Budget::new(2_000, derive_seed(1, "tests/survivors_rounding")).unwrap();
    check(claim, &Subject::with_dropout(layer), budget)
}

#[test]
fn the_reciprocal_rounding_passes_and_is_named() {
    let reciprocal = Patched {
        name: "reciprocal",
        train: |x, p, rng, out, mask| scaled(x, p, rng, out, mask, |v, q| v * (1.0 / q)),
        ..Patched::REFERENCE
    };
    // At q = 0.7 the two roundings differ on some of the claim's inputs
    // (−1.2 / 0.7 = −1.7142857142857144 but −1.2 · fl(1/0.7) =
    // −1.7142857142857142, Python float arithmetic).
    assert_ne!(-1.2f64 / 0.7, -1.2 * (1.0 / 0.7f64));
    let r = survivors(&reciprocal);
    assert_eq!(r.verdict, Verdict::Pass, "{r:?}");
    assert!(
        r.note.as_deref().unwrap_or_default().contains("reciprocal"),
        "{:?}",
        r.note
    );
    let r = survivors(&InvertedDropout);
    assert_eq!(r.verdict, Verdict::Pass, "{r:?}");
    assert!(
        r.note
            .as_deref()
            .unwrap_or_default()
            .contains("one division"),
        "{:?}",
        r.note
    );
}

/// `x/q` moved two units in the last place away from zero.
fn two_ulps_up(x: f64, q: f64) -> f64 {
    let z = x / q;
    if z.is_finite() && z != 0.0 {
        f64::from_bits(z.to_bits() + 2)
    } else {
        z
    }
}

#[test]
fn two_ulps_off_is_still_a_violation() {
    let off = Patched {
        name: "two ulps",
        train: |x, p, rng, out, mask| scaled(x, p, rng, out, mask, two_ulps_up),
        ..Patched::REFERENCE
    };
    let r = survivors(&off);
    assert_eq!(r.verdict, Verdict::Fail, "{r:?}");
}
