//! `dropmc power`: the probability that the default suite catches a given
//! wrong implementation.
//!
//! # Two estimates
//!
//! * **Empirical.** Run the suite under K seeds against the wrong layer and
//!   count the seeds under which at least one claim failed. With K seeds the
//!   detection rate is known only to about `1/K`; with every seed detecting,
//!   the exact one-sided 95 % lower bound on the power is `0.05^(1/K)`.
//! * **From the effect size.** A claim component whose test statistic has
//!   mean `δ` (in standard errors) rejects with probability
//!   `π(δ) = Φ(|δ| − z_c) + Φ(−|δ| − z_c)`, `z_c` the critical value. The mean
//!   z over the K seeds estimates `δ`. Claims read independent streams, so the
//!   suite misses only if every component misses:
//!   `power = 1 − Π_components (1 − π(δ̄))` (components of one claim are
//!   treated as independent, exact for per-unit claims whose units have
//!   independent masks). This is the figure that can show a power of 0.999
//!   or more, which no affordable number of seeds can.
//!
//! # What runs
//!
//! The candidates are every mutant of the gallery ([`crate::mutants`]) and
//! the graded perturbations ([`crate::verify::perturb`]); the claims are the
//! conformance set (the registry's families that exercise a dropout layer
//! alone: dropout, semantics, attention, mask shape, ensemble), since several mutants (eval, backward,
//! attention, mask shape) are visible only to families other than
//! `dropout`. The reference runs first under the same seeds: its row is the
//! observed false-alarm rate, and a claim it fails is left out (at a capped
//! budget a rare component such as `P(K = 0) = p^8` can fail on a correct
//! layer). `dropmc power` caps each claim at [`crate::mutants::KILL_SAMPLES`]
//! draws by default and extrapolates to the default budget conservatively
//! (see [`PowerRow::at_default_budget`]); `--full` runs the default budget.
//!
//! # Journal and resume
//!
//! [`power_with`] can append every finished (subject, seed) run to a JSON
//! Lines journal ([`crate::verify::journal`]) as one [`RunRecord`] (per
//! claim: failed, errored, draws, each component's z), reference first,
//! then the candidates in order. Every row is computed from these records
//! alone, in the same order, so a run resumed with
//! [`journal::Mode::Resume`] ends with the same bits as one that was not
//! interrupted.

mod table;

pub(crate) use table::push_wrapped;
pub use table::{DetectableEffect, detectable_effects, effects_table, table, table_fitted};

use serde::{Deserialize, Serialize};
use statrs::distribution::DiscreteCDF;

use crate::claims::{Claim, check};
use crate::conformance;
use crate::engine::{Budget, derive_seed};
use crate::error::Error;
use crate::ops::{DropoutLayer, Subject};
use crate::registry::Registry;
use crate::stats::critical_z;
use crate::verify::Replication;
use crate::verify::journal::{self, Journal};

/// What to run.
#[derive(Debug, Clone)]
pub struct PowerOptions {
    /// The seeds each candidate runs under, and the family (`None`: the
    /// conformance families, those that exercise a dropout layer alone).
    pub replication: Replication,
    /// Caps every claim's draws (`None`: each claim's default budget).
    pub samples: Option<u64>,
}

/// One implementation whose power is measured.
pub struct Candidate<'a> {
    pub name: String,
    pub layer: &'a dyn DropoutLayer,
    /// Why no claim can tell it from the reference, if so.
    pub equivalent: Option<&'static str>,
}

impl<'a> Candidate<'a> {
    /// A non-equivalent candidate named after its layer.
    pub fn new(layer: &'a dyn DropoutLayer) -> Self {
        Candidate {
            name: layer.name().to_string(),
            layer,
            equivalent: None,
        }
    }
}

/// Every mutant of the gallery ([`crate::mutants::gallery`]) as a candidate.
pub fn mutant_candidates() -> Vec<Candidate<'static>> {
    crate::mutants::gallery()
        .into_iter()
        .map(|m| Candidate {
            name: m.id.to_string(),
            layer: m.layer,
            equivalent: m.equivalent,
        })
        .collect()
}

