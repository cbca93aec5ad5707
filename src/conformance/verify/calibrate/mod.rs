//! `dropmc calibrate`: a claim set under K independent seeds against one
//! subject, and the tests that decide whether its verdicts are calibrated.
//!
//! # What is tested (all at one per-test level)
//!
//! Every test below is a valid level-`L` test of "the claim's z-tests have
//! their stated size", with `L = flag_alpha / m` and `m` = claims +
//! components + 2 (one failure-count test per claim, one KS test per
//! component, the pooled KS test, the dispersion test); by the union bound a calibrated claim
//! set is flagged with probability at most `flag_alpha`
//! ([`KS_FAMILY_ALPHA`] = 0.01 at the command line). Tests that are skipped
//! spend nothing, and `m` does not depend on the data.
//!
//! 1. **Failure count** ([`FailureTest`]). A claim with `k` components
//!    fails one seed with probability at most `α_c = Σ_k f_k α` under H0
//!    (`f_k` the size factor the suite charges component `k`; union
//!    bound over its z-tests at the per-assertion level `α = 10⁻¹⁰`,
//!    [`crate::stats::assertion_alpha`]), independently across seeds, so its
//!    failure count satisfies `P(F ≥ f) ≤ P(Binomial(K, α_c) ≥ f)`: the
//!    exact binomial tail (statrs `Binomial::sf`) is the p-value, and the
//!    claim is flagged when it is below `L`.
//!
//!    Threshold: `P(F ≥ 1) = 1 − (1 − α_c)^K ≤ K α_c`, so a single failing
//!    seed is flagged whenever `K α_c < L`. At the command line (`L =
//!    0.01/m`; the whole registry has `m = 272`, `L = 3.7·10⁻⁵`; the dropout
//!    family `m = 53`, `L = 1.9·10⁻⁴`) that is `K < L / (k·10⁻¹⁰)`: for every
//!    claim with up to 36 components any `F ≥ 1` is flagged for all
//!    `K ≤ 10⁴`. Two failures are flagged when `P(F ≥ 2) ≤ C(K, 2) α_c² < L`,
//!    true for any `K ≤ 10⁴` and `k ≤ 10` even at `L = 10⁻¹⁰` (`C(10⁴, 2) ·
//!    10⁻¹⁸ = 5·10⁻¹¹`); a claim of `k ≤ 10` components failing both of
//!    `K = 2` seeds has tail `α_c² ≤ 10⁻¹⁸` and is flagged at any level
//!    used here. Each claim's smallest flagged `F` is reported
//!    ([`FailureTest::threshold`]). Deterministic rules (violation counts,
//!    `α_c` a bound on a probability that is in fact 0) are counted alike.
//!
//! 2. **Per-component KS** of the K p-values against `U(0, 1)`: the
//!    p-values of the test the report ran. A continuous test's is its own
//!    two-sided p-value (Student-t: uniform up to the normal approximation
//!    of the t-ratio). An exact binomial test's p-value (indicators, scaled
//!    counts on the fast path) is discrete and super-uniform, so KS reads
//!    the same test's **mid-p value** instead
//!    ([`crate::stats::binomial_mid_p`]: the doubled tail less the observed
//!    count's own probability), whose cdf under H0 is within the largest
//!    atom of the count's law of the uniform one (at most 0.04 for a count
//!    with standard deviation above 10, against the KS threshold near 0.4
//!    at 12 seeds). A KS test at level `L` can only flag if its
//!    smallest attainable p-value, at `D = 1`, is below `L`; it is skipped,
//!    and the result says so, for `K` below that many seeds
//!    ([`crate::stats::min_sample_for`]: 5 seeds at `L = 3.7·10⁻⁵`, 11 at
//!    `10⁻¹⁰`). The failure-count test needs no such minimum.
//!
//! 3. **Pooled KS** of all those p-values together, at `L` too.
//!
//! 4. **Dispersion** ([`DispersionTest`]) of the tests that standardize by
//!    a standard error. KS looks at the p-values one component at a time
//!    and is blind to a standard error that is wrong by a modest factor at
//!    few seeds (an SE 20 % too small, real size ≈ 2 300 α, was called
//!    calibrated at 12 seeds). The second moment of the standardized
//!    statistics sees it: each Student-t p-value the report produced is
//!    turned into its squared normal score `z*² = Φ⁻¹(p/2)²`, which is
//!    exactly `χ²₁` when `p` is uniform (so the t-test's degrees of freedom
//!    are accounted for by using its p-value, not `t²`), and
//!
//!    ```text
//!    D = Σ_{standardized components, seeds} z*²  ~  χ²_M  under H0,
//!    M = number of those p-values
//!    ```
//!
//!    (independent across seeds and claims, whose streams are derived
//!    apart; the per-unit components of one claim use independent masks).
//!    The p-value is `P(χ²_M ≥ D)`, flagged below `L`.
//!
//!    The components whose test is `t = (estimate − target) / SE`
//!    ([`crate::stats::Statistic::standardizes_by_stderr`]) enter with
//!    their report p-values. An exact binomial test does not divide by the
//!    estimate's standard error, but the table's `±` and the minimum
//!    detectable effect do, so its component enters too, as
//!    `z = (estimate − target) / SE` of its two-point statistic, where that
//!    standardization is valid: at or above the minimum budget of a mean
//!    test with the statistic's two-point skewness (the Cramér rule of
//!    [`crate::stats`]; below it the component stays out). Its exact
//!    test's own p-values must not be used here: they are super-uniform,
//!    `E z*² < 1`, and mixing them in dilutes the statistic:
//!    with every SE 20 % too small the dropout family in CI (generic path,
//!    12 seeds) had `D/M = 1.24` over all 396 p-values, `p = 9·10⁻⁴`, not
//!    flagged at `10⁻¹⁰`; on the fast path (`calibrate --family dropout`)
//!    the SE-free exact tests are 31 of the 35 components and `D/M` was
//!    0.95 (`p = 0.77`) over all 420 p-values, 1.18 (`p = 0.18`) over the
//!    48 Student-t ones (with the exact tests' components standardized by
//!    their SE, 420 values at 12 seeds). An SE `f` times
//!    too small gives `E D / M = 1/f² = 1.56` for `f = 0.8`; the test
//!    flags it when `√(M/2) · 0.56` exceeds the level's normal quantile
//!    plus 1.56 times the power's: `M ≳ 330` at `L = 1.9·10⁻⁴` and 99 %
//!    power, `M ≳ 630` at `L = 10⁻¹⁰` (the CI test runs 28 standardized
//!    components × 30 seeds = 840).
//!
//! A claim inconclusive under some seed (below its minimum budget) has no
//! stated size there: it is reported with its tests but never flagged, and
//! its p-values stay out of the pooled and dispersion tests. The
//! failure-count null of a claim uses the size the suite charges each of
//! its components ([`crate::stats::Statistic::size_factor`]: `2α` for a mean,
//! `α` for an exact binomial test), not `k α`.
//!
//! Components with no spread under any seed (a unit with `x = 0`; a
//! deterministic rule's violation count) have no p-value distribution and
//! are judged by the failure count alone; the output notes them.
//!
//! # Journal and resume
//!
//! With a [`journal::Mode`] every finished seed is appended to a JSON Lines
//! file ([`journal`]) as one [`SeedRecord`] holding everything the result is
//! computed from (per component: estimate, standard error, draws, target,
//! z-test p-value; per claim: failed or not). The result is a function of the
//! records alone ([`summarize`]), so a run resumed from its journal ends with
//! the same bits as one that was not interrupted.

