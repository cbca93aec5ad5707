//! The mutant gallery: known-wrong dropout implementations, each encoding one
//! mistake that the seeds report people make, one small unit per mutant.
//!
//! Every mutant implements [`DropoutLayer`] and differs from the reference
//! [`InvertedDropout`] in exactly one place. [`gallery`] lists them with the
//! mistake and its source; [`kill_matrix`] runs the conformance claims
//! ([`crate::conformance`]) against each and records which claims kill it.
//!
//! Two mutants are **equivalent**: no observation can tell them from the
//! reference, so no claim can or should kill them. [`Mutant::equivalent`]
//! gives the reason; they are listed, not counted as survivors.

mod attention_logits;
mod attention_renormalised;
mod backward_fresh_mask;
mod backward_unscaled;
mod divide_by_p;
mod eval_draws;
mod eval_masks;
mod eval_scales_by_q;
mod independent_for_shared;
mod keep_above_p;
mod keep_below_p;
mod loss_scaling;
mod multiply_by_q;
mod power;
mod rate_off_2pct;
mod rescale_dropped;
mod shared_for_independent;

pub use power::rejection_power;

use rand::{Rng, RngExt};
use serde::Serialize;

use crate::conformance::{self, Options};
use crate::error::{Error, check_len};
use crate::ops::{DropoutLayer, InvertedDropout, MaskShape, Rate, default_positions};

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

/// Every mutant, non-equivalent ones first.
pub fn gallery() -> Vec<Mutant> {
    vec![
        divide_by_p::mutant(),
        multiply_by_q::mutant(),
        keep_below_p::mutant(),
        eval_scales_by_q::mutant(),
        eval_draws::mutant(),
        eval_masks::mutant(),
        backward_fresh_mask::mutant(),
        backward_unscaled::mutant(),
        attention_renormalised::mutant(),
        attention_logits::mutant(),
        shared_for_independent::mutant(),
        independent_for_shared::mutant(),
        rate_off_2pct::mutant(),
        loss_scaling::mutant(),
        rescale_dropped::mutant(),
        keep_above_p::mutant(),
    ]
}

/// A training pass with a custom keep rule and survivor value: the shared
/// skeleton of the forward mutants (validation as in the reference).
pub(crate) fn train_with(
    x: &[f64],
    p: f64,
    rng: &mut dyn Rng,
    out: &mut [f64],
    mask: &mut [bool],
    keep: impl Fn(f64, Rate) -> bool,
    survivor: impl Fn(f64, Rate) -> f64,
) -> Result<(), Error> {
    let rate = Rate::new(p)?;
    check_len("output buffer", out, x.len())?;
    if mask.len() != x.len() {
        return Err(Error::LengthMismatch {
            what: "mask buffer",
            expected: x.len(),
            got: mask.len(),
        });
    }
    for ((o, m), &v) in out.iter_mut().zip(mask.iter_mut()).zip(x) {
        *m = keep(rng.random::<f64>(), rate);
        *o = if *m { survivor(v, rate) } else { 0.0 };
    }
    Ok(())
}

/// A backward pass with a custom kept-unit gradient.
pub(crate) fn backward_with(
    grad_out: &[f64],
    p: f64,
    mask: &[bool],
    grad_in: &mut [f64],
    kept: impl Fn(f64, Rate) -> f64,
) -> Result<(), Error> {
    let rate = Rate::new(p)?;
    check_len("gradient buffer", grad_in, grad_out.len())?;
    if mask.len() != grad_out.len() {
        return Err(Error::LengthMismatch {
            what: "mask buffer",
            expected: grad_out.len(),
            got: mask.len(),
        });
    }
    for ((gi, &m), &g) in grad_in.iter_mut().zip(mask).zip(grad_out) {
        *gi = if m { kept(g, rate) } else { 0.0 };
    }
    Ok(())
}

/// The reference, for the parts a mutant leaves alone.
pub(crate) const REFERENCE: InvertedDropout = InvertedDropout;

/// A training pass: `(x, p, rng, out, mask)`.
pub type TrainFn = fn(&[f64], f64, &mut dyn Rng, &mut [f64], &mut [bool]) -> Result<(), Error>;
/// An evaluation pass: `(x, p, rng, out)`.
pub type EvalFn = fn(&[f64], f64, &mut dyn Rng, &mut [f64]) -> Result<(), Error>;
/// A backward pass: `(grad_out, p, mask, grad_in)`.
pub type BackwardFn = fn(&[f64], f64, &[bool], &mut [f64]) -> Result<(), Error>;
/// A pass over a `T × d` block: `(x, positions, shape, p, rng, out, mask)`.
pub type PositionsFn =
    fn(&[f64], usize, MaskShape, f64, &mut dyn Rng, &mut [f64], &mut [bool]) -> Result<(), Error>;

/// The reference layer with some of its parts replaced. Every mutant is one:
/// its file defines only the part that carries the mistake and takes the
/// rest from [`Patched::REFERENCE`] by struct update.
pub struct Patched {
    pub name: &'static str,
    pub train: TrainFn,
    pub eval: EvalFn,
    pub backward: BackwardFn,
    /// Attention rows; `None` runs the training pass on the row.
    pub attention: Option<TrainFn>,
    /// `T × d` blocks; `None` is [`default_positions`] over this layer.
    pub positions: Option<PositionsFn>,
}

