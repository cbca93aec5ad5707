//! `eval ln`: LayerNorm after dropout on the user's `x` — `E[M]`, `Var[M]`,
//! `E[V]` (exact), the shrink factor `c` (`c_ε`) and `E[LN(z)]` (leading
//! order, with its second order). Derivations:
//! [`crate::formulas::layernorm`].
//!
//! # A constant `x`
//!
//! With `ε > 0`, a constant `x` (`σ = 0`) is a valid input: `LN(x) = β`
//! exactly, and since the units of `z` are exchangeable,
//! `E[(z_k − M)/sqrt(V + ε)]` is the same for every `k` and sums to zero
//! over `k`, so `E[LN(z)] = β` exactly too. `E[M]`, `Var M`, `E[V]` keep their
//! exact closed forms (`μ`, `p μ²/(q d)`, `(p/q) μ² (1 − 1/d)`, from the
//! per-unit moments), `c_ε = sqrt(ε / (p μ²/q + ε))` is still the closed
//! form, but the least-squares factor it approximates is `0/0` (the
//! uncorrected output has no centred part), so `c` has no exact or Monte
//! Carlo value. With `ε = 0` a constant `x` stays an error: `LN(x)` divides
//! by `σ = 0`.

use clap::Args;

use super::quantity::DroppedVectorArgs;

use super::site::{Plan, finish, measure, undefined, weights_or_zeros};
use super::{EvalOutput, EvalResult, Values};
use crate::engine::Budget;
use crate::error::Error;
use crate::eval::input::{read_eps, read_list};
use crate::formulas::dropout::sum_variance;
use crate::formulas::layernorm as fl;
use crate::formulas::second_order::NoisyUnits;
use crate::ops::{AnyNorm, LayerNorm, Rate, Site};

/// The one-line help of `eval ln`.
pub const ABOUT: &str = "LayerNorm after dropout: E[M], Var[M], E[V], c, E[LN(z)].";

/// Arguments of `eval ln`.
#[derive(Debug, Clone, Args)]
pub struct LnArgs {
    #[command(flatten)]
    pub input: DroppedVectorArgs,
    #[command(flatten)]
    pub norm: NormArgs,
}

super::quantity::eval_quantity!("ln");

/// `eval ln` from its arguments.
pub fn run(a: LnArgs, budget: Budget) -> Result<EvalOutput, Error> {
    let (x, p) = a.input.values()?;
    ln(&x, p, a.norm.params()?, budget)
}

/// `μ`, `σ²` of `x`, accepting a constant `x` (`σ² = 0`) when `ε > 0`.
pub(super) fn moments_or_constant(x: &[f64], eps: f64) -> Result<(f64, f64), Error> {
    match fl::input_moments(x) {
        Ok(m) => Ok(m),
        Err(e) => {
            let constant = x.len() >= 2 && x.iter().all(|v| v.is_finite() && *v == x[0]);
            if constant && eps > 0.0 && eps.is_finite() {
                Ok((x[0], 0.0))
            } else if x.len() < 2 || x.iter().any(|v| !v.is_finite()) {
                // d = 1 (fl::input_moments says so) or a non-finite entry.
                Err(e)
            } else if !constant && crate::formulas::mean_and_variance(x).1.is_infinite() {
                Err(Error::Degenerate {
                    what: "σ² of x overflows f64 (its deviations from the mean square above the \
                           largest f64, 1.8e308): rescale x"
                        .into(),
                })
            } else if !constant && matches!(e, Error::Degenerate { .. }) {
                // Not constant, yet σ² = 0: the deviations (subnormal, or
                // below √(smallest f64) ≈ 1.5e-154) squared to zero.
                Err(Error::Degenerate {
                    what: "σ² of x underflows f64 (x is not constant, but its deviations from \
                           the mean square below the smallest f64): rescale x"
                        .into(),
                })
            } else {
                Err(e)
            }
        }
    }
}

/// The parameters of the LayerNorm an `eval` quantity normalizes with, as
/// the user gave them: gains `γ` and shifts `β` (absent: 1 and 0 over the
/// input's units) and `ε`. [`Default`] is the plain LayerNorm (`γ = 1`,
/// `β = 0`, `ε = 0`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LayerNormParams {
    pub gamma: Option<Vec<f64>>,
    pub beta: Option<Vec<f64>>,
    pub eps: f64,
}

