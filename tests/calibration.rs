//! Calibration in CI: the dropout family is calibrated across seeds, and a
//! planted miscalibrated claim is flagged.
//!
//! Budget (recorded by `tests/common`, summed by `tests/zz_budget.rs`): the reference check asserts only
//! that nothing is flagged. Calibration splits its `flag_alpha` over `m` =
//! claims + components + 2 tests (a failure count per claim, a KS test per
//! component, the pooled KS, the dispersion test), and the check sets
//! `flag_alpha = m · α`, so it spends `m` assertions at the per-assertion
//! level α (the dropout family's claims and components, counted from the
//! registry as the test runs). The planted-claim tests assert flags on wrong claims
//! (power, not size) and spend nothing; their miss probabilities are stated
//! beside them. The notes test asserts no verdict.

mod common;

use dropmc::Error;
use dropmc::claims::{Card, Claim, registry};
use dropmc::conformance::verify::Replication;
use dropmc::conformance::verify::calibrate::{
    Calibration, CalibrationOptions, calibrate, calibrate_claims, table,
};
use dropmc::engine::Budget;
use dropmc::exact::Oracle;
use dropmc::ops::Subject;
use dropmc::stats::{Estimate, assertion_alpha};

/// Seeds of the reference check: at least the 11 seeds at which a KS test
/// at the level 10⁻¹⁰ can flag at all (`dropmc::stats::min_sample_for`),
/// and enough that standard errors 20 % too small are flagged by the
/// dispersion test at 10⁻¹⁰ ([`an_se_20_percent_too_small_is_flagged_by_the_dispersion`]).
pub const SEEDS: u64 = 30;

/// Draws per claim in the reference check: above the 3 571 at which the
/// generic path's mean test of a unit's two-point output (skewness 0.87 at
/// p = 0.3) has its stated size, so the per-unit claims are judged. The
/// sums' variances (default skewness bound, minimum budget 37 490) are
/// inconclusive here and reported apart; the kept count is an exact
/// binomial test, valid at any budget.
const SAMPLES: u64 = 4_000;

/// A registry claim with another default budget, and optionally planted
/// mistakes: a scaled analytic value or a scaled standard error. A planted
/// claim has no oracle, so it can fail only through its z-tests.
struct Planted {
    inner: &'static dyn Claim,
    samples: u64,
    id: &'static str,
    analytic_factor: f64,
    stderr_factor: f64,
}

impl Planted {
    fn budgeted(inner: &'static dyn Claim, samples: u64) -> Self {
        Planted {
            inner,
            samples,
            id: inner.id(),
            analytic_factor: 1.0,
            stderr_factor: 1.0,
        }
    }

    fn planted(&self) -> bool {
        self.analytic_factor != 1.0 || self.stderr_factor != 1.0
    }
}

impl Claim for Planted {
    fn card(&self) -> Card {
        Card {
            id: self.id,
            samples: self.samples,
            ..self.inner.card()
        }
    }
    fn min_samples(&self) -> u64 {
        self.inner.min_samples()
    }
    fn analytic(&self) -> Result<Vec<f64>, Error> {
        let a = self.inner.analytic()?;
        Ok(a.into_iter().map(|v| v * self.analytic_factor).collect())
    }
    fn oracle(&self) -> Result<Option<Oracle>, Error> {
        if self.planted() {
            Ok(None)
        } else {
            self.inner.oracle()
        }
    }
    fn estimate(&self, subject: &Subject, budget: Budget) -> Result<Vec<Estimate>, Error> {
        let e = self.inner.estimate(subject, budget)?;
        Ok(e.into_iter()
            .map(|x| Estimate {
                stderr: x.stderr * self.stderr_factor,
                ..x
            })
            .collect())
    }
}

fn registered(id: &str) -> &'static dyn Claim {
    registry()
        .into_iter()
        .find(|c| c.id() == id)
        .expect("registered")
}

/// Calibrates `claims` against the reference, each claim at its own
/// (planted) budget.
fn run(claims: &[&dyn Claim], seeds: u64, first_seed: u64, flag_alpha: f64) -> Calibration {
    let options = CalibrationOptions {
        replication: Replication {
            seeds,
            first_seed,
            family: None,
        },
        samples: None,
        flag_alpha,
    };
    calibrate_claims(claims, &Subject::reference(), &options, None, |_, _| {}).unwrap()
}

