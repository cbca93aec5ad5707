//! The conformance kit: run dropmc's claims against any dropout layer.
//!
//! # Plugging in your own layer
//!
//! 1. Implement [`DropoutLayer`] for your type: `forward_train` (write the
//!    output and the keep mask, drawing every random number from the `rng`
//!    you are given), `forward_eval` (must not touch `rng`) and `backward`
//!    (given the forward pass's mask). Each gets its buffers as one value
//!    ([`TrainPass`](crate::ops::TrainPass),
//!    [`EvalPass`](crate::ops::EvalPass),
//!    [`BackwardPass`](crate::ops::BackwardPass)) followed by `p` and the
//!    generator. Reject an invalid drop rate with
//!    [`crate::Error::InvalidRate`], `p = 1` included
//!    (dropmc's rule: there is no inverted scale at `q = 0`), before
//!    checking the buffers (the pass's `check_lengths`).
//! 2. The attention and mask-shape claims call
//!    [`DropoutLayer::forward_attention`] and
//!    [`DropoutLayer::forward_positions`]; their defaults build on your
//!    `forward_train`. Override them if your attention dropout or your
//!    shared-over-positions dropout is a separate code path.
//! 3. Call [`run`] and read the verdicts:
//!
//! ```
//! use dropmc::conformance::{self, Options};
//! use dropmc::ops::InvertedDropout; // your layer here
//!
//! // A capped budget keeps the example quick; the default budgets are what
//! // the test gate uses.
//! let options = Options { samples: Some(200_000), ..Options::default() };
//! let result = conformance::run(&InvertedDropout, &options).unwrap();
//! print!("{}", conformance::table(&result));
//! assert!(result.failed().is_empty());
//! ```
//!
//! `examples/conformance.rs` does this for a layer written outside the
//! crate (`cargo run --release --example conformance`).
//!
//! # What runs
//!
//! The claims of the registry's families that exercise a dropout layer
//! alone ([`crate::registry::Family::exercises_dropout_alone`]: the
//! moments, the semantics rules, attention, mask shape and the ensemble
//! gap in the default registry), each at its default budget unless [`Options::samples`] caps it,
//! from the streams `derive_seed(seed, claim id)` as in the report. Each
//! verdict is the claim's z-test at the suite's per-assertion level
//! ([`crate::stats::critical_z`]); a deterministic rule (bit-exact output,
//! zero generator draws) fails on a single violation.

pub mod mutants;
pub mod pilot;
pub mod report;
pub mod verify;

use serde::Serialize;

use crate::claims::{Claim, ClaimResult, Verdict, check};
use crate::engine::DEFAULT_SEED;
use crate::engine::{Budget, derive_seed};
use crate::error::Error;
use crate::ops::{DropoutLayer, Subject};
use crate::registry::Registry;

/// What to run.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Run seed.
    pub seed: u64,
    /// Caps every claim's draws at this many (`None`: default budgets).
    ///
    /// A cap below a claim's default can make a claim with a rare component
    /// fail on a correct layer (`dropout.kept_count` has `P(K = 0) = p^8 ≈
    /// 7·10⁻⁵` and needs about 10⁵ draws to see it); the kill matrix
    /// therefore runs the reference at the same budget and ignores claims it
    /// fails.
    pub samples: Option<u64>,
    /// Run the whole registry, not only the families that exercise a
    /// dropout layer alone.
    pub all_families: bool,
    /// Run only these families (overrides the two above when set).
    pub families: Option<&'static [&'static str]>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            seed: DEFAULT_SEED,
            samples: None,
            all_families: false,
            families: None,
        }
    }
}

/// The verdict on one claim.
#[derive(Debug, Clone, Serialize)]
pub struct ClaimVerdict {
    pub id: &'static str,
    pub family: &'static str,
    pub verdict: Verdict,
    /// The `z` of the worst component (`±inf` for a violated exact rule,
    /// `None` when the claim could not be evaluated).
    pub z: Option<f64>,
    /// Why the claim could not be evaluated, if it could not.
    pub error: Option<String>,
    /// Everything known about the run.
    pub result: ClaimResult,
}

