//! `dropmc calibrate`: the registry under K independent seeds.
//!
//! On a correct implementation every exact claim's z-test has uniform
//! p-values (up to the normal approximation), so across K seeds:
//!
//! * the number of failing runs should be consistent with `FAMILY_ALPHA · K`
//!   (essentially zero);
//! * each component's K p-values should pass a Kolmogorov-Smirnov test of
//!   uniformity. A component that does not is flagged: the usual causes are a
//!   leading-order formula tested as if exact, a biased estimator, or a wrong
//!   standard error (too small → p-values pile up near 0, too large → near 1);
//! * the pooled p-values of all components together must be uniform too.
//!
//! Some p-values are structurally not uniform, and the output says why
//! beside the claim (the `note`) instead of flagging it:
//!
//! * components whose estimate has no spread (a unit with `x = 0`, whose
//!   output is always 0) have no p-value distribution and are skipped;
//! * a deterministic rule (bit-exact output, zero draws in eval: a
//!   violation count with stderr 0) has no p-values at all; it fails on a
//!   single violation, which a correct layer never produces;
//! * a component whose p-values tie across seeds is a discrete statistic at
//!   this budget (a rare count, such as `P(K = 0) = p^8` at a capped
//!   `--samples`); KS assumes a continuous distribution, so it is reported,
//!   not flagged.
//!
//! Flagging uses a Kolmogorov-Smirnov family level (`flag_alpha`, by default
//! [`KS_FAMILY_ALPHA`]) split by Bonferroni over the components tested and
//! the pooled test, so a calibrated suite raises a false flag with
//! probability at most that level.

use serde::Serialize;

use crate::claims::Verdict;
use crate::error::Error;
use crate::ops::Subject;
use crate::report::{self, Options};
use crate::stats::{FAMILY_ALPHA, KsTest, ks_uniform};

/// Default probability that a calibrated suite has any component (or the
/// pooled p-values) flagged.
pub const KS_FAMILY_ALPHA: f64 = 0.01;

/// What to run.
#[derive(Debug, Clone)]
pub struct CalibrationOptions {
    /// Number of independent seeds, K.
    pub seeds: u64,
    /// Seeds used are `first_seed .. first_seed + K`.
    pub first_seed: u64,
    /// Overrides each claim's default sample count.
    pub samples: Option<u64>,
    /// Only this family.
    pub family: Option<String>,
    /// Probability of any false flag on a calibrated suite, split by
    /// Bonferroni over the components tested and the pooled test.
    pub flag_alpha: f64,
}

/// One component's p-values across seeds.
#[derive(Debug, Clone, Serialize)]
pub struct ComponentCalibration {
    pub component: usize,
    pub ks: KsTest,
    pub flagged: bool,
    /// Tied p-values across seeds: the statistic is discrete at this budget
    /// (a rare count), so its p-values are not continuous-uniform and the KS
    /// test does not apply; such a component is reported, not flagged.
    pub discrete: bool,
}

/// One claim across seeds.
#[derive(Debug, Clone, Serialize)]
pub struct ClaimCalibration {
    pub id: &'static str,
    pub kind: &'static str,
    /// Seeds under which the claim failed.
    pub failures: u64,
    pub components: Vec<ComponentCalibration>,
    /// True when any component's p-values are flagged as non-uniform.
    pub flagged: bool,
    /// Components whose estimate had no spread (stderr 0) under some seed,
    /// so they have no p-value distribution.
    pub constant_components: usize,
    /// Why some or all of the claim's p-values are structurally not uniform
    /// (a deterministic rule, constant or discrete components).
    pub note: Option<String>,
}

/// The calibration result.
#[derive(Debug, Clone, Serialize)]
pub struct Calibration {
    pub seeds: u64,
    pub first_seed: u64,
    pub family_alpha: f64,
    /// Seeds under which at least one claim failed.
    pub failed_runs: u64,
    /// `FAMILY_ALPHA · K`, the expected number of failing runs (an upper bound).
    pub expected_failed_runs: f64,
    /// Per-test KS level: `flag_alpha / (components tested + 1)`.
    pub ks_alpha: f64,
    /// Fraction of all p-values below 0.05 (0.05 expected).
    pub fraction_below_5_percent: f64,
    /// KS test of all p-values pooled.
    pub pooled: Option<KsTest>,
    pub claims: Vec<ClaimCalibration>,
}

impl Calibration {
    /// True when no run failed, no component is flagged and the pooled
    /// p-values are uniform at `ks_alpha`.
    pub fn calibrated(&self) -> bool {
        self.failed_runs == 0
            && self.claims.iter().all(|c| !c.flagged)
            && self.pooled.is_none_or(|t| t.p_value >= self.ks_alpha)
    }
}