/// How one wrong implementation fares.
#[derive(Debug, Clone, Serialize)]
pub struct PowerRow {
    pub subject: String,
    /// True for an equivalent mutant (no claim can catch it).
    pub equivalent: bool,
    pub seeds: u64,
    /// Seeds under which some claim failed.
    pub detections: u64,
    /// `detections / seeds`.
    pub empirical: f64,
    /// Exact one-sided 95 % lower confidence bound on the detection rate
    /// (Clopper-Pearson).
    pub empirical_lower_95: f64,
    /// Power from the mean effect sizes at the run's budget (module docs).
    pub from_effect: f64,
    /// A conservative power at each claim's default budget: per component
    /// the lower confidence bound `max(0, |z̄| − z_c/√K)` on `|δ|` at the
    /// run's budget, scaled by `√(n_default / n_run)` (the z of a fixed
    /// deviation grows as the square root of the draws). Taking the bound,
    /// not `z̄`, keeps the scaled-up noise of the reference's components from
    /// posing as power.
    pub at_default_budget: f64,
    /// Claims that failed under at least one seed, with the count.
    pub killed_by: Vec<(String, u64)>,
}

/// The power run: the reference's false-alarm row, one row per candidate,
/// and the claims left out because the reference itself fails them at the
/// capped budget (a rare component, see [`conformance::Options::samples`]).
#[derive(Debug, Clone, Serialize)]
pub struct PowerRun {
    pub samples_cap: Option<u64>,
    pub claims: Vec<&'static str>,
    pub reference: PowerRow,
    pub rows: Vec<PowerRow>,
    pub unusable: Vec<&'static str>,
}

impl PowerRun {
    /// The non-equivalent candidates whose power at the default budget
    /// (from the effect sizes) is below `level`.
    pub fn below(&self, level: f64) -> Vec<&PowerRow> {
        self.rows
            .iter()
            .filter(|r| !r.equivalent && r.at_default_budget < level)
            .collect()
    }
}

pub use crate::stats::rejection_probability;

/// One-sided 95 % lower Clopper-Pearson bound for `k` successes in `n`.
pub fn clopper_pearson_lower(k: u64, n: u64) -> f64 {
    if k == 0 {
        return 0.0;
    }
    if k == n {
        return 0.05f64.powf(1.0 / n as f64);
    }
    // Bisection on P(X >= k | θ) = 0.05, X ~ Binomial(n, θ).
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        let Ok(binomial) = statrs::distribution::Binomial::new(mid, n) else {
            return lo;
        };
        let tail = 1.0 - binomial.cdf(k - 1);
        if tail < 0.05 { lo = mid } else { hi = mid }
    }
    lo
}

/// The claims of `registry` a power run uses.
fn selected_claims(registry: &Registry, options: &PowerOptions) -> Vec<&'static dyn Claim> {
    let family = options.replication.family.as_deref();
    let all = conformance::Options {
        all_families: family.is_some(),
        ..conformance::Options::default()
    };
    conformance::claims_in(registry, &all)
        .into_iter()
        .filter(|c| family.is_none_or(|f| c.family() == f))
        .collect()
}

/// One claim under one seed, as the journal keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimOutcome {
    pub id: String,
    pub failed: bool,
    pub errored: bool,
    pub samples: u64,
    /// Each component's z; a violated deterministic rule's `±∞` is written
    /// as `±10⁶` (what the effect-size power uses, and finite for JSON).
    pub z: Vec<f64>,
}

/// One candidate under one seed: a journal line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub subject: String,
    pub seed: u64,
    pub claims: Vec<ClaimOutcome>,
}

