//! `eval compound`: `dropout → LN1 → LN2` — the factors `c1`, `c2` and
//! `E[LN2(LN1(z))]`, all leading order. Derivations:
//! [`crate::formulas::compound`]. One `--eps` is the ε of both norms.

use clap::Args;

use super::quantity::DroppedVectorArgs;

use super::ln::{EpsArg, optional_list};
use super::site::{Plan, finish, measure, weights};
use super::{EvalOutput, EvalResult, Values};
use crate::engine::Budget;
use crate::error::{Error, check_len};
use crate::eval::input::read_list;
use crate::formulas::{compound as fc, layernorm as fl};
use crate::ops::{LayerNorm, Rate, Site};

/// The one-line help of `eval compound`.
pub const ABOUT: &str = "dropout -> LN1 -> LN2: c1, c2, E[LN2(LN1(z))].";

/// Arguments of `eval compound`.
// Same shape as NormArgs, RmsArgs and ReportArgs: one clap field per flag.
// LN2's flags are NormArgs' renamed (--gamma2, --beta2), and clap cannot
// flatten a struct under other flag names.
#[derive(Debug, Clone, Args)]
pub struct CompoundArgs {
    #[command(flatten)]
    pub input: DroppedVectorArgs,
    /// LN1 gains.
    #[arg(long, allow_hyphen_values = true)]
    pub gamma1: String,
    /// LN1 shifts.
    #[arg(long, allow_hyphen_values = true)]
    pub beta1: String,
    /// LN2 gains (default 1).
    #[arg(long, allow_hyphen_values = true)]
    pub gamma2: Option<String>,
    /// LN2 shifts (default 0).
    #[arg(long, allow_hyphen_values = true)]
    pub beta2: Option<String>,
    #[command(flatten)]
    pub eps: EpsArg,
}

super::quantity::eval_quantity!("compound");

/// `eval compound` from its arguments.
pub fn run(a: CompoundArgs, budget: Budget) -> Result<EvalOutput, Error> {
    let (x, p) = a.input.values()?;
    let params = CompoundParams {
        gamma1: read_list("--gamma1", &a.gamma1)?,
        beta1: read_list("--beta1", &a.beta1)?,
        gamma2: optional_list("--gamma2", &a.gamma2)?,
        beta2: optional_list("--beta2", &a.beta2)?,
        eps: a.eps.value()?,
    };
    compound(&x, p, params, budget)
}

/// The LayerNorm parameters of `eval compound`: `γ`, `β` of each norm and
/// the ε of both.
#[derive(Debug, Clone, Default)]
pub struct CompoundParams {
    pub gamma1: Vec<f64>,
    pub beta1: Vec<f64>,
    pub gamma2: Option<Vec<f64>>,
    pub beta2: Option<Vec<f64>>,
    pub eps: f64,
}

fn defined_weights(uncorrected: &[f64], beta: &[f64], what: &str) -> Result<Vec<f64>, Error> {
    weights(uncorrected, beta).ok_or_else(|| Error::Degenerate {
        what: format!("{what} equals β: no shrink factor is defined"),
    })
}

/// `eval compound`: `c1`, `c2`, `E[LN2(LN1(z))]`.
pub fn compound(
    x: &[f64],
    p: f64,
    params: CompoundParams,
    budget: Budget,
) -> Result<EvalOutput, Error> {
    fl::input_moments(x)?;
    let rate = Rate::new(p)?;
    check_len("gamma1", &params.gamma1, x.len())?;
    let eps = params.eps;
    let ln1 = LayerNorm::new(params.gamma1, params.beta1, eps)?;
    let ln2 = LayerNorm::with_defaults(x.len(), params.gamma2, params.beta2, eps)?;
    let parts = fc::compound(x, &ln1, &ln2, rate)?;
    let u1 = defined_weights(&fl::uncorrected(x, &ln1)?, ln1.beta(), "LN1(x)")?;
    let c1_only = fc::c1_only(x, &ln1, &ln2, rate)?;
    let u2 = defined_weights(&c1_only, ln2.beta(), "LN2(ĉ1)")?;
    let results = vec![
        EvalResult::leading("c1", Values::Scalar(parts.c1), None).with_uncorrected(vec![1.0]),
        EvalResult::leading("c2", Values::Scalar(parts.c2), None).with_uncorrected(vec![1.0]),
        EvalResult::leading(
            "E[LN2(LN1(z))]",
            Values::PerUnit(fc::corrected(x, &ln1, &ln2, rate)?),
            None,
        )
        .with_uncorrected(fc::uncorrected(x, &ln1, &ln2)?),
    ];
    let site = Site::plain(x, p)?;
    let plan = Plan::Compound { ln1, ln2, u1, u2 };
    let out = measure("compound", &site, &plan, budget, results)?;
    finish(out, None, eps)
}