/// The dropout family at the reference check's budgets, each claim's
/// standard errors multiplied by `stderr_factor` (1: the real ones), under
/// [`SEEDS`] seeds at `flag_alpha = m α`.
fn dropout_family(stderr_factor: f64) -> (Calibration, usize) {
    let owned: Vec<Planted> = registry()
        .into_iter()
        .filter(|c| c.family() == "dropout")
        .map(|c| Planted {
            stderr_factor,
            ..Planted::budgeted(c, SAMPLES)
        })
        .collect();
    let claims: Vec<&dyn Claim> = owned.iter().map(|c| c as &dyn Claim).collect();
    let components: usize = claims.iter().map(|c| c.analytic().unwrap().len()).sum();
    let m = claims.len() + components + 2;
    let flag_alpha = assertion_alpha() * m as f64;
    (run(&claims, SEEDS, 5000, flag_alpha), m)
}

#[test]
fn the_dropout_family_is_calibrated_across_seeds() {
    let (c, m) = dropout_family(1.0);
    let shown = table(&c);
    // Not statistical: at K = 12 the KS tests can reach the level 10⁻¹⁰.
    assert_eq!(c.level.tests, m, "{shown}");
    assert!(c.ks_skipped.is_none(), "{shown}");
    assert!(c.claims.iter().all(|x| !x.components.is_empty()), "{shown}");
    assert!(c.dispersion.is_some(), "{shown}");
    // The one statistical assertion: nothing flagged, spending the m
    // assertions' worth of α that flag_alpha was set to.
    common::record(m as u64, 1.0);
    assert!(c.calibrated(), "{shown}");
}

/// The dropout family's components that enter the dispersion test at `n`
/// draws on the generic path, counted from the registry: those of claims
/// conclusive at `n`, with a nonzero target, whose statistic is a mean
/// (Student-t) or a two-point count at or above its mean budget (the exact
/// tests' components standardized by their SE).
fn standardized_components(n: u64) -> usize {
    use dropmc::stats::{Statistic, mean_min_samples, two_point_skewness};
    let two_point_from =
        |r: f64| r > 0.0 && r < 1.0 && n >= mean_min_samples(two_point_skewness(r));
    registry()
        .into_iter()
        .filter(|c| c.family() == "dropout" && c.min_samples() <= n)
        .map(|c| {
            let statistic = c.statistic();
            c.analytic()
                .unwrap()
                .into_iter()
                .filter(|&target| {
                    target != 0.0
                        && match statistic {
                            Statistic::Mean { .. } => true,
                            Statistic::ScaledCount { keep } => two_point_from(keep),
                            Statistic::Indicator { trials: 1 } => two_point_from(target),
                            _ => false,
                        }
                })
                .count()
        })
        .sum()
}

#[test]
fn an_se_20_percent_too_small_is_flagged_by_the_dispersion() {
    // The reference check itself with every standard error multiplied by
    // 0.8 (real size of a mean test ≈ 2 300 α): it must not call the family
    // calibrated. The Planted claims run the generic path, where the 24
    // per-unit components with x ≠ 0 and the two sums' means are Student-t
    // tests (the variances of the sums are below their minimum budget and
    // left out), and two components of exact binomial tests (the kept
    // count's) enter standardized by their SE, their two-point statistic
    // being at or above its mean budget at 4 000 draws: M = 28 · 30 = 840
    // p-values. Under the plant z = t / 0.8, so D ≈ 1.5625 χ²₈₄₀ (mean
    // 1 312, SD 64), against the level-10⁻¹⁰ threshold of χ²₈₄₀, 1 128
    // (Wilson–Hilferty: 840 (1 − 2/7560 + 6.36 √(2/7560))³): a miss needs D
    // 2.9 SD below its mean, probability 2·10⁻³. No budget spent (power); at
    // the previous design (dispersion over all p-values, 12 seeds, 3·10⁴
    // draws) this plant gave D/M = 1.24, p = 9·10⁻⁴, not flagged.
    let (c, _) = dropout_family(0.8);
    let shown = table(&c);
    let dispersion = c.dispersion.expect("standardized p-values");
    assert_eq!(
        dispersion.components,
        standardized_components(SAMPLES),
        "{shown}"
    );
    assert!(dispersion.flagged, "{shown}");
    assert!(!c.calibrated(), "{shown}");
}

#[test]
fn a_wrong_analytic_value_is_flagged_at_two_seeds() {
    // Var z = x² p instead of x² p / q. At 20 000 draws the unit x = 3 has
    // the true Var 3.857 against the planted 2.700; the per-draw statistic
    // (z − z')²/2 ∈ {0, 9.18} with P = 2pq = 0.42 has SD 4.53, SE 0.032, so
    // z ≈ 36 under every seed: the claim fails both seeds with probability
    // 1 − Φ(6.47 − 36)² ≈ 1. Two failures of two have binomial tail
    // (5·10⁻¹⁰)² < 10⁻¹⁸, below any level. No budget spent (power).
    let planted = Planted {
        id: "planted.variance_without_q",
        analytic_factor: 1.0 - 0.3,
        ..Planted::budgeted(registered("dropout.variance"), 20_000)
    };
    let claims: [&dyn Claim; 1] = [&planted];
    let c = run(&claims, 2, 5200, 0.01);
    let shown = table(&c);
    let claim = &c.claims[0];
    assert_eq!(claim.failure.failures, 2, "{shown}");
    assert!(claim.failure.flagged && claim.flagged, "{shown}");
    assert!(!c.calibrated(), "{shown}");
    assert!(c.ks_skipped.is_some(), "{shown}");
    assert!(
        shown.contains("NOT calibrated: 1 flagged: planted.variance_without_q"),
        "{shown}"
    );
}

