//! `eval bypass`: `y = h + dropout(v)` in front of LayerNorm — `E[V]`
//! (exact), `c_damped` (`c_ε`) and `E[LN(y)]` (leading order, with its
//! second order). Derivations: [`crate::formulas::bypass`].
//!
//! With `ε > 0` a constant clean input `x = h + v` is valid: `LN(x) = β`, so
//! the leading-order `E[LN(y)]` is `β` and `c_ε = sqrt(ε / ((p/q) v̄² + ε))`;
//! as for [`super::ln`], the least-squares factor `c_damped` approximates is
//! then `0/0` and has no exact or Monte Carlo value. `E[V]` keeps its exact
//! form `σ² + (1 − 1/d)(p/q) v̄²`. (Unlike plain LayerNorm, `E[LN(y)] = β`
//! is only leading order here: `h` and `v` need not be constant, so the
//! units are not exchangeable.)

use clap::Args;

use super::quantity::RateArg;

use super::ln::{LayerNormParams, NormArgs, moments_or_constant};
use super::site::{Plan, finish, measure, undefined, weights_or_zeros};
use super::{EvalOutput, EvalResult, Values};
use crate::engine::Budget;
use crate::error::{Error, check_len};
use crate::eval::input::read_list;
use crate::formulas::bypass as fb;
use crate::formulas::layernorm::shrink_towards_beta;
use crate::formulas::second_order::NoisyUnits;
use crate::ops::{AnyNorm, Site};

/// The one-line help of `eval bypass`.
pub const ABOUT: &str = "Bypass y = h + dropout(v) before LayerNorm: E[V], c_damped, E[LN(y)].";

/// Arguments of `eval bypass`.
#[derive(Debug, Clone, Args)]
pub struct BypassArgs {
    /// The undropped part h, comma-separated (or @FILE).
    #[arg(long, allow_hyphen_values = true)]
    pub h: String,
    /// The dropped part v, comma-separated (or @FILE).
    #[arg(long, allow_hyphen_values = true)]
    pub v: String,
    #[command(flatten)]
    pub p: RateArg,
    #[command(flatten)]
    pub norm: NormArgs,
}

super::quantity::eval_quantity!("bypass");

/// `eval bypass` from its arguments.
pub fn run(a: BypassArgs, budget: Budget) -> Result<EvalOutput, Error> {
    let (h, v) = (read_list("--h", &a.h)?, read_list("--v", &a.v)?);
    bypass_with(&h, &v, a.p.value()?, a.norm.params()?, budget)
}

/// `eval bypass` through the plain LayerNorm (`γ = 1`, `β = 0`, `ε = 0`).
pub fn bypass(h: &[f64], v: &[f64], p: f64, budget: Budget) -> Result<EvalOutput, Error> {
    bypass_with(h, v, p, LayerNormParams::default(), budget)
}

/// `eval bypass`: `E[V]` of `y = h + dropout(v)`, `c_damped`, `E[LN(y)]`
/// through the LayerNorm `norm` (gains and shifts default to 1 and 0).
pub fn bypass_with(
    h: &[f64],
    v: &[f64],
    p: f64,
    norm: LayerNormParams,
    budget: Budget,
) -> Result<EvalOutput, Error> {
    let eps = norm.eps;
    check_len("v", v, h.len())?;
    let site = Site::new(h.to_vec(), vec![(v.to_vec(), p)])?;
    let (_, s2) = moments_or_constant(&site.clean(), eps)?;
    let ln = norm.layer_norm(h.len())?;
    let units = NoisyUnits::from_site(&site)?;
    let constant = s2 == 0.0;
    let (mean_v, c) = if constant {
        // The exact E[V] of the per-unit moments; c_ε with σ² = 0.
        let c = (eps / (fb::added_noise(&site) + eps)).sqrt();
        (units.expected_v(), c)
    } else {
        (fb::mean_of_v(&site)?, fb::damped(&site, eps)?)
    };
    let uncorrected = fb::uncorrected(&site, &ln)?;
    let corrected = shrink_towards_beta(&uncorrected, ln.beta(), c);
    let results = vec![
        EvalResult::exact("E[V]", Values::Scalar(mean_v), None),
        EvalResult::leading("c_damped", Values::Scalar(c), None).with_uncorrected(vec![1.0]),
        EvalResult::leading("E[LN(y)]", Values::PerUnit(corrected), None)
            .with_uncorrected(uncorrected.clone()),
    ];
    let u = weights_or_zeros(&uncorrected, ln.beta());
    let plan = Plan::Bypass { ln: ln.clone(), u };
    let mut out = measure("bypass", &site, &plan, budget, results)?;
    if constant {
        undefined(&mut out, "c_damped", "h + v is constant, so LN(h + v) = β");
    }
    finish(out, Some(("E[LN(y)]", &units, AnyNorm::Layer(ln))), eps)
}
