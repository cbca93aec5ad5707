//! The mutant gallery: known-wrong dropout implementations, each encoding one
//! mistake that the seeds report people make.
//!
//! The gallery is one table ([`gallery`], in `gallery.rs`): per mutant its
//! mistake, the source describing it, the claims that must kill it, and
//! whether it is equivalent. Each mutant's layer is the reference
//! [`InvertedDropout`] with one [`Deviation`] patched in ([`Deviant`]);
//! everything else is the reference's. [`kill_matrix`] runs the conformance
//! claims ([`crate::conformance`]) against each and records which claims
//! kill it; [`to_json`] and [`table`] print the result.
//!
//! Two mutants are **equivalent**: no observation can tell them from the
//! reference, so no claim can or should kill them. [`Mutant::equivalent`]
//! gives the reason; they are listed, not counted as survivors.

mod gallery;
mod patch;
mod power;
mod render;

pub use gallery::gallery;
pub use patch::{Deviant, Deviation, Keep, Scale};
pub use power::rejection_power;
pub use render::{table, to_json};

use serde::Serialize;

use crate::claims::Verdict;
use crate::conformance::{self, Options};
use crate::error::Error;
use crate::ops::{DropoutLayer, InvertedDropout};

/// The kill matrix's default cap on the draws per claim: each claim runs
/// `min(its default budget, KILL_SAMPLES)` draws. Every kill in the gallery
/// is certain well below it (see `tests/mutants.rs` for the stated power).
pub const KILL_SAMPLES: u64 = 20_000;

/// One known-wrong implementation.
pub struct Mutant {
    /// Stable identifier.
    pub id: &'static str,
    /// The mistake, in one line.
    pub mistake: &'static str,
    /// Where the mistake is described: a section of a file in this
    /// repository (`docs/formulas.md §…`).
    pub source: &'static str,
    /// The claims that name this mistake directly: each must kill it (empty
    /// for an equivalent mutant). Other claims may kill it too.
    pub must_kill: &'static [&'static str],
    /// Why no observation can distinguish it from the reference, if so.
    pub equivalent: Option<&'static str>,
    /// For a subtle mutant: its true effect on one claim, so the kill
    /// matrix can state the power of that kill.
    pub effect: Option<Effect>,
    /// The implementation.
    pub layer: &'static dyn DropoutLayer,
}

/// The true deviation `E[estimate] − target` a mutant causes in one claim,
/// per component, known in closed form.
#[derive(Clone, Copy)]
pub struct Effect {
    pub claim: &'static str,
    pub effect: fn() -> Vec<f64>,
}

/// The power with which a claim kills a subtle mutant at the run's budget:
/// `λ = |effect| / SE` (largest over components) and
/// `power = Φ(λ − z_crit) + Φ(−λ − z_crit)` ([`rejection_power`]).
#[derive(Debug, Clone, Serialize)]
pub struct PowerStatement {
    pub claim: &'static str,
    pub samples: u64,
    /// The claim's minimum budget: below it the claim is inconclusive and
    /// kills nothing, so no power is stated (`power` and `lambda` are 0).
    pub min_samples: u64,
    pub effect: f64,
    pub stderr: f64,
    pub lambda: f64,
    pub power: f64,
    /// `Φ(z_crit − λ)`, the chance of missing (`1 − power` up to the
    /// negligible other tail), which `power` itself rounds away.
    pub miss: f64,
}

fn power_statement(effect: &Effect, run: &conformance::Conformance) -> Option<PowerStatement> {
    let verdict = run.verdicts.iter().find(|v| v.id == effect.claim)?;
    let effects = (effect.effect)();
    // The standard error the test judges by: `MDE / (critical + z_power)`,
    // which is the estimate's own SE for a mean and the null's SE for an
    // exact binomial test (whose sample SE can be 0 at a few draws).
    let se = |k: usize| {
        let t = &verdict.result.tests[k];
        let judged = t.mde / (t.critical + crate::stats::power_z());
        if judged.is_finite() && judged > 0.0 {
            judged
        } else {
            verdict.result.estimate[k].stderr
        }
    };
    let (k, lambda) = effects
        .iter()
        .take(
            verdict
                .result
                .tests
                .len()
                .min(verdict.result.estimate.len()),
        )
        .enumerate()
        .map(|(k, e)| (k, e.abs() / se(k)))
        .fold(
            (0, 0.0),
            |best, (k, l)| if l > best.1 { (k, l) } else { best },
        );
    verdict.result.tests.get(k)?;
    let stderr = se(k);
    let decided = verdict.verdict != Verdict::Inconclusive;
    Some(PowerStatement {
        claim: effect.claim,
        samples: verdict.result.samples,
        min_samples: verdict.result.min_samples,
        effect: effects[k],
        stderr,
        lambda: if decided { lambda } else { 0.0 },
        power: if decided {
            rejection_power(effects[k], stderr)
        } else {
            0.0
        },
        miss: if decided {
            power::miss_probability(lambda)
        } else {
            1.0
        },
    })
}

