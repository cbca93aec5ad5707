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

/// Claim `I`'s first baseline plus `TENTHS`/10 of its correction.
fn corrected_by<const I: usize, const TENTHS: u32>(c: &Config) -> Result<Vec<f64>, Error> {
    let claim = LEADING[I];
    let real = (claim.analytic)(c)?;
    let weaker = (claim.baselines[0].1)(c)?;
    let share = f64::from(TENTHS) / 10.0;
    Ok(weaker
        .iter()
        .zip(&real)
        .map(|(w, r)| w + share * (r - w))
        .collect())
}

/// Claim `I`'s closed form with its factor scaled by 0.9 about the norm's
/// shift: `β + 0.9 (a − β)` (`β = 0` for RMSNorm, `β2` for the compound).
fn factor_scaled<const I: usize>(c: &Config) -> Result<Vec<f64>, Error> {
    let claim = LEADING[I];
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

/// The planted closed forms of claim `i`, named.
fn plants(i: usize) -> Vec<(&'static str, ClosedForm)> {
    macro_rules! row {
        ($i:literal) => {
            vec![
                (
                    "the estimate it corrects",
                    corrected_by::<$i, 0> as ClosedForm,
                ),
                ("0.9 x the correction", corrected_by::<$i, 9>),
                ("0.9 x the factor", factor_scaled::<$i>),
            ]
        };
    }
    let mut all = match i {
        0 => row!(0),
        1 => row!(1),
        2 => row!(2),
        3 => row!(3),
        4 => row!(4),
        5 => row!(5),
        6 => row!(6),
        _ => unreachable!("seven leading-order claims"),
    };
    // A second-order claim has no single factor: its plants are the first
    // two.
    if matches!(LEADING[i].card.kind, Kind::LeadingOrder { order: 2 }) {
        all.truncate(2);
    }
    all
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

#[test]
fn there_are_seven_leading_order_claims_with_sweeps() {
    let ids: Vec<&str> = LEADING.iter().map(|c| c.card.id).collect();
    assert_eq!(
        ids,
        [
            "layernorm.output",
            "rmsnorm.output",
            "bypass.output",
            "compound.output",
            "second_order.layernorm_output",
            "second_order.rmsnorm_output",
            "second_order.bypass_output",
        ]
    );
    assert!(LEADING.iter().all(|c| c.sweep.is_some()));
}

#[test]
fn wrong_leading_order_closed_forms_fail_on_their_order_check_and_real_ones_pass() {
    let mut caught = Vec::new();
    for (i, &real) in LEADING.iter().enumerate() {
        // The real closed forms pass their order check (and the report:
        // tests/report_snapshot.rs runs every claim at the default budget).
        let order = real
            .order_check()
            .expect("an order check")
            .expect("measured");
        assert!(order.passed(), "{}: {}", real.card.id, order.summary());
        for (k, (what, plant)) in plants(i).into_iter().enumerate() {
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
    assert_eq!(caught.len(), 4 * 3 + 3 * 2, "{caught:?}");
}