mod summary;
mod table;

pub use summary::{DispersionTest, FailureTest, FlagLevel, summarize};
pub use table::table;

use serde::{Deserialize, Serialize};

use crate::claims::{Claim, Verdict};
use crate::conformance::report::{self, Options};
use crate::conformance::verify::Replication;
use crate::conformance::verify::journal::{self, Journal};
use crate::error::Error;
use crate::ops::Subject;
use crate::registry::Registry;
use crate::stats::KsTest;

/// Default probability that a calibrated claim set has any test flagged.
pub const KS_FAMILY_ALPHA: f64 = 0.01;

/// What to run.
#[derive(Debug, Clone)]
pub struct CalibrationOptions {
    /// The K seeds and the family (`None`: the whole registry).
    pub replication: Replication,
    /// Overrides each claim's default sample count.
    pub samples: Option<u64>,
    /// Probability of any false flag on a calibrated claim set, split by
    /// Bonferroni over the tests (module docs).
    pub flag_alpha: f64,
}

/// One component under one seed, as the journal keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComponentRecord {
    pub value: f64,
    pub stderr: f64,
    pub n: u64,
    pub target: f64,
    /// The report test's two-sided p-value.
    pub p: f64,
    /// The mid-p value of the report's exact binomial test
    /// ([`crate::stats::Statistic::mid_p`]); `None` for a continuous test.
    #[serde(default)]
    pub mid_p: Option<f64>,
    /// True when the report's test divided by [`stderr`](Self::stderr)
    /// (Student-t on a mean): the components the dispersion test reads.
    #[serde(default)]
    pub standardized: bool,
}

