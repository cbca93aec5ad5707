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
    /// Where the mistake is described (a seed document, or dropmc's own).
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
    let (k, lambda) = effects
        .iter()
        .zip(&verdict.result.estimate)
        .map(|(e, est)| e.abs() / est.stderr)
        .enumerate()
        .fold(
            (0, 0.0),
            |best, (k, l)| if l > best.1 { (k, l) } else { best },
        );
    let stderr = verdict.result.estimate.get(k)?.stderr;
    Some(PowerStatement {
        claim: effect.claim,
        samples: verdict.result.samples,
        effect: effects[k],
        stderr,
        lambda,
        power: rejection_power(effects[k], stderr),
        miss: power::miss_probability(lambda),
    })
}

/// A claim that killed a mutant and the `z` of its worst component
/// (`None` when the claim errored, e.g. on a non-finite output).
#[derive(Debug, Clone, Serialize)]
pub struct Kill {
    pub claim: &'static str,
    pub z: Option<f64>,
    pub error: Option<String>,
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
/// mutant. A claim kills a mutant when it fails on the mutant and passes on
/// the reference at the same budget and seed.
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
    // A kill is a rejection at the per-assertion critical value; below a
    // claim's minimum budget its size is not controlled, which the
    // reference's own rejections (unusable claims) guard against.
    let unusable = conformance::run(&InvertedDropout, options)?.rejected();
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
                .filter(|v| v.result.rejected() && !unusable.contains(&v.id))
                .map(|v| Kill {
                    claim: v.id,
                    z: v.z,
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