#[test]
fn a_halved_standard_error_is_flagged_by_ks() {
    // E[S] tested with half its standard error: z ~ N(0, 4), so the
    // p-values have CDF P(|Z| ≥ Φ⁻¹(1 − t/2)/2); at t = 0.2 that is
    // P(|Z| ≥ 0.64) = 0.522, so D ≥ 0.32. The claim fails a seed only with
    // P(|Z| > 3.23) = 1.2·10⁻³, which the failure count cannot tell from
    // noise at 200 seeds; the KS test can. Level 0.01/4 (one claim, one
    // component, pooled, dispersion): λ = √(ln(800)/2) = 1.83, i.e. D >
    // 1.83/√200 = 0.129 at K = 200, while D's sampling SD is about 0.5/√200 = 0.035:
    // a miss needs a 5-SD fluctuation. No budget spent (power).
    let planted = Planted {
        id: "planted.sum_mean_half_se",
        stderr_factor: 0.5,
        ..Planted::budgeted(registered("dropout.sum_mean"), 2_000)
    };
    let claims: [&dyn Claim; 1] = [&planted];
    let c = run(&claims, 200, 5300, 0.01);
    let shown = table(&c);
    let claim = &c.claims[0];
    assert!(!claim.components[0].mid_p, "{shown}");
    assert!(claim.components[0].flagged, "{shown}");
    assert!(!c.calibrated(), "{shown}");
}

#[test]
fn a_slightly_wrong_count_is_flagged_by_ks_on_mid_p_values() {
    // P(K = k) claimed 2 % too high. The kept count's components are
    // indicators tested by the exact binomial test, so KS reads its mid-p
    // values (within one atom, 0.006 here, of uniform under the null),
    // not its super-uniform p-values. At 20 000 draws component
    // 4 (P = 0.3241) has SE √(0.3241·0.6759/20000) = 0.0033 and a planted
    // shift of 0.0065, δ ≈ 1.96 SE: a seed fails only with
    // Φ(1.96 − 6.47) ≈ 3·10⁻⁶, but the p-values pile up near 0 (P(p ≤
    // 0.05) = P(|Z + 1.96| ≥ 1.96) = 0.516, so D ≥ 0.46). Level 0.01/10 (one
    // claim, 7 components, pooled, dispersion): λ = √(ln(2000)/2) = 1.95, D > 0.20 at K
    // = 100, against D's sampling SD of about 0.05: a miss needs a 5-SD
    // fluctuation. No budget spent (power).
    let planted = Planted {
        id: "planted.kept_count_2pct_high",
        analytic_factor: 1.02,
        ..Planted::budgeted(registered("dropout.kept_count"), 20_000)
    };
    let claims: [&dyn Claim; 1] = [&planted];
    let c = run(&claims, 100, 5400, 0.01);
    let shown = table(&c);
    let component = c.claims[0]
        .components
        .iter()
        .find(|x| x.component == 4)
        .expect("component 4");
    assert!(component.mid_p, "{shown}");
    assert!(component.flagged, "{shown}");
    assert!(!c.calibrated(), "{shown}");
}

#[test]
fn deterministic_rules_are_explained_not_ks_tested() {
    // No statistical assertion: only the notes are checked (the verdicts of
    // this run are not asserted, so it spends no false-alarm budget).
    let options = CalibrationOptions {
        replication: Replication {
            seeds: 2,
            first_seed: 5100,
            family: Some("semantics".into()),
        },
        samples: Some(2_000),
        flag_alpha: 0.01,
    };
    let c = calibrate(
        &dropmc::Registry::default(),
        &Subject::reference(),
        &options,
        |_, _| {},
    )
    .unwrap();
    let rule = c
        .claims
        .iter()
        .find(|x| x.id == "semantics.eval_identity")
        .expect("registered");
    assert!(rule.components.is_empty(), "{rule:?}");
    assert!(
        rule.note
            .as_deref()
            .is_some_and(|n| n.contains("deterministic")),
        "{rule:?}"
    );
    // Every claim without a KS-tested component says why.
    for claim in c.claims.iter().filter(|x| x.components.is_empty()) {
        assert!(claim.note.is_some(), "{claim:?}");
    }
}