impl LayerNormParams {
    /// `γ = 1`, `β = 0` with `eps`.
    pub fn plain(eps: f64) -> Self {
        LayerNormParams {
            eps,
            ..Self::default()
        }
    }

    /// The validated LayerNorm over `d` units.
    pub fn layer_norm(self, d: usize) -> Result<LayerNorm, Error> {
        LayerNorm::with_defaults(d, self.gamma, self.beta, self.eps)
    }
}

/// `eval ln`: `E[M]`, `Var[M]`, `E[V]`, `c` (`c_ε`), `E[LN(z)]`.
pub fn ln(x: &[f64], p: f64, norm: LayerNormParams, budget: Budget) -> Result<EvalOutput, Error> {
    let eps = norm.eps;
    let (mu, s2) = moments_or_constant(x, eps)?;
    let rate = Rate::new(p)?;
    let ln = norm.layer_norm(x.len())?;
    let site = Site::plain(x, p)?;
    let uncorrected = fl::uncorrected(x, &ln)?;
    let constant = s2 == 0.0;
    let (mean_m, var_m, mean_v) = if constant {
        // The exact forms from the per-unit moments, which need no σ > 0.
        let units = NoisyUnits::dropout(x, rate)?;
        let d = x.len() as f64;
        (mu, sum_variance(x, rate) / (d * d), units.expected_v())
    } else {
        (
            fl::mean_of_m(x)?,
            fl::variance_of_m(x, rate)?,
            fl::mean_of_v(x, rate)?,
        )
    };
    let c = fl::shrink_eps(mu, s2, eps, rate);
    let corrected = fl::shrink_towards_beta(&uncorrected, ln.beta(), c);
    let output = if constant {
        // E[LN(z)] = β exactly (module docs).
        EvalResult::exact("E[LN(z)]", Values::PerUnit(ln.beta().to_vec()), None)
    } else {
        EvalResult::leading("E[LN(z)]", Values::PerUnit(corrected), None)
            .with_uncorrected(uncorrected.clone())
    };
    let results = vec![
        EvalResult::exact("E[M]", Values::Scalar(mean_m), None),
        EvalResult::exact("Var[M]", Values::Scalar(var_m), None),
        EvalResult::exact("E[V]", Values::Scalar(mean_v), None),
        EvalResult::leading("c", Values::Scalar(c), None).with_uncorrected(vec![1.0]),
        output,
    ];
    let units = NoisyUnits::dropout(x, rate)?;
    let u = weights_or_zeros(&uncorrected, ln.beta());
    let mut out = measure(
        "ln",
        &site,
        &Plan::Ln { ln: ln.clone(), u },
        budget,
        results,
    )?;
    if constant {
        undefined(&mut out, "c", "x is constant, so LN(x) = β");
    }
    finish(out, Some(("E[LN(z)]", &units, AnyNorm::Layer(ln))), eps)
}

/// The flags of [`LayerNormParams`]: `--gamma`, `--beta`, `--eps`.
#[derive(Debug, Clone, Args)]
pub struct NormArgs {
    /// Gains γ, one per unit (default 1).
    #[arg(long, allow_hyphen_values = true)]
    pub gamma: Option<String>,
    /// Shifts β, one per unit (default 0).
    #[arg(long, allow_hyphen_values = true)]
    pub beta: Option<String>,
    #[command(flatten)]
    pub eps: EpsArg,
}

impl NormArgs {
    /// The parameters given (read in flag order: `--gamma`, `--beta`,
    /// `--eps`).
    pub fn params(&self) -> Result<LayerNormParams, Error> {
        Ok(LayerNormParams {
            gamma: optional_list("--gamma", &self.gamma)?,
            beta: optional_list("--beta", &self.beta)?,
            eps: self.eps.value()?,
        })
    }
}

/// The normalization ε.
#[derive(Debug, Clone, Args)]
pub struct EpsArg {
    /// Normalization epsilon: a number, or `torch` (1e-5) / `flax` (1e-6).
    #[arg(long, allow_hyphen_values = true, default_value = "0")]
    pub eps: String,
}

impl EpsArg {
    /// The ε given.
    pub fn value(&self) -> Result<f64, Error> {
        read_eps("--eps", &self.eps)
    }
}

/// A list flag that may be absent.
pub(super) fn optional_list(flag: &str, text: &Option<String>) -> Result<Option<Vec<f64>>, Error> {
    text.as_deref().map(|t| read_list(flag, t)).transpose()
}
