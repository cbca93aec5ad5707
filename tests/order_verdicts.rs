//! Issue 22, item 1: a leading-order claim's verdict judges its closed form.
//!
//! Each leading-order claim (LayerNorm c, RMSNorm √q, bypass c_damped,
//! compound c₂, and the three second-order corrections) is run as the report
//! runs it ([`report::run_claims`], default budget and seed) with its closed
//! form replaced through [`NormClaim::with_closed_form`] by
//!
//! * the estimate it corrects (its first baseline: the uncorrected output,
//!   i.e. c = 1; the c1-only estimate, i.e. c₂ = 1; the first-order formula
//!   for a second-order claim),
//! * that estimate plus 0.9 × the correction, and
//! * for the first-order claims, the factor itself scaled by 0.9
//!   (`β + 0.9 c (LN(x) − β)`, `0.9 √q RMS(x)`, …).
//!
//! Every plant must fail on its order check while the sampler's z-test
//! against the exact oracle — the whole verdict before the order check —
//! still passes; the real closed forms must pass.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use dropmc::Error;
use dropmc::claims::norm::{Config, NormClaim, Stat};
use dropmc::claims::{Claim, ClaimResult, Kind, Verdict};
use dropmc::conformance::report::{self, Report};
use dropmc::engine::DEFAULT_SEED;
use dropmc::ops::Subject;

/// The leading-order claims, first order then second order.
static LEADING: LazyLock<Vec<&'static NormClaim>> = LazyLock::new(|| {
    dropmc::claims::norm_claims()
        .filter(|c| matches!(c.card.kind, Kind::LeadingOrder { .. }))
        .collect()
});

type ClosedForm = fn(&Config) -> Result<Vec<f64>, Error>;

/// The index in [`LEADING`] of the claim whose closed form is planted: a
/// closed form is a plain `fn`, so the plants read the claim from here
/// (only one test plants, one claim at a time).
static PLANTED: AtomicUsize = AtomicUsize::new(0);

fn planted() -> &'static NormClaim {
    LEADING[PLANTED.load(Ordering::SeqCst)]
}

/// The planted claim's first baseline plus `TENTHS`/10 of its correction.
fn corrected_by<const TENTHS: u32>(c: &Config) -> Result<Vec<f64>, Error> {
    let claim = planted();
    let real = (claim.analytic)(c)?;
    let weaker = (claim.baselines[0].1)(c)?;
    let share = f64::from(TENTHS) / 10.0;
    Ok(weaker
        .iter()
        .zip(&real)
        .map(|(w, r)| w + share * (r - w))
        .collect())
}

/// The planted claim's closed form with its factor scaled by 0.9 about the
/// norm's shift: `β + 0.9 (a − β)` (`β = 0` for RMSNorm, `β2` for the
/// compound).
fn factor_scaled(c: &Config) -> Result<Vec<f64>, Error> {
    let claim = planted();
    let real = (claim.analytic)(c)?;
    let shift: Vec<f64> = match claim.stat {
        Stat::Rms => vec![0.0; real.len()],
        Stat::LnLn => c.ln2.beta().to_vec(),
        _ => c.ln.beta().to_vec(),
    };
    Ok(real
        .iter()
        .zip(&shift)
        .map(|(a, b)| b + 0.9 * (a - b))
        .collect())
}

/// The planted closed forms of a claim of order `order`, named (they read
/// the claim from [`PLANTED`]).
fn plants(order: u32) -> Vec<(&'static str, ClosedForm)> {
    let mut all: Vec<(&'static str, ClosedForm)> = vec![
        ("the estimate it corrects", corrected_by::<0>),
        ("0.9 x the correction", corrected_by::<9>),
        ("0.9 x the factor", factor_scaled),
    ];
    // A second-order claim has no single factor: its plants are the first
    // two.
    if order == 2 {
        all.truncate(2);
    }
    all
}

/// The order of a leading-order claim.
fn order_of(kind: Kind) -> Option<u32> {
    match kind {
        Kind::LeadingOrder { order } => Some(order),
        Kind::Exact => None,
    }
}

fn run(claim: &NormClaim) -> ClaimResult {
    let claims: [&dyn Claim; 1] = [claim];
    report::run_claims(
        &claims,
        &Subject::reference(),
        DEFAULT_SEED,
        None,
        |_, _| {},
    )
    .expect("runs")
    .remove(0)
}

