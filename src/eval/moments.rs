//! `eval moments`: `E[z]`, `E[z²]`, `Var z` per unit and `E[S]`, `Var S` of the sum.

use clap::Args;

use super::quantity::RateArg;

use super::{EvalOutput, EvalResult, Values, monte_carlo, power_of_two_scale};
use crate::claims::SamplerKind;
use crate::engine::Budget;
use crate::error::{Error, check_finite_vec};
use crate::eval::input::read_list;
use crate::exact::{MAX_ENUMERATION_D, sum_oracle, unit_expectation};
use crate::formulas::dropout as f;
use crate::ops::Rate;
use crate::stats::Estimate;

/// Evaluates the dropout moments of `x` at rate `p`, on the fast sampler
/// ([`crate::ops::fast::dropout::moments`]: keep counts and one masked sum per
/// mask; the variances are sample variances of single masks).
///
/// Every closed form is exact. `exact` is the two-point expectation per
/// unit and the full enumeration of all masks for the sum when `d <= 22`
/// (above, the sum's closed form itself).
pub fn moments(x: &[f64], p: f64, budget: Budget) -> Result<EvalOutput, Error> {
    check_finite_vec("x", x)?;
    let rate = Rate::new(p)?;
    let mc = monte_carlo(budget)?;
    // Sample on x / s with s a power of two near max |x| (exact division), so
    // huge and tiny inputs neither overflow nor lose their spread to
    // underflow; moments of order r scale back by s^r.
    let s = power_of_two_scale(x);
    let scaled: Vec<f64> = x.iter().map(|v| v / s).collect();
    let fast = mc
        .map(|b| crate::ops::fast::dropout::moments(&scaled, p, b))
        .transpose()?;
    let back = |e: &[Estimate], order: i32| -> Vec<Estimate> {
        e.iter().map(|e| e.scaled(s.powi(order))).collect()
    };
    let unit = |g: fn(f64) -> f64| -> Vec<f64> {
        x.iter().map(|&a| unit_expectation(a, rate, g)).collect()
    };
    let exact_mean = unit(|z| z);
    let exact_second = unit(|z| z * z);
    let exact_var: Vec<f64> = exact_second
        .iter()
        .zip(&exact_mean)
        .map(|(m2, m1)| m2 - m1 * m1)
        .collect();
    let (exact_sum, exact_sum_var) = exact_sum_moments(x, rate)?;
    let per_unit = |g: &dyn Fn(f64) -> f64| Values::PerUnit(x.iter().map(|&a| g(a)).collect());
    let estimates: [Option<Vec<Estimate>>; 5] = match &fast {
        Some(f) => [
            Some(back(&f.unit_mean, 1)),
            Some(back(&f.unit_second, 2)),
            Some(back(&f.unit_variance, 2)),
            Some(back(&[f.sum_mean], 1)),
            Some(back(&[f.sum_variance], 2)),
        ],
        None => Default::default(),
    };
    let results = [
        EvalResult::exact("E[z]", per_unit(&f::unit_mean), Some(exact_mean)),
        EvalResult::exact(
            "E[z^2]",
            per_unit(&|a| f::unit_raw_moment(a, rate, 2)),
            Some(exact_second),
        ),
        EvalResult::exact(
            "Var[z]",
            per_unit(&|a| f::unit_variance(a, rate)),
            Some(exact_var),
        ),
        EvalResult::exact("E[S]", Values::Scalar(f::sum_mean(x)), exact_sum),
        EvalResult::exact(
            "Var[S]",
            Values::Scalar(f::sum_variance(x, rate)),
            exact_sum_var,
        ),
    ]
    .into_iter()
    .zip(estimates)
    .map(|(r, e)| r.with_optional_estimates(e.as_deref(), SamplerKind::Fast))
    .collect();
    EvalOutput::new("moments", p, x.len(), budget, results).checked()
}

/// The one-line help of `eval moments`.
pub const ABOUT: &str =
    "Dropout moments: E[z], E[z^2], Var[z] per unit; E[S], Var[S] of the sum S = sum_k z_k.";

/// Arguments of `eval moments`.
#[derive(Debug, Clone, Args)]
pub struct MomentsArgs {
    /// The pre-dropout vector, comma-separated (e.g. 0.5,-1.2,3), or @FILE.
    #[arg(long, allow_hyphen_values = true)]
    pub x: String,
    #[command(flatten)]
    pub p: RateArg,
}

super::quantity::eval_quantity!("moments");

/// `eval moments` from its arguments.
pub fn run(a: MomentsArgs, budget: Budget) -> Result<EvalOutput, Error> {
    moments(&read_list("--x", &a.x)?, a.p.value()?, budget)
}

type SumMoments = (Option<Vec<f64>>, Option<Vec<f64>>);

fn exact_sum_moments(x: &[f64], rate: Rate) -> Result<SumMoments, Error> {
    if x.len() > MAX_ENUMERATION_D {
        return Ok((None, None));
    }
    let mean = sum_oracle(x, rate, false)?.values;
    let variance = sum_oracle(x, rate, true)?.values;
    Ok((Some(mean), Some(variance)))
}
