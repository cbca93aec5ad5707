//! The normalization families (LayerNorm, RMSNorm, bypass, compound): exact
//! oracles against each other, corrected estimates against uncorrected ones,
//! the measured order of the leading-order gap, wrong implementations that
//! must be caught, and degenerate inputs.
//!
//! Every comparison here is between exact computations (oracles and closed
//! forms), judged with their derived rounding bounds: no false-alarm budget
//! is spent. The Monte Carlo side of these claims runs in
//! `tests/report_snapshot.rs`.

use dropmc::Error;
use dropmc::claims::norm::{NormClaim, mean_abs_gap};
use dropmc::claims::order::{GapCurve, SWEEP_D};
use dropmc::claims::{Kind, Verdict, check, compound, layernorm, rmsnorm};
use dropmc::conformance::mutants::{Deviant, Deviation, Keep, Scale};
use dropmc::engine::{Budget, derive_seed};
use dropmc::exact::Oracle;
use dropmc::ops::{LayerNorm, Rate, RmsNorm, Subject};

/// The first-order claims among the normalization claims.
fn leading_claims() -> Vec<&'static NormClaim> {
    dropmc::claims::norm_claims()
        .filter(|c| c.card.kind == Kind::LeadingOrder { order: 1 })
        .collect()
}

fn agree(a: &Oracle, b: &Oracle) -> bool {
    a.values
        .iter()
        .zip(&b.values)
        .zip(a.rounding.iter().zip(&b.rounding))
        .all(|((x, y), (rx, ry))| (x - y).abs() <= rx + ry)
}

#[test]
fn every_first_order_claim_of_the_registry_is_checked_here() {
    let ids: Vec<&str> = leading_claims().iter().map(|c| c.card.id).collect();
    // The first-order claims of the registry that are norm claims. The
    // others are families of their own claim type (a configuration that is
    // not a `norm::Config`), with no `NormClaim::grouped` / `exact` pair for
    // the loop below; each checks its grouped sweep oracle against full
    // enumeration in its own tests: linear_path.output in
    // src/claims/linear_path/tests.rs
    // (`the_sweeps_grouped_oracle_agrees_with_full_enumeration`), the
    // network family in tests/network.rs.
    let norm: Vec<&str> = dropmc::claims::norm_claims().map(|c| c.card.id).collect();
    let registered: Vec<&str> = dropmc::claims::registry()
        .into_iter()
        .filter(|c| c.kind() == Kind::LeadingOrder { order: 1 } && norm.contains(&c.id()))
        .map(|c| c.id())
        .collect();
    assert_eq!(ids, registered);
    assert!(!ids.is_empty());
}

#[test]
fn the_grouped_oracle_agrees_with_full_enumeration() {
    for claim in leading_claims() {
        let sweep = claim.sweep.expect("sweep");
        for config in [
            claim.configuration().unwrap(),
            sweep(12).unwrap(),
            sweep(16).unwrap(),
        ] {
            let full = claim.exact(&config).unwrap();
            let grouped = claim.grouped(&config).unwrap();
            assert!(
                agree(&full, &grouped),
                "{} at d = {}: full {:?} vs grouped {:?}",
                claim.card.id,
                config.site.dim(),
                full,
                grouped
            );
        }
    }
}

/// The gap of each estimate (closed form first, then the baselines) to the
/// exact oracle, and the uncertainty of a gap from the oracle's rounding and
/// the estimates' own (64 ε |value|, as `Oracle::agrees_with` takes it).
fn gaps(claim: &NormClaim) -> (Vec<f64>, f64) {
    let config = claim.configuration().unwrap();
    let exact = claim.exact(&config).unwrap();
    let mut estimates = vec![(claim.analytic)(&config).unwrap()];
    for (_, f) in claim.baselines {
        estimates.push(f(&config).unwrap());
    }
    let slack = exact
        .rounding
        .iter()
        .zip(&exact.values)
        .map(|(r, v)| r + 64.0 * f64::EPSILON * v.abs())
        .sum::<f64>()
        / exact.values.len() as f64;
    let g = estimates
        .iter()
        .map(|e| mean_abs_gap(e, &exact.values))
        .collect();
    (g, slack)
}

#[test]
fn each_corrected_estimate_beats_the_weaker_ones() {
    for claim in leading_claims() {
        let (g, slack) = gaps(claim);
        assert!(g.len() >= 2, "{} has no baseline", claim.card.id);
        // compound: c1 + c2 beats c1-only beats uncorrected; others: corrected
        // beats uncorrected. A gap is known to ± slack.
        for pair in g.windows(2) {
            assert!(
                pair[0] + 2.0 * slack < pair[1],
                "{}: gaps {:?} (slack {slack:e})",
                claim.card.id,
                g
            );
        }
    }
}