/// The verdicts on one implementation.
#[derive(Debug, Clone, Serialize)]
pub struct Conformance {
    pub subject: String,
    pub seed: u64,
    pub verdicts: Vec<ClaimVerdict>,
}

impl Conformance {
    /// True when every claim passed.
    pub fn passed(&self) -> bool {
        self.verdicts.iter().all(|v| v.verdict == Verdict::Pass)
    }

    /// The ids of the claims whose test rejects at any budget (a failure,
    /// or an inconclusive claim whose rejection is below its minimum budget).
    pub fn rejected(&self) -> Vec<&'static str> {
        self.verdicts
            .iter()
            .filter(|v| v.result.rejected())
            .map(|v| v.id)
            .collect()
    }

    /// The ids of the failed claims.
    pub fn failed(&self) -> Vec<&'static str> {
        self.verdicts
            .iter()
            .filter(|v| v.verdict == Verdict::Fail)
            .map(|v| v.id)
            .collect()
    }
}

/// The claims of the default registry that `options` selects.
pub fn claims(options: &Options) -> Vec<&'static dyn Claim> {
    claims_in(&Registry::default(), options)
}

/// The claims of `registry` that `options` selects, in registry order.
pub fn claims_in(registry: &Registry, options: &Options) -> Vec<&'static dyn Claim> {
    registry
        .families()
        .iter()
        .filter(|f| match options.families {
            Some(only) => only.contains(&f.name()),
            None => options.all_families || f.exercises_dropout_alone(),
        })
        .flat_map(|f| f.claims().iter().copied())
        .collect()
}

/// The draws claim `claim` gets under `options`.
pub fn samples_for(claim: &dyn Claim, options: &Options) -> u64 {
    let default = claim.default_samples();
    options
        .samples
        .map_or(default, |cap| default.min(cap.max(2)))
}

/// Runs the selected claims of the default registry against `layer`.
pub fn run(layer: &dyn DropoutLayer, options: &Options) -> Result<Conformance, Error> {
    run_subject(&Subject::with_dropout(layer), options)
}

/// Runs the selected claims of the default registry against a whole subject.
pub fn run_subject(subject: &Subject, options: &Options) -> Result<Conformance, Error> {
    run_in(&Registry::default(), subject, options)
}

/// Runs the selected claims of `registry` against `subject`.
pub fn run_in(
    registry: &Registry,
    subject: &Subject,
    options: &Options,
) -> Result<Conformance, Error> {
    let verdicts = claims_in(registry, options)
        .into_iter()
        .map(|claim| {
            let budget = Budget::new(
                samples_for(claim, options),
                derive_seed(options.seed, claim.id()),
            )?;
            let result = check(claim, subject, budget);
            let z = result.worst().map(|k| result.tests[k].z);
            Ok(ClaimVerdict {
                id: claim.id(),
                family: claim.family(),
                verdict: result.verdict,
                z,
                error: result.error.clone(),
                result,
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    Ok(Conformance {
        subject: subject.name().to_string(),
        seed: options.seed,
        verdicts,
    })
}

/// The verdicts as a table: claim, verdict, worst z.
pub fn table(run: &Conformance) -> String {
    let width = run.verdicts.iter().map(|v| v.id.len()).max().unwrap_or(0);
    let mut out = format!("conformance of {} (seed {})\n", run.subject, run.seed);
    for v in &run.verdicts {
        let verdict = match v.verdict {
            Verdict::Pass => "pass",
            Verdict::Fail => "FAIL",
            Verdict::Inconclusive => "inconclusive",
        };
        let detail = match (v.z, &v.error) {
            (_, Some(e)) => format!("error: {e}"),
            (Some(z), None) => format!("worst z = {z:.2}"),
            (None, None) => String::new(),
        };
        out.push_str(&format!("{:width$}  {verdict}  {detail}\n", v.id));
    }
    let failed = run.failed().len();
    out.push_str(&format!(
        "{} of {} claims pass.\n",
        run.verdicts.len() - failed,
        run.verdicts.len()
    ));
    out
}
