//! `semantics.survivors_exact` accepts both standard roundings of a kept
//! unit, `fl(x/q)` (the reference) and `fl(x · fl(1/q))` (candle, burn and
//! most frameworks multiply by a precomputed reciprocal), says which one a
//! layer uses, and still refuses a layer that is off by more.
//!
//! Deterministic: a rule checked on every draw, no statistical assertion.

use dropmc::claims::{Verdict, check, registry};
use dropmc::conformance::mutants::{Deviant, Deviation, Keep, Scale};
use dropmc::engine::{Budget, derive_seed};
use dropmc::ops::{DropoutLayer, InvertedDropout, Subject};

/// The reference with kept units scaled by `survivor` instead of `x / q`.
fn scaled(name: &'static str, survivor: Scale) -> Deviant {
    Deviant {
        name,
        deviation: Deviation::Scaling {
            keep: Keep::AtLeastP,
            survivor,
            gradient: Scale::DivideByQ,
        },
    }
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
    let reciprocal = scaled("reciprocal", Scale::TimesReciprocalQ);
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

#[test]
fn two_ulps_off_is_still_a_violation() {
    // `x/q` moved two units in the last place away from zero.
    let off = scaled("two ulps", Scale::UlpsAwayFromQuotient(2));
    let r = survivors(&off);
    assert_eq!(r.verdict, Verdict::Fail, "{r:?}");
}