/// The registry's leading-order claims that are norm claims, in its order.
/// The other leading-order claims are families of their own claim type,
/// with no `with_closed_form` to plant through and no `baselines` for
/// `corrected_by`; their plants run in their own tests
/// (`linear_path.output`: src/claims/linear_path/tests.rs,
/// `the_first_order_output_passes_its_order_check_and_planted_forms_fail_it`;
/// the network family: tests/network.rs). Every one of them must still have
/// an order check: [`every_leading_order_claim_of_the_registry_has_an_order_check`].
fn registry_leading() -> Vec<&'static dyn Claim> {
    let norm: Vec<&str> = dropmc::claims::norm_claims().map(|c| c.card.id).collect();
    dropmc::claims::registry()
        .into_iter()
        .filter(|c| order_of(c.kind()).is_some() && norm.contains(&c.id()))
        .collect()
}

#[test]
fn every_leading_order_claim_of_the_registry_has_an_order_check() {
    // Read from the registry, so a family added by docs/architecture.md's
    // steps is covered without an edit here (the norm claims' checks run
    // in the test below).
    let norm: Vec<&str> = dropmc::claims::norm_claims().map(|c| c.card.id).collect();
    for claim in dropmc::claims::registry() {
        if order_of(claim.kind()).is_some() && !norm.contains(&claim.id()) {
            assert!(
                claim.order_check().is_some(),
                "{} is leading order but declares no order check",
                claim.id()
            );
        }
    }
}

#[test]
fn every_leading_order_claim_of_the_registry_is_a_norm_claim_with_a_sweep() {
    // The order checks below run on the norm claims; a leading-order claim
    // the registry holds but that list misses would go unchecked.
    let ids: Vec<&str> = LEADING.iter().map(|c| c.card.id).collect();
    let registered: Vec<&str> = registry_leading().iter().map(|c| c.id()).collect();
    assert_eq!(ids, registered);
    assert!(!ids.is_empty());
    assert!(LEADING.iter().all(|c| c.sweep.is_some()));
}

#[test]
fn wrong_leading_order_closed_forms_fail_on_their_order_check_and_real_ones_pass() {
    let mut caught = Vec::new();
    for (i, &real) in LEADING.iter().enumerate() {
        PLANTED.store(i, Ordering::SeqCst);
        // The real closed forms pass their order check (and the report:
        // tests/report_snapshot.rs runs every claim at the default budget).
        let order = real
            .order_check()
            .expect("an order check")
            .expect("measured");
        assert!(order.passed(), "{}: {}", real.card.id, order.summary());
        let order = order_of(real.card.kind).expect("leading order");
        for (k, (what, plant)) in plants(order).into_iter().enumerate() {
            let wrong = real.clone().with_closed_form(plant);
            let order = wrong
                .order_check()
                .expect("an order check")
                .expect("measured");
            println!("{} with {what}: {}", real.card.id, order.summary());
            assert!(
                !order.passed(),
                "{} with {what} passed: {}",
                real.card.id,
                order.summary()
            );
            caught.push(format!("{} / {what}", real.card.id));
            if k > 0 {
                continue;
            }
            // The first plant (the correction dropped: c = 1, √q = 1,
            // c₂ = 1, first order for second order) through the report at
            // the default budget: the claim fails, the table names it and
            // its order check, and the z-test alone (the verdict before the
            // order check) still passes it.
            let r = run(&wrong);
            assert!(r.error.is_none(), "{}: {:?}", r.id, r.error);
            assert!(
                !r.tests.iter().any(|t| t.rejected),
                "{} with {what}: the z-test should not see the closed form",
                r.id
            );
            assert_eq!(r.verdict, Verdict::Fail, "{} with {what}", r.id);
            let table = report::table(&Report {
                seed: DEFAULT_SEED,
                subject: "reference".into(),
                results: vec![r.clone()],
            });
            let named = format!("{}: FAIL: its closed form fails the order check", r.id);
            assert!(table.contains(&named), "{table}");
        }
    }
    // Three plants per first-order claim of the registry, two per
    // second-order one.
    let expected: usize = registry_leading()
        .iter()
        .map(|c| match order_of(c.kind()) {
            Some(1) => 3,
            _ => 2,
        })
        .sum();
    assert_eq!(caught.len(), expected, "{caught:?}");
}
