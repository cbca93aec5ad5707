//! `eval rms`: RMSNorm after dropout on the user's `x` — `E[R²]` (exact) and
//! `E[RMSNorm(z)]` (leading order, with its second order). Derivations:
//! [`crate::formulas::rmsnorm`].
//!
//! With `ε > 0` the zero vector is a valid input: `z = 0` for every mask, so
//! `E[R²] = 0` and `E[RMSNorm(z)] = 0` exactly. With `ε = 0` it stays an
//! error (RMSNorm divides by `R = 0`). A constant non-zero `x` needs no `ε`.

use clap::Args;

use super::quantity::DroppedVectorArgs;

use super::ln::{EpsArg, optional_list};
use super::site::{Plan, finish, measure};
use super::{EvalOutput, EvalResult, Values};
use crate::engine::Budget;
use crate::error::{Error, check_finite_vec};
use crate::formulas::rmsnorm as fr;
use crate::formulas::second_order::NoisyUnits;
use crate::ops::{AnyNorm, Rate, RmsNorm, Site};

/// The one-line help of `eval rms`.
pub const ABOUT: &str = "RMSNorm after dropout: E[R^2], E[RMSNorm(z)].";

/// Arguments of `eval rms`.
#[derive(Debug, Clone, Args)]
pub struct RmsArgs {
    #[command(flatten)]
    pub input: DroppedVectorArgs,
    /// RMSNorm gains γ, one per unit (default 1).
    #[arg(long, allow_hyphen_values = true)]
    pub gamma: Option<String>,
    #[command(flatten)]
    pub eps: EpsArg,
}

super::quantity::eval_quantity!("rms");

/// `eval rms` from its arguments.
pub fn run(a: RmsArgs, budget: Budget) -> Result<EvalOutput, Error> {
    let (x, p) = a.input.values()?;
    let gamma = optional_list("--gamma", &a.gamma)?;
    rms(&x, p, gamma, a.eps.value()?, budget)
}

/// `eval rms`: `E[R^2]`, `E[RMSNorm(z)]`.
pub fn rms(
    x: &[f64],
    p: f64,
    gamma: Option<Vec<f64>>,
    eps: f64,
    budget: Budget,
) -> Result<EvalOutput, Error> {
    check_finite_vec("x", x)?;
    let zero = x.len() >= 2 && x.iter().all(|v| *v == 0.0) && eps > 0.0 && eps.is_finite();
    if !zero {
        fr::mean_square(x)?;
    }
    let rate = Rate::new(p)?;
    let rms = RmsNorm::with_defaults(x.len(), gamma, eps)?;
    let site = Site::plain(x, p)?;
    let results = if zero {
        // z = 0 for every mask (module docs).
        vec![
            EvalResult::exact("E[R^2]", Values::Scalar(0.0), None),
            EvalResult::exact("E[RMSNorm(z)]", Values::PerUnit(vec![0.0; x.len()]), None),
        ]
    } else {
        vec![
            EvalResult::exact("E[R^2]", Values::Scalar(fr::mean_of_r2(x, rate)?), None),
            EvalResult::leading(
                "E[RMSNorm(z)]",
                Values::PerUnit(fr::corrected(x, &rms, rate)?),
                None,
            )
            .with_uncorrected(fr::uncorrected(x, &rms)?),
        ]
    };
    let units = NoisyUnits::dropout(x, rate)?;
    let plan = Plan::Rms { rms: rms.clone() };
    let out = measure("rms", &site, &plan, budget, results)?;
    finish(out, Some(("E[RMSNorm(z)]", &units, AnyNorm::Rms(rms))), eps)
}