fn curve(claim: &NormClaim) -> GapCurve {
    let c = claim.gap_curve(&SWEEP_D).unwrap();
    eprintln!(
        "{}: gaps {:?}\n local slopes {:?}\n slope {} tolerance {} A {} B {}",
        claim.card.id, c.gap, c.local_slopes, c.slope, c.tolerance, c.a, c.b
    );
    c
}

/// The order test (see [`GapCurve::check_order`]); these claims are of
/// order 1.
fn check_order(c: &GapCurve) -> Result<(), String> {
    assert_eq!(c.order, 1);
    c.check_order()
}

#[test]
fn leading_order_gaps_fall_like_one_over_d() {
    for claim in leading_claims() {
        let c = curve(claim);
        // The oracle's rounding is not what sets the slope's tolerance: its
        // share, 2 max(r/g)/L over the fitted log-range L (GapCurve::fit),
        // is below the expansion's ORDER_REMAINDER_FACTOR |B/A|/d₀.
        let logd = |i: usize| (c.d[i] as f64).ln();
        let span = logd(c.d.len() - 1) - logd(c.fit_from);
        let rounding_share = 2.0
            * c.rounding
                .iter()
                .zip(&c.gap)
                .map(|(r, g)| r / g)
                .fold(0.0, f64::max)
            / span;
        let remainder_share = dropmc::stats::tolerance::ORDER_REMAINDER_FACTOR * (c.b / c.a).abs()
            / c.d[c.fit_from] as f64;
        assert!(
            rounding_share < remainder_share,
            "{}: rounding share {rounding_share:e} vs remainder {remainder_share:e}",
            claim.card.id
        );
        if let Err(why) = check_order(&c) {
            panic!("{}: {why}", claim.card.id);
        }
    }
}

#[test]
fn a_missing_rescale_fails_the_exact_claims() {
    // Deliberate failures: no false-alarm budget is spent.
    // Dropout without the 1/q rescale (the original scheme's training pass).
    let no_rescale = Deviant {
        name: "no rescale",
        deviation: Deviation::Scaling {
            keep: Keep::AtLeastP,
            survivor: Scale::Unscaled,
            gradient: Scale::DivideByQ,
        },
    };
    let subject = Subject::with_dropout(&no_rescale);
    for claim in dropmc::claims::registry() {
        let watched = [
            "layernorm.mean_of_m",
            "layernorm.mean_of_v",
            "rmsnorm.mean_of_r2",
            "bypass.mean_of_v",
            "bypass.several_terms_mean_of_v",
        ];
        if watched.contains(&claim.id()) {
            let budget = Budget::new(50_000, derive_seed(1, claim.id())).unwrap();
            let result = check(claim, &subject, budget);
            assert_eq!(result.verdict, Verdict::Fail, "{} missed it", claim.id());
        }
    }
}