impl Patched {
    /// Every part the reference's.
    pub const REFERENCE: Patched = Patched {
        name: "reference",
        train: |x, p, rng, out, mask| REFERENCE.forward_train(x, p, rng, out, mask),
        eval: |x, p, rng, out| REFERENCE.forward_eval(x, p, rng, out),
        backward: |g, p, mask, gi| REFERENCE.backward(g, p, mask, gi),
        attention: None,
        positions: None,
    };
}

impl DropoutLayer for Patched {
    fn name(&self) -> &str {
        self.name
    }

    fn forward_train(
        &self,
        x: &[f64],
        p: f64,
        rng: &mut dyn Rng,
        out: &mut [f64],
        mask: &mut [bool],
    ) -> Result<(), Error> {
        (self.train)(x, p, rng, out, mask)
    }

    fn forward_eval(
        &self,
        x: &[f64],
        p: f64,
        rng: &mut dyn Rng,
        out: &mut [f64],
    ) -> Result<(), Error> {
        (self.eval)(x, p, rng, out)
    }

    fn backward(
        &self,
        grad_out: &[f64],
        p: f64,
        mask: &[bool],
        grad_in: &mut [f64],
    ) -> Result<(), Error> {
        (self.backward)(grad_out, p, mask, grad_in)
    }

    fn forward_attention(
        &self,
        a: &[f64],
        p: f64,
        rng: &mut dyn Rng,
        out: &mut [f64],
        mask: &mut [bool],
    ) -> Result<(), Error> {
        (self.attention.unwrap_or(self.train))(a, p, rng, out, mask)
    }

    fn forward_positions(
        &self,
        x: &[f64],
        positions: usize,
        shape: MaskShape,
        p: f64,
        rng: &mut dyn Rng,
        out: &mut [f64],
        mask: &mut [bool],
    ) -> Result<(), Error> {
        match self.positions {
            Some(f) => f(x, positions, shape, p, rng, out, mask),
            None => default_positions(self, x, positions, shape, p, rng, out, mask),
        }
    }
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
    let unusable = conformance::run(&REFERENCE, options)?.rejected();
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

/// The kill matrix as JSON:
/// `{"mutants": [{"id", "mistake", "equivalent", "killed_by": [claim ids]}, …]}`
/// (plus `source`, `reason`, the killing `z` per claim in `kills`, and
/// `unusable_claims`).
pub fn to_json(matrix: &KillMatrix) -> serde_json::Value {
    let mutants: Vec<serde_json::Value> = matrix
        .rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "id": r.id,
                "mistake": r.mistake,
                "source": r.source,
                "equivalent": r.equivalent,
                "reason": r.reason,
                "killed_by": r.kills.iter().map(|k| k.claim).collect::<Vec<_>>(),
                "kills": r.kills,
                "power": r.power,
            })
        })
        .collect();
    serde_json::json!({ "mutants": mutants, "unusable_claims": matrix.unusable })
}

/// The kill matrix as text: one block per mutant with its killing claims.
pub fn table(matrix: &KillMatrix, width: usize) -> String {
    use crate::table::wrap_text;
    let indented = |out: &mut String, text: &str| {
        for line in wrap_text(text, width.saturating_sub(4)) {
            out.push_str("    ");
            out.push_str(&line);
            out.push('\n');
        }
    };
    let rows = &matrix.rows;
    let mut out = String::new();
    for r in rows {
        let status = match (r.equivalent, r.kills.is_empty()) {
            (true, true) => "equivalent (survives, as it must)".to_string(),
            (true, false) => format!("equivalent, but killed by {} claims", r.kills.len()),
            (false, true) => "SURVIVED".to_string(),
            (false, false) => format!("killed by {} claims", r.kills.len()),
        };
        out.push_str(&format!("{:24} {status}\n", r.id));
        indented(&mut out, &format!("mistake: {} [{}]", r.mistake, r.source));
        if let Some(reason) = r.reason {
            indented(&mut out, &format!("why equivalent: {reason}"));
        }
        if let Some(p) = &r.power {
            let miss = if p.miss > 0.0 {
                format!("{:.1e}", p.miss)
            } else {
                format!(
                    "Phi({:.1}), below 1e-300",
                    crate::stats::critical_z() - p.lambda
                )
            };
            indented(
                &mut out,
                &format!(
                    "power of {} at {} draws: effect {:.4}, SE {:.2e}, lambda = {:.1}, \
                     power = 1 - {miss}",
                    p.claim, p.samples, p.effect, p.stderr, p.lambda
                ),
            );
        }
        for k in &r.kills {
            let z = match (k.z, &k.error) {
                (Some(z), _) if z.is_infinite() => format!(
                    "z = {} (no spread: every draw gave the same value, not the target)",
                    crate::report::format_z(z)
                ),
                (Some(z), _) => format!("z = {}", crate::report::format_z(z)),
                (None, Some(e)) => format!("error: {e}"),
                (None, None) => "failed".to_string(),
            };
            indented(&mut out, &format!("{:40} {z}", k.claim));
        }
    }
    let killed = rows
        .iter()
        .filter(|r| !r.equivalent && !r.kills.is_empty())
        .count();
    let live = rows.iter().filter(|r| !r.equivalent).count();
    let equivalent = rows.len() - live;
    out.push_str(&format!(
        "\n{killed} of {live} non-equivalent mutants killed; {equivalent} equivalent mutants listed.\n"
    ));
    if !matrix.unusable.is_empty() {
        out.push_str(&format!(
            "Not used (the reference fails them at this budget): {}\n",
            matrix.unusable.join(", ")
        ));
    }
    out
}
