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

mod table;

#[cfg(feature = "cli")]
pub(crate) use table::push_wrapped;
pub use table::{DetectableEffect, detectable_effects, effects_table, table, table_fitted};

use serde::{Deserialize, Serialize};
use statrs::distribution::DiscreteCDF;

use crate::claims::{Claim, check};
use crate::conformance;
use crate::conformance::verify::Replication;
use crate::conformance::verify::journal::{self, Journal};
use crate::engine::{Budget, derive_seed};
use crate::error::Error;
use crate::ops::{DropoutLayer, Subject};
use crate::registry::Registry;
use crate::stats::critical_z;

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

/// Exact one-sided lower Clopper–Pearson bound for `k` successes in `n`
/// trials at tail probability `tail`: the `θ` with `P(X ≥ k | θ) = tail`,
/// `X ~ Binomial(n, θ)` (0 for `k = 0`; `tail^(1/n)` for `k = n`).
pub fn clopper_pearson_lower(k: u64, n: u64, tail: f64) -> f64 {
    if k == 0 || n == 0 {
        return 0.0;
    }
    if k >= n {
        return tail.powf(1.0 / n as f64);
    }
    // P(X ≥ k | θ) increases with θ: bisect on it. 100 halvings of [0, 1]
    // end below the spacing of f64 near any θ in (0, 1).
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        let Ok(binomial) = statrs::distribution::Binomial::new(mid, n) else {
            return lo;
        };
        if binomial.sf(k - 1) < tail {
            lo = mid
        } else {
            hi = mid
        }
    }
    lo
}