/// One claim under one seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimRecord {
    pub id: String,
    pub failed: bool,
    /// Below the claim's minimum budget (its verdict `inconclusive`).
    #[serde(default)]
    pub inconclusive: bool,
    pub components: Vec<ComponentRecord>,
}

/// One finished seed: a journal line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeedRecord {
    pub seed: u64,
    pub claims: Vec<ClaimRecord>,
}

/// One component's p-values across seeds.
#[derive(Debug, Clone, Serialize)]
pub struct ComponentCalibration {
    pub component: usize,
    /// Number of p-values (seeds under which it had a p-value).
    pub p_values: usize,
    /// True when the p-values are the mid-p values of an exact binomial
    /// test (module docs, test 2).
    pub mid_p: bool,
    /// `None` when skipped: too few p-values for KS to reach the level.
    pub ks: Option<KsTest>,
    pub flagged: bool,
}

/// One claim across seeds.
#[derive(Debug, Clone, Serialize)]
pub struct ClaimCalibration {
    pub id: String,
    pub kind: &'static str,
    pub failure: FailureTest,
    pub components: Vec<ComponentCalibration>,
    /// True when the failure count or any component's KS test is flagged
    /// (never below the minimum budget).
    pub flagged: bool,
    /// Inconclusive under some seed (below its minimum budget): its tests
    /// have no stated size there, so it is reported but never flagged, and
    /// its p-values stay out of the pooled and dispersion tests.
    pub below_minimum_budget: bool,
    /// Components without spread under every seed: no p-values.
    pub constant_components: usize,
    /// What is structurally special about the claim's p-values.
    pub note: Option<String>,
}

/// The calibration result.
#[derive(Debug, Clone, Serialize)]
pub struct Calibration {
    pub subject: String,
    pub seeds: u64,
    pub first_seed: u64,
    pub family_alpha: f64,
    /// The split of `flag_alpha` over the tests (its fields appear inline in
    /// the JSON).
    #[serde(flatten)]
    pub level: FlagLevel,
    /// Why the per-component KS tests were skipped, if they were.
    pub ks_skipped: Option<String>,
    /// Seeds under which at least one claim failed.
    pub failed_runs: u64,
    /// `FAMILY_ALPHA · K`: the expected failing runs of the whole suite.
    pub expected_failed_runs: f64,
    /// Fraction of all p-values below 0.05 (0.05 expected).
    pub fraction_below_5_percent: f64,
    /// KS test of all p-values pooled (`None`: too few or none).
    pub pooled: Option<KsTest>,
    pub pooled_flagged: bool,
    /// Dispersion of the standardized statistics (`None`: no p-values).
    pub dispersion: Option<DispersionTest>,
    pub claims: Vec<ClaimCalibration>,
}

impl Calibration {
    /// True when no test is flagged (no claim, not the pooled p-values).
    pub fn calibrated(&self) -> bool {
        !self.pooled_flagged
            && !self.dispersion.is_some_and(|d| d.flagged)
            && self.claims.iter().all(|c| !c.flagged)
    }

    /// The flagged claims.
    pub fn flagged(&self) -> Vec<&ClaimCalibration> {
        self.claims.iter().filter(|c| c.flagged).collect()
    }
}