#[test]
fn degenerate_inputs_are_typed_errors() {
    use dropmc::formulas::{bypass as fb, compound as fc, layernorm as fl, rmsnorm as fr};
    let rate = Rate::new(0.3).unwrap();
    let degenerate = |r: Result<f64, Error>| matches!(r, Err(Error::Degenerate { .. }));
    // σ = 0, all-zero x, d = 1.
    assert!(degenerate(fl::mean_of_v(&[2.0, 2.0, 2.0], rate)));
    assert!(degenerate(fl::mean_of_v(&[0.0; 4], rate)));
    assert!(degenerate(fl::mean_of_v(&[1.5], rate)));
    assert!(degenerate(fl::shrink(1.0, 0.0, rate)));
    assert!(degenerate(fr::mean_of_r2(&[0.0; 3], rate)));
    assert!(degenerate(fr::mean_of_r2(&[2.0], rate)));
    let site = dropmc::ops::Site::new(vec![1.0, 1.0], vec![(vec![0.5, 0.5], 0.3)]).unwrap();
    assert!(degenerate(fb::mean_of_v(&site)));
    // Mismatched lengths.
    assert!(matches!(
        LayerNorm::new(vec![1.0; 3], vec![0.0; 2], 0.0),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(matches!(
        LayerNorm::with_defaults(3, Some(vec![1.0; 2]), None, 0.0),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(RmsNorm::with_defaults(3, Some(vec![1.0; 4]), 0.0).is_err());
    assert!(dropmc::ops::Site::new(vec![1.0; 3], vec![(vec![1.0; 2], 0.3)]).is_err());
    let ln = LayerNorm::plain(3, 0.0).unwrap();
    let ln0 = LayerNorm::new(vec![0.0; 3], vec![0.0; 3], 0.0).unwrap();
    assert!(fc::compound(&[1.0, 2.0, 4.0], &ln0, &ln, rate).is_err());
    assert!(fc::compound(&[1.0, 2.0], &ln, &ln, rate).is_err());
    // The eval entry points.
    let budget = Budget::new(100, 1).unwrap();
    use dropmc::eval::{LayerNormParams, norm};
    let short_gamma = LayerNormParams {
        gamma: Some(vec![1.0]),
        ..LayerNormParams::default()
    };
    assert!(norm::ln(&[1.0, 1.0], 0.3, LayerNormParams::default(), budget).is_err());
    assert!(norm::ln(&[1.0, 2.0], 0.3, short_gamma, budget).is_err());
    assert!(norm::ln(&[1.0, 2.0], 1.0, LayerNormParams::default(), budget).is_err());
    assert!(norm::rms(&[0.0, 0.0], 0.3, None, 0.0, budget).is_err());
    assert!(norm::bypass(&[1.0, 2.0], &[1.0], 0.3, budget).is_err());
    let params = norm::CompoundParams {
        gamma1: vec![1.0; 2],
        beta1: vec![0.0; 3],
        ..Default::default()
    };
    assert!(norm::compound(&[1.0, 2.0, 3.0], 0.3, params, budget).is_err());
}

/// A copy of `claim` whose closed form is `analytic` instead.
fn with_analytic(
    claim: &NormClaim,
    analytic: fn(&dropmc::claims::norm::Config) -> Result<Vec<f64>, Error>,
) -> NormClaim {
    claim.clone().with_closed_form(analytic)
}

#[test]
fn a_wrong_correction_fails_the_order_test() {
    // Deliberate failures (exact computations, no budget): a correction that
    // misses an O(1) part leaves a gap that does not fall with d, and the
    // slope test must reject it.
    use dropmc::formulas::{compound as fc, layernorm as fl};
    let ln = &layernorm::norm_claims()[3];
    // √q in place of c(μ, σ), although μ ≠ 0.
    let root_q = with_analytic(ln, |c| {
        let rate = c.site.terms()[0].1;
        let u = fl::uncorrected(&c.site.clean(), &c.ln)?;
        Ok(fl::shrink_towards_beta(&u, c.ln.beta(), rate.q().sqrt()))
    });
    let co = &compound::norm_claims()[0];
    // The c1-only estimate offered as the compound closed form.
    let c1_only = with_analytic(co, |c| {
        fc::c1_only(&c.site.clean(), &c.ln, &c.ln2, c.site.terms()[0].1)
    });
    for wrong in [root_q, c1_only] {
        let c = wrong.gap_curve(&SWEEP_D).unwrap();
        assert!(
            check_order(&c).is_err(),
            "{} with a wrong correction passed: slope {} ± {}",
            wrong.card.id,
            c.slope,
            c.tolerance
        );
        // Its gap does not fall: it ends at least half of where it began.
        assert!(
            c.gap[c.gap.len() - 1] > 0.5 * c.gap[0],
            "{}: {:?}",
            wrong.card.id,
            c.gap
        );
    }
}

#[test]
fn with_eps_the_corrected_estimates_still_beat_the_uncorrected() {
    use dropmc::formulas::{layernorm as fl, rmsnorm as fr};
    let ln_claim = &layernorm::norm_claims()[3];
    let rms_claim = &rmsnorm::norm_claims()[1];
    for eps in [0.05, 0.5] {
        let mut config = ln_claim.configuration().unwrap();
        config.ln = LayerNorm::new(layernorm::gains(16), layernorm::shifts(16), eps).unwrap();
        config.rms = RmsNorm::new(layernorm::gains(16), eps).unwrap();
        let x = config.site.clean();
        let rate = config.site.terms()[0].1;
        for (claim, corrected, uncorrected) in [
            (
                ln_claim,
                fl::corrected(&x, &config.ln, rate).unwrap(),
                fl::uncorrected(&x, &config.ln).unwrap(),
            ),
            (
                rms_claim,
                fr::corrected(&x, &config.rms, rate).unwrap(),
                fr::uncorrected(&x, &config.rms).unwrap(),
            ),
        ] {
            let exact = claim.exact(&config).unwrap();
            let slack: f64 = exact.rounding.iter().sum::<f64>() / 16.0;
            let (a, b) = (
                mean_abs_gap(&corrected, &exact.values),
                mean_abs_gap(&uncorrected, &exact.values),
            );
            assert!(
                a + 2.0 * slack < b,
                "{} at eps = {eps}: {a} vs {b}",
                claim.card.id
            );
        }
    }
}