/// A claim that killed a mutant and the `z` of its worst component
/// (`None` when the claim errored, e.g. on a non-finite output).
#[derive(Debug, Clone, Serialize)]
pub struct Kill {
    pub claim: &'static str,
    pub z: Option<f64>,
    /// Why `z` is infinite, when it is.
    pub infinite: Option<InfiniteZ>,
    pub error: Option<String>,
}

/// What an infinite `z` stands for: the three ways a test refutes its
/// target with no finite score.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InfiniteZ {
    /// A rule that must hold on every draw was violated (a count of
    /// violations is compared with 0 exactly).
    RuleViolated,
    /// Every draw gave the same value and it is not the target (a zero
    /// standard error: the comparison is exact, up to rounding).
    NoSpread,
    /// The exact p-value is below the smallest positive double, so its
    /// normal score `Φ⁻¹(1 − p/2)` is infinite: the draws did vary.
    PValueUnderflow,
}

impl InfiniteZ {
    /// Why component `k` of `result` has an infinite `z` (`None` when it
    /// does not).
    pub fn of(result: &crate::claims::ClaimResult, k: usize) -> Option<InfiniteZ> {
        let test = result.tests.get(k)?;
        if test.z.is_finite() {
            return None;
        }
        Some(match result.statistic {
            crate::stats::Statistic::Violations => InfiniteZ::RuleViolated,
            _ if result.estimate.get(k).is_some_and(|e| e.stderr == 0.0) => InfiniteZ::NoSpread,
            _ => InfiniteZ::PValueUnderflow,
        })
    }

    /// The words the kill table prints after the `z`.
    pub fn explanation(self) -> &'static str {
        match self {
            InfiniteZ::RuleViolated => "a rule that holds on every draw was violated",
            InfiniteZ::NoSpread => "no spread: every draw gave the same value, not the target",
            InfiniteZ::PValueUnderflow => {
                "exact p-value underflowed to 0 (below the smallest double): its normal score is infinite"
            }
        }
    }
}

/// One row of the kill matrix.
#[derive(Debug, Clone, Serialize)]
pub struct KillRow {
    pub id: &'static str,
    pub mistake: &'static str,
    pub source: &'static str,
    pub equivalent: bool,
    pub reason: Option<&'static str>,
    pub kills: Vec<Kill>,
    /// The stated power of the kill, for the subtle mutants.
    pub power: Option<PowerStatement>,
}

impl KillRow {
    /// True when a non-equivalent mutant was killed, or an equivalent one
    /// (rightly) survived.
    pub fn as_expected(&self) -> bool {
        self.equivalent == self.kills.is_empty()
    }
}

/// The kill matrix: every mutant's row, and the claims that could not be
/// used because the reference itself fails them at this budget (a claim
/// with a rare component, such as `P(K = 0) = p^8`, needs enough draws to
/// see it; at each claim's default budget the list is empty).
#[derive(Debug, Clone, Serialize)]
pub struct KillMatrix {
    pub rows: Vec<KillRow>,
    pub unusable: Vec<&'static str>,
}

/// Runs the conformance claims against the reference, then against every
/// mutant. A claim kills a mutant when its verdict on the mutant is
/// [`Verdict::Fail`] and the reference does not fail it at the same budget
/// and seed. An inconclusive claim (below its minimum budget) kills
/// nothing, whatever its `z`: its test's size is not the stated one.
pub fn kill_matrix(options: &Options) -> Result<KillMatrix, Error> {
    kill_matrix_with_progress(options, |_, _| {})
}

/// [`kill_matrix`], calling `progress(done, total)` after the reference and
/// after each mutant.
pub fn kill_matrix_with_progress(
    options: &Options,
    mut progress: impl FnMut(usize, usize),
) -> Result<KillMatrix, Error> {
    let mutants = gallery();
    let total = mutants.len() + 1;
    // A kill is a failed verdict: a rejection at the per-assertion level by
    // a test at or above its minimum budget (or a deterministic refutation).
    let unusable = conformance::run(&InvertedDropout, options)?.failed();
    progress(1, total);
    let rows = mutants
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            let run = conformance::run(m.layer, options)?;
            progress(i + 2, total);
            let kills = run
                .verdicts
                .iter()
                .filter(|v| v.verdict == Verdict::Fail && !unusable.contains(&v.id))
                .map(|v| Kill {
                    claim: v.id,
                    z: v.z,
                    infinite: v.result.worst().and_then(|k| InfiniteZ::of(&v.result, k)),
                    error: v.error.clone(),
                })
                .collect();
            Ok(KillRow {
                id: m.id,
                mistake: m.mistake,
                source: m.source,
                equivalent: m.equivalent.is_some(),
                reason: m.equivalent,
                kills,
                power: m.effect.as_ref().and_then(|e| power_statement(e, &run)),
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    Ok(KillMatrix { rows, unusable })
}
