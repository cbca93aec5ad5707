//! `dropmc power`: the probability that the default suite catches a given
//! wrong implementation.
//!
//! # Two estimates
//!
//! * **Empirical.** Run the suite under K seeds against the wrong layer and
//!   count the seeds under which at least one claim failed. With K seeds the
//!   detection rate is known only to about `1/K`: every row shows the exact
//!   two-sided Clopper–Pearson interval at [`INTERVAL_LEVEL`] (with every
//!   seed detecting, its lower end is `(α/2)^(1/K)`, 0.29 at K = 3).
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
//! # Infinite z: certain detections, counted
//!
//! A violated deterministic rule, or an exact p-value that underflowed to 0,
//! has `z = ±∞`: that seed's rejection was certain, but `∞` is not an effect
//! size that can be averaged (a stand-in such as `10⁶` averaged over three
//! seeds turns one detection into a power of `1 − 10⁻¹²`). Each component
//! therefore keeps two things: the number `c` of seeds whose z was infinite,
//! and the mean `δ̄` of its finite z's over the other `K − c` seeds. It
//! misses under a seed only if that seed was not certain and the finite
//! test missed:
//!
//! ```text
//! miss = (1 − ĉ) · (1 − π(δ̄))
//! ```
//!
//! with `ĉ = c/K` for the point estimate (`from_effect`) and, for the
//! conservative figure at the default budget, `ĉ` the one-sided
//! Clopper–Pearson lower bound at [`INTERVAL_LEVEL`] and `δ̄` replaced by its
//! lower confidence bound (no finite seed: no finite evidence, `π = 0`). A
//! rule broken in every one of K seeds thus supports a power of only
//! `(1 − level)^(1/K)` at that level, which is what K seeds can show.
//!
//! # What runs
//!
//! The candidates are every mutant of the gallery ([`crate::conformance::mutants`]) and
//! the graded perturbations (`verify::perturb`, with the `cli` feature); the claims are the
//! conformance set (the registry's families that exercise a dropout layer
//! alone: dropout, semantics, attention, mask shape, ensemble), since several mutants (eval, backward,
//! attention, mask shape) are visible only to families other than
//! `dropout`. The reference runs first under the same seeds: its row is the
//! observed false-alarm rate, and a claim it fails is left out (at a capped
//! budget a rare component such as `P(K = 0) = p^8` can fail on a correct
//! layer). `dropmc power` caps each claim at [`crate::conformance::mutants::KILL_SAMPLES`]
//! draws by default and extrapolates to the default budget conservatively
//! (see [`PowerRow::at_default_budget`]); `--full` runs the default budget.
//!
//! # Journal and resume
//!
//! [`power_with`] can append every finished (subject, seed) run to a JSON
//! Lines journal ([`crate::conformance::verify::journal`]) as one [`RunRecord`] (per
//! claim: failed, errored, draws, each component's z), reference first,
//! then the candidates in order. Every row is computed from these records
//! alone, in the same order, so a run resumed with
//! [`journal::Mode::Resume`] ends with the same bits as one that was not
//! interrupted.

mod evidence;
mod interval;
mod table;

pub use interval::{clopper_pearson, clopper_pearson_lower};
#[cfg(feature = "cli")]
pub(crate) use table::push_wrapped;
pub use table::{DetectableEffect, detectable_effects, effects_table, table, table_fitted};

use serde::{Deserialize, Serialize};

use crate::claims::{Claim, check};
use crate::conformance;
use crate::conformance::verify::Replication;
use crate::conformance::verify::journal::{self, Journal};
use crate::engine::{Budget, derive_seed};
use crate::error::Error;
use crate::ops::{DropoutLayer, Subject};
use crate::registry::Registry;
use evidence::measure;

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

/// Every mutant of the gallery ([`crate::conformance::mutants::gallery`]) as a candidate.
pub fn mutant_candidates() -> Vec<Candidate<'static>> {
    crate::conformance::mutants::gallery()
        .into_iter()
        .map(|m| Candidate {
            name: m.id.to_string(),
            layer: m.layer,
            equivalent: m.equivalent,
        })
        .collect()
}

/// The confidence level of every interval on a rate over seeds (the
/// detection rate, the rate of certain detections).
pub const INTERVAL_LEVEL: f64 = 0.95;

/// A rate over seeds with its exact Clopper–Pearson interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SeedRate {
    /// Seeds where the event happened.
    pub count: u64,
    pub seeds: u64,
    /// Two-sided interval at [`level`](Self::level).
    pub lower: f64,
    pub upper: f64,
    pub level: f64,
}

impl SeedRate {
    /// `count` of `seeds` with its two-sided interval at [`INTERVAL_LEVEL`].
    pub fn new(count: u64, seeds: u64) -> Self {
        let (lower, upper) = clopper_pearson(count, seeds, INTERVAL_LEVEL);
        SeedRate {
            count,
            seeds,
            lower,
            upper,
            level: INTERVAL_LEVEL,
        }
    }
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
    /// The detection rate with its exact two-sided Clopper–Pearson interval.
    pub detected: SeedRate,
    /// Seeds under which some usable component had an infinite z (a
    /// violated rule or an underflowed exact p-value): certain detections,
    /// counted, never averaged (module docs).
    pub certain: SeedRate,
    /// Power from the mean effect sizes at the run's budget (module docs).
    pub from_effect: f64,
    /// A conservative power at each claim's default budget: per component
    /// the lower confidence bound `max(0, |z̄| − z_c/√m)` on `|δ|` from its
    /// `m` finite z's at the run's budget, scaled by `√(n_default / n_run)`
    /// (the z of a fixed deviation grows as the square root of the draws),
    /// and the one-sided Clopper–Pearson lower bound on its rate of certain
    /// detections. Taking the bounds, not the means, keeps the scaled-up
    /// noise of the reference's components from posing as power.
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
    /// Each component's z; `None` for an infinite z (a violated rule or an
    /// underflowed exact p-value): a certain detection, counted apart and
    /// never averaged (module docs; also what JSON can hold).
    pub z: Vec<Option<f64>>,
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
                .map(|t| t.z.is_finite().then_some(t.z))
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
mod tests;