/// One seed's results of every selected claim against `layer`.
fn run_once(
    candidate: &Candidate,
    claims: &[&'static dyn Claim],
    seed: u64,
    samples: Option<u64>,
) -> Result<RunRecord, Error> {
    let subject = Subject::with_dropout(candidate.layer);
    let options = conformance::Options {
        seed,
        samples,
        ..conformance::Options::default()
    };
    let outcome = |claim: &dyn Claim| -> Result<ClaimOutcome, Error> {
        let budget = Budget::new(
            conformance::samples_for(claim, &options),
            derive_seed(seed, claim.id()),
        )?;
        let r = check(claim, &subject, budget);
        Ok(ClaimOutcome {
            id: r.id.to_string(),
            // A rejection, even below the claim's minimum budget (where the
            // verdict is inconclusive): the reference runs under the same
            // rule first, so its row is the observed false-alarm rate of
            // exactly this criterion.
            failed: r.rejected(),
            errored: r.error.is_some(),
            samples: r.samples,
            z: r.tests
                .iter()
                .map(|t| {
                    if t.z.is_finite() {
                        t.z
                    } else {
                        t.z.signum() * 1e6
                    }
                })
                .collect(),
        })
    };
    Ok(RunRecord {
        subject: candidate.name.clone(),
        seed,
        claims: claims
            .iter()
            .map(|&c| outcome(c))
            .collect::<Result<_, _>>()?,
    })
}

/// One candidate's row from its runs (one per seed), ignoring the claims in
/// `unusable`.
fn measure(
    candidate: &Candidate,
    claims: &[&'static dyn Claim],
    unusable: &[&'static str],
    runs: &[RunRecord],
) -> PowerRow {
    let mut detections = 0;
    let mut killed: Vec<(String, u64)> = Vec::new();
    // Sum of z per (claim, component), and the draws behind it.
    let mut z_sums: Vec<Vec<f64>> = vec![Vec::new(); claims.len()];
    let mut scale: Vec<f64> = vec![1.0; claims.len()];
    let mut errored = false;
    for run in runs {
        let mut detected = false;
        for (c, r) in run.claims.iter().enumerate() {
            if unusable.contains(&r.id.as_str()) {
                continue;
            }
            errored |= r.errored;
            if z_sums[c].is_empty() {
                z_sums[c] = vec![0.0; r.z.len()];
            }
            scale[c] = (claims[c].default_samples() as f64 / r.samples.max(1) as f64)
                .sqrt()
                .max(1.0);
            for (sum, z) in z_sums[c].iter_mut().zip(&r.z) {
                *sum += z;
            }
            if r.failed {
                detected = true;
                match killed.iter_mut().find(|(id, _)| *id == r.id) {
                    Some((_, n)) => *n += 1,
                    None => killed.push((r.id.clone(), 1)),
                }
            }
        }
        detections += u64::from(detected);
    }
    let seeds = runs.len() as f64;
    let power_at = |scaled: bool| {
        if errored {
            return 1.0; // a claim that cannot even be evaluated fails under every seed
        }
        let miss: f64 = z_sums
            .iter()
            .zip(&scale)
            .flat_map(|(sums, &s)| {
                sums.iter().map(move |z| {
                    let mean = z / seeds;
                    let delta = if scaled {
                        // Lower confidence bound on |δ| at the per-assertion
                        // level (the mean of K unit-variance z's has SD 1/√K),
                        // scaled to the default budget.
                        (mean.abs() - critical_z() / seeds.sqrt()).max(0.0) * s
                    } else {
                        mean
                    };
                    1.0 - rejection_probability(delta)
                })
            })
            .product();
        1.0 - miss
    };
    PowerRow {
        subject: candidate.name.clone(),
        equivalent: candidate.equivalent.is_some(),
        seeds: runs.len() as u64,
        detections,
        empirical: detections as f64 / seeds,
        empirical_lower_95: clopper_pearson_lower(detections, runs.len() as u64),
        from_effect: power_at(false),
        at_default_budget: power_at(true),
        killed_by: killed,
    }
}

/// Measures the power of the selected claims against each candidate, after
/// running the reference under the same seeds (its row is the observed
/// false-alarm rate; a claim it fails is left out as unusable at this cap).
pub fn power(
    registry: &Registry,
    candidates: &[Candidate],
    options: &PowerOptions,
    progress: impl FnMut(u64, u64),
) -> Result<PowerRun, Error> {
    power_with(registry, candidates, options, None, progress)
}

/// The journal header of a power run: options, candidates and claims.
fn header(
    all: &[&Candidate],
    claims: &[&'static dyn Claim],
    options: &PowerOptions,
) -> serde_json::Value {
    journal::header(
        "dropmc power",
        serde_json::json!({
            "seeds": options.replication.seeds,
            "first_seed": options.replication.first_seed,
            "samples": options.samples,
            "family": options.replication.family,
            "subjects": all.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            "claims": claims.iter().map(|c| c.id()).collect::<Vec<_>>(),
        }),
    )
}

/// [`power`], writing each finished (candidate, seed) run to the journal
/// `journal` names (reference first, then the candidates in order, seeds in
/// order) and, with [`journal::Mode::Resume`], first reading the runs it
/// already holds. The result is a function of the runs alone, so a resumed
/// run ends with the same bits as one that was not interrupted.
pub fn power_with(
    registry: &Registry,
    candidates: &[Candidate],
    options: &PowerOptions,
    journal: Option<&journal::Mode>,
    mut progress: impl FnMut(u64, u64),
) -> Result<PowerRun, Error> {
    let plan = &options.replication;
    if plan.seeds == 0 {
        return Err(Error::InvalidOption {
            what: "--seeds 0: power needs at least 1 seed".into(),
        });
    }
    let claims = selected_claims(registry, options);
    if claims.is_empty() {
        return Err(Error::InvalidOption {
            what: format!(
                "--family {}: no conformance claim (a claim that exercises a dropout layer) has this family",
                plan.family.as_deref().unwrap_or_default()
            ),
        });
    }
    let reference = Candidate::new(&crate::ops::InvertedDropout);
    let all: Vec<&Candidate> = std::iter::once(&reference).chain(candidates).collect();
    let mut journal = journal
        .map(|mode| Journal::open(mode, &header(&all, &claims, options)))
        .transpose()?;
    let finished = journal
        .as_mut()
        .map(Journal::take_finished)
        .unwrap_or_default();
    let total = plan.seeds * all.len() as u64;
    if finished.len() as u64 > total {
        return Err(Error::InvalidOption {
            what: format!(
                "the journal holds {} runs, more than this run's {total}",
                finished.len()
            ),
        });
    }
    let mut finished = finished.into_iter().enumerate();
    let mut runs: Vec<Vec<RunRecord>> = Vec::with_capacity(all.len());
    for (index, candidate) in all.iter().enumerate() {
        let mut own = Vec::with_capacity(plan.seeds as usize);
        for i in 0..plan.seeds {
            let seed = plan.seed(i);
            let record = match (finished.next(), journal.as_mut()) {
                (Some((k, value)), Some(j)) => {
                    let record: RunRecord =
                        serde_json::from_value(value).map_err(|e| j.bad_record(k, e))?;
                    if record.subject != candidate.name || record.seed != seed {
                        return Err(j.bad_record(
                            k,
                            format!("expected subject {} under seed {seed}", candidate.name),
                        ));
                    }
                    record
                }
                (_, j) => {
                    let record = run_once(candidate, &claims, seed, options.samples)?;
                    if let Some(j) = j {
                        j.append(&record)?;
                    }
                    record
                }
            };
            own.push(record);
            progress(index as u64 * plan.seeds + i + 1, total);
        }
        runs.push(own);
    }
    let mut reference_row = measure(&reference, &claims, &[], &runs[0]);
    reference_row.subject = "reference (false alarms)".into();
    let unusable: Vec<&'static str> = claims
        .iter()
        .map(|c| c.id())
        .filter(|id| reference_row.killed_by.iter().any(|(k, _)| k == id))
        .collect();
    let rows = all[1..]
        .iter()
        .zip(&runs[1..])
        .map(|(candidate, own)| measure(candidate, &claims, &unusable, own))
        .collect();
    Ok(PowerRun {
        samples_cap: options.samples,
        claims: claims.iter().map(|c| c.id()).collect(),
        reference: reference_row,
        rows,
        unusable,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejection_probability_is_alpha_at_zero_and_one_half_at_the_critical_value() {
        let alpha = crate::stats::assertion_alpha();
        assert!((rejection_probability(0.0) - alpha).abs() < 1e-3 * alpha);
        assert!((rejection_probability(critical_z()) - 0.5).abs() < 1e-9);
    }

    #[test]
    fn clopper_pearson_lower_bounds_match_closed_forms() {
        // k = n: 0.05^(1/n); k = 0: 0.
        assert_eq!(clopper_pearson_lower(10, 10), 0.05f64.powf(0.1));
        assert_eq!(clopper_pearson_lower(0, 10), 0.0);
        // k = 1 of n = 1 is the k = n case; k = 1 of 2: solve 1 − (1−θ)² = 0.05,
        // θ = 1 − √0.95 = 0.025321.
        assert!((clopper_pearson_lower(1, 2) - (1.0 - 0.95f64.sqrt())).abs() < 1e-9);
    }
}