/// Runs the selected registry under `options.seeds` seeds against `subject`.
/// `progress(done, total)` is called after each seed.
pub fn calibrate(
    subject: &Subject,
    options: &CalibrationOptions,
    mut progress: impl FnMut(u64, u64),
) -> Result<Calibration, Error> {
    if options.seeds < 2 {
        return Err(Error::InvalidOption {
            what: format!(
                "--seeds {}: calibration needs at least 2 seeds",
                options.seeds
            ),
        });
    }
    // p_values[claim][component][seed]
    let mut p_values: Vec<Vec<Vec<f64>>> = Vec::new();
    let mut claims: Vec<ClaimCalibration> = Vec::new();
    let mut failed_runs = 0;
    for i in 0..options.seeds {
        let run_options = Options {
            seed: Some(options.first_seed + i),
            samples: options.samples,
            family: options.family.clone(),
        };
        let report = report::run(subject, &run_options)?;
        if !report.passed() {
            failed_runs += 1;
        }
        for (c, result) in report.results.iter().enumerate() {
            if i == 0 {
                claims.push(ClaimCalibration {
                    id: result.id,
                    kind: result.kind.label(),
                    failures: 0,
                    components: Vec::new(),
                    flagged: false,
                    constant_components: 0,
                    note: result.tests.is_empty().then(|| {
                        "deterministic rule: no p-values (it counts violations and fails on one, \
                         so a correct layer never fails it); not KS-tested"
                            .to_string()
                    }),
                });
                p_values.push(vec![Vec::new(); result.tests.len()]);
            }
            if result.verdict == Verdict::Fail {
                claims[c].failures += 1;
            }
            for (k, (test, est)) in result.tests.iter().zip(&result.estimate).enumerate() {
                if est.stderr > 0.0 {
                    p_values[c][k].push(test.p_value);
                } else if i == 0 {
                    claims[c].constant_components += 1;
                }
            }
        }
        progress(i + 1, options.seeds);
    }
    let tested: usize = p_values.iter().flatten().filter(|v| !v.is_empty()).count();
    let ks_alpha = options.flag_alpha / (tested + 1) as f64;
    let mut pooled_values = Vec::new();
    for (claim, per_component) in claims.iter_mut().zip(&p_values) {
        for (k, values) in per_component.iter().enumerate() {
            pooled_values.extend_from_slice(values);
            if let Some(ks) = ks_uniform(values) {
                let mut sorted = values.clone();
                sorted.sort_by(f64::total_cmp);
                let discrete = sorted.windows(2).any(|w| w[0] == w[1]);
                let flagged = !discrete && ks.p_value < ks_alpha;
                claim.flagged |= flagged;
                claim.components.push(ComponentCalibration {
                    component: k,
                    ks,
                    flagged,
                    discrete,
                });
            }
        }
    }
    for claim in &mut claims {
        let discrete: Vec<String> = claim
            .components
            .iter()
            .filter(|x| x.discrete)
            .map(|x| x.component.to_string())
            .collect();
        let mut notes: Vec<String> = claim.note.take().into_iter().collect();
        if claim.components.is_empty() && claim.constant_components > 0 && notes.is_empty() {
            notes.push(
                "deterministic rule: a violation count with stderr 0 (it fails on a single \
                 violation, so a correct layer never fails it); no p-values, not KS-tested"
                    .to_string(),
            );
        } else if claim.constant_components > 0 {
            notes.push(format!(
                "{} component(s) with zero spread (a constant estimate): no p-value",
                claim.constant_components
            ));
        }
        if !discrete.is_empty() {
            notes.push(format!(
                "component(s) {}: tied p-values, a discrete statistic at this budget \
                 (a rare count; raise --samples): reported, not flagged",
                discrete.join(", ")
            ));
        }
        claim.note = (!notes.is_empty()).then(|| notes.join("; "));
    }
    let below = pooled_values.iter().filter(|&&p| p < 0.05).count();
    Ok(Calibration {
        seeds: options.seeds,
        first_seed: options.first_seed,
        family_alpha: FAMILY_ALPHA,
        failed_runs,
        expected_failed_runs: FAMILY_ALPHA * options.seeds as f64,
        ks_alpha,
        fraction_below_5_percent: below as f64 / pooled_values.len().max(1) as f64,
        pooled: ks_uniform(&pooled_values),
        claims,
    })
}

/// The calibration as a readable table.
pub fn table(c: &Calibration) -> String {
    let mut out = format!(
        "{} seeds ({}..{}): {} failing runs (expected at most {:.1e} at family alpha {:.0e})\n",
        c.seeds,
        c.first_seed,
        c.first_seed + c.seeds - 1,
        c.failed_runs,
        c.expected_failed_runs,
        c.family_alpha
    );
    if let Some(t) = c.pooled {
        out.push_str(&format!(
            "pooled p-values: n = {}, KS D = {:.4}, p = {:.3}; {:.2} % below 0.05 (5 % expected)\n",
            t.n,
            t.d,
            t.p_value,
            100.0 * c.fraction_below_5_percent
        ));
    }
    out.push_str(&format!("per-component KS level {:.1e}\n\n", c.ks_alpha));
    let width = c.claims.iter().map(|x| x.id.len()).max().unwrap_or(5);
    out.push_str(&format!(
        "{:width$}  {:13}  {:>8}  {:>10}  {:>9}  flag\n",
        "claim", "kind", "failures", "components", "min KS p"
    ));
    for claim in &c.claims {
        let min_p = claim
            .components
            .iter()
            .map(|x| x.ks.p_value)
            .reduce(f64::min)
            .map_or("-".to_string(), |p| format!("{p:.3}"));
        out.push_str(&format!(
            "{:width$}  {:13}  {:>8}  {:>10}  {:>9}  {}\n",
            claim.id,
            claim.kind,
            claim.failures,
            claim.components.len(),
            min_p,
            if claim.flagged { "NON-UNIFORM" } else { "ok" }
        ));
        if let Some(note) = &claim.note {
            out.push_str(&format!("{:width$}    note: {note}\n", ""));
        }
    }
    out.push_str(&format!(
        "\n{}\n",
        if c.calibrated() {
            "calibrated: no failures, every p-value distribution uniform"
        } else {
            "NOT calibrated: see the flagged claims"
        }
    ));
    out
}