/// Runs the claims of `registry` that `options.replication.family` selects
/// under `options.replication.seeds` seeds against `subject`; `progress(done, total)` is
/// called after each claim of each seed.
pub fn calibrate(
    registry: &Registry,
    subject: &Subject,
    options: &CalibrationOptions,
    progress: impl FnMut(u64, u64),
) -> Result<Calibration, Error> {
    let selection = Options {
        seed: None,
        samples: options.samples,
        family: options.replication.family.clone(),
    };
    let claims = report::select(registry, &selection)?;
    calibrate_claims(&claims, subject, options, None, progress)
}

/// The journal header of a calibration: subject, options and claim ids.
pub fn header(
    claims: &[&dyn Claim],
    subject: &Subject,
    options: &CalibrationOptions,
) -> serde_json::Value {
    journal::header(
        "dropmc calibrate",
        serde_json::json!({
            "subject": subject.name(),
            "seeds": options.replication.seeds,
            "first_seed": options.replication.first_seed,
            "samples": options.samples,
            "family": options.replication.family,
            "flag_alpha": options.flag_alpha,
            "claims": claims.iter().map(|c| c.id()).collect::<Vec<_>>(),
        }),
    )
}

/// Runs `claims` under `options.replication.seeds` seeds against `subject` (the
/// `family` option is ignored: the claims are given), writing each finished
/// seed to the journal `journal` names and, with [`journal::Mode::Resume`],
/// first reading the seeds it already holds.
pub fn calibrate_claims(
    claims: &[&dyn Claim],
    subject: &Subject,
    options: &CalibrationOptions,
    journal: Option<&journal::Mode>,
    mut progress: impl FnMut(u64, u64),
) -> Result<Calibration, Error> {
    let plan = &options.replication;
    if plan.seeds < 2 {
        return Err(Error::InvalidOption {
            what: format!("--seeds {}: calibration needs at least 2 seeds", plan.seeds),
        });
    }
    if claims.is_empty() {
        return Err(Error::InvalidOption {
            what: "calibration needs at least one claim".into(),
        });
    }
    let mut journal = journal
        .map(|mode| Journal::open(mode, &header(claims, subject, options)))
        .transpose()?;
    let mut records = match journal.as_mut() {
        Some(j) => read_records(j, claims, options)?,
        None => Vec::new(),
    };
    let per_seed = claims.len() as u64;
    let total = plan.seeds * per_seed;
    progress(records.len() as u64 * per_seed, total);
    for i in records.len() as u64..plan.seeds {
        let seed = plan.seed(i);
        let results = report::run_claims(claims, subject, seed, options.samples, |done, _| {
            progress(i * per_seed + done as u64, total)
        })?;
        let record = SeedRecord {
            seed,
            claims: results
                .iter()
                .map(|r| ClaimRecord {
                    id: r.id.to_string(),
                    failed: r.verdict == Verdict::Fail,
                    inconclusive: r.verdict == Verdict::Inconclusive,
                    components: r
                        .tests
                        .iter()
                        .zip(&r.estimate)
                        .zip(&r.target)
                        .map(|((t, e), &target)| ComponentRecord {
                            value: e.value,
                            stderr: e.stderr,
                            n: e.n,
                            target,
                            p: t.p_value,
                            mid_p: r.statistic.mid_p(*e, target),
                            standardized: r.statistic.standardizes_by_stderr(),
                        })
                        .collect(),
                })
                .collect(),
        };
        if let Some(j) = journal.as_mut() {
            j.append(&record)?;
        }
        records.push(record);
    }
    Ok(summarize(&records, claims, options, subject.name()))
}

/// The finished seeds of a resumed journal, checked against the run.
fn read_records(
    journal: &mut Journal,
    claims: &[&dyn Claim],
    options: &CalibrationOptions,
) -> Result<Vec<SeedRecord>, Error> {
    let plan = &options.replication;
    let mut records = Vec::new();
    for (i, value) in journal.take_finished().into_iter().enumerate() {
        let record: SeedRecord =
            serde_json::from_value(value).map_err(|e| journal.bad_record(i, e))?;
        let expected = plan.seed(i as u64);
        let ids_match = record.claims.len() == claims.len()
            && record
                .claims
                .iter()
                .zip(claims)
                .all(|(r, c)| r.id == c.id());
        if i as u64 >= plan.seeds || record.seed != expected || !ids_match {
            return Err(journal.bad_record(
                i,
                format!("expected seed {expected} with this run's claims in order"),
            ));
        }
        records.push(record);
    }
    Ok(records)
}