/// Exact two-sided Clopper–Pearson interval for `k` successes in `n` trials
/// at confidence `level`: each end leaves `(1 − level)/2` in its tail. The
/// upper end is the lower end of the failures, `1 − lower(n − k)`.
pub fn clopper_pearson(k: u64, n: u64, level: f64) -> (f64, f64) {
    let tail = (1.0 - level) / 2.0;
    let k = k.min(n);
    (
        clopper_pearson_lower(k, n, tail),
        1.0 - clopper_pearson_lower(n - k, n, tail),
    )
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

/// One component's evidence over the seeds: its finite z's, summed, and
/// the seeds where its z was infinite (module docs).
#[derive(Debug, Clone, Copy, Default)]
struct ComponentEvidence {
    finite_sum: f64,
    finite: u64,
    certain: u64,
}

impl ComponentEvidence {
    fn add(&mut self, z: Option<f64>) {
        match z {
            Some(z) => {
                self.finite_sum += z;
                self.finite += 1;
            }
            None => self.certain += 1,
        }
    }

    /// The probability that this component misses under one seed: the
    /// point estimate `(1 − c/K)(1 − π(δ̄))`, or with `scale` the
    /// conservative one at the default budget (lower bounds on the rate of
    /// certain detections and on `|δ|`, the latter scaled by `scale`).
    fn miss(&self, scale: Option<f64>) -> f64 {
        let seeds = self.finite + self.certain;
        let certain = match scale {
            None => self.certain as f64 / seeds as f64,
            Some(_) => clopper_pearson_lower(self.certain, seeds, 1.0 - INTERVAL_LEVEL),
        };
        let finite_miss = if self.finite == 0 {
            // No finite z: the point estimate has certain = 1; the bound has
            // no evidence on the finite test and credits it nothing.
            1.0
        } else {
            let m = self.finite as f64;
            let mean = self.finite_sum / m;
            let delta = match scale {
                None => mean,
                // Lower confidence bound on |δ| at the per-assertion level
                // (the mean of m unit-variance z's has SD 1/√m), scaled.
                Some(s) => (mean.abs() - critical_z() / m.sqrt()).max(0.0) * s,
            };
            1.0 - rejection_probability(delta)
        };
        (1.0 - certain) * finite_miss
    }
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
    let mut certain_seeds = 0;
    let mut killed: Vec<(String, u64)> = Vec::new();
    // Per (claim, component), and the draws' scale to the default budget.
    let mut evidence: Vec<Vec<ComponentEvidence>> = vec![Vec::new(); claims.len()];
    let mut scale: Vec<f64> = vec![1.0; claims.len()];
    let mut errored = false;
    for run in runs {
        let mut detected = false;
        let mut certain = false;
        for (c, r) in run.claims.iter().enumerate() {
            if unusable.contains(&r.id.as_str()) {
                continue;
            }
            errored |= r.errored;
            if evidence[c].is_empty() {
                evidence[c] = vec![ComponentEvidence::default(); r.z.len()];
            }
            scale[c] = (claims[c].default_samples() as f64 / r.samples.max(1) as f64)
                .sqrt()
                .max(1.0);
            for (e, z) in evidence[c].iter_mut().zip(&r.z) {
                e.add(*z);
                certain |= z.is_none();
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
        certain_seeds += u64::from(certain);
    }
    let seeds = runs.len() as u64;
    let power_at = |scaled: bool| {
        if errored {
            return 1.0; // a claim that cannot even be evaluated fails under every seed
        }
        let miss: f64 = evidence
            .iter()
            .zip(&scale)
            .flat_map(|(components, &s)| {
                components.iter().map(move |e| e.miss(scaled.then_some(s)))
            })
            .product();
        1.0 - miss
    };
    PowerRow {
        subject: candidate.name.clone(),
        equivalent: candidate.equivalent.is_some(),
        seeds,
        detections,
        empirical: detections as f64 / seeds as f64,
        detected: SeedRate::new(detections, seeds),
        certain: SeedRate::new(certain_seeds, seeds),
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
    fn clopper_pearson_bounds_match_closed_forms() {
        // k = n: tail^(1/n); k = 0: 0.
        assert_eq!(clopper_pearson_lower(10, 10, 0.05), 0.05f64.powf(0.1));
        assert_eq!(clopper_pearson_lower(0, 10, 0.05), 0.0);
        // The bisection finds the root of statrs' binomial tail, itself a
        // regularized incomplete beta accurate to about 10⁻¹⁴ near these
        // arguments; the tail's slope here is about 2, so θ is within half
        // that. 10⁻¹³ tells a correct root from any other formula.
        const ROOT_ROOM: f64 = 1e-13;
        // k = 1 of 2: solve 1 − (1−θ)² = 0.05, θ = 1 − √0.95 = 0.025321.
        let root = 1.0 - 0.95f64.sqrt();
        assert!((clopper_pearson_lower(1, 2, 0.05) - root).abs() <= ROOT_ROOM);
        // Two-sided at 95 %, 1 of 3 seeds: the lower end solves
        // 1 − (1−θ)³ = 0.025, θ = 1 − 0.975^(1/3); the upper end leaves
        // P(X ≤ 1 | θ) = (1−θ)³ + 3θ(1−θ)² = 0.025.
        let (lo, hi) = clopper_pearson(1, 3, 0.95);
        let lo_exact = 1.0 - 0.975f64.cbrt();
        assert!((lo - lo_exact).abs() <= ROOT_ROOM, "{lo} {lo_exact}");
        let below = (1.0 - hi).powi(3) + 3.0 * hi * (1.0 - hi).powi(2);
        assert!((below - 0.025).abs() <= ROOT_ROOM, "{hi} {below}");
        // 0 of 3: [0, 1 − 0.025^(1/3)]; 3 of 3: [0.025^(1/3), 1].
        let (zero_lo, zero_hi) = clopper_pearson(0, 3, 0.95);
        assert_eq!(zero_lo, 0.0);
        assert!((zero_hi - (1.0 - 0.025f64.cbrt())).abs() <= 4.0 * f64::EPSILON);
        let (all_lo, all_hi) = clopper_pearson(3, 3, 0.95);
        assert!((all_lo - 0.025f64.cbrt()).abs() <= 4.0 * f64::EPSILON);
        assert_eq!(all_hi, 1.0);
    }

    #[test]
    fn an_infinite_z_in_one_seed_of_three_is_one_certain_detection_not_a_mean() {
        // One seed with an infinite z and two with z = 0.5: a power near
        // 1/3, never the 1 − 10⁻¹² a ±10⁶ stand-in averaged into z̄ gives.
        let mut e = ComponentEvidence::default();
        for z in [None, Some(0.5), Some(0.5)] {
            e.add(z);
        }
        let point = 1.0 - e.miss(None);
        let expected = 1.0 - (2.0 / 3.0) * (1.0 - rejection_probability(0.5));
        assert!(
            (point - expected).abs() <= 4.0 * f64::EPSILON,
            "{point} {expected}"
        );
        assert!(point < 0.34, "{point}");

        // The same through a row and its table: one claim, three seeds.
        let registry = Registry::default();
        let claim = selected_claims(
            &registry,
            &PowerOptions {
                replication: Replication {
                    seeds: 3,
                    first_seed: 1,
                    family: None,
                },
                samples: None,
            },
        )[0];
        let runs: Vec<RunRecord> = [None, Some(0.5), Some(0.5)]
            .into_iter()
            .enumerate()
            .map(|(seed, z)| RunRecord {
                subject: "planted".into(),
                seed: seed as u64,
                claims: vec![ClaimOutcome {
                    id: claim.id().into(),
                    failed: z.is_none(),
                    errored: false,
                    samples: claim.default_samples(),
                    z: vec![z],
                }],
            })
            .collect();
        let layer = crate::ops::InvertedDropout;
        let row = measure(&Candidate::new(&layer), &[claim], &[], &runs);
        assert!(
            (row.from_effect - expected).abs() <= 4.0 * f64::EPSILON,
            "{row:?}"
        );
        assert_eq!((row.detected.count, row.certain.count), (1, 1), "{row:?}");
        let shown = table_fitted(
            &PowerRun {
                samples_cap: None,
                claims: vec![claim.id()],
                reference: row.clone(),
                rows: vec![row],
                unusable: vec![],
            },
            200,
        );
        // 1 of 3 at 95 %: the textbook interval [0.0084, 0.9057].
        assert!(shown.contains("1/3       [0.008, 0.906]"), "{shown}");
        assert!(!shown.contains("1e-12"), "{shown}");
        // The bound at the default budget credits the certain seed only its
        // one-sided lower bound 1 − 0.95^(1/3) and the finite ones only the
        // size α (their bound 0.5 − z_c/√2 on |δ| is below 0).
        let bound = 1.0 - e.miss(Some(100.0));
        let certain_lo = 1.0 - 0.95f64.cbrt();
        let expected = 1.0 - (1.0 - certain_lo) * (1.0 - rejection_probability(0.0));
        assert!(
            (bound - expected).abs() <= 4.0 * f64::EPSILON,
            "{bound} {expected}"
        );
    }
}
