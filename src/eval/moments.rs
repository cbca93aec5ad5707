//! `eval moments`: `E[z]`, `E[z²]`, `Var z` per unit and `E[S]`, `Var S` of the sum.

use super::{EvalOutput, EvalResult, Values, power_of_two_scale};
use crate::claims::SamplerKind;
use crate::engine::Budget;
use crate::error::{Error, check_finite_vec};
use crate::exact::{MAX_ENUMERATION_D, sum_oracle, unit_expectation};
use crate::formulas::dropout as f;
use crate::ops::Rate;
use crate::stats::Estimate;

/// Evaluates the dropout moments of `x` at rate `p`, on the fast sampler
/// ([`crate::fast::dropout::moments`]: keep counts and one masked sum per
/// mask; the variances are sample variances of single masks).
///
/// `exact` is the two-point expectation per unit (always) and the full
/// enumeration of all masks for the sum (when `d <= 22`, else `null`).
pub fn moments(x: &[f64], p: f64, budget: Budget) -> Result<EvalOutput, Error> {
    check_finite_vec("x", x)?;
    let rate = Rate::new(p)?;
    let budget = Budget::new(budget.samples, budget.seed)?;
    let d = x.len();
    // Sample on x / s with s a power of two near max |x| (exact division), so
    // huge and tiny inputs neither overflow nor lose their spread to
    // underflow; moments of order r scale back by s^r.
    let s = power_of_two_scale(x);
    let scaled: Vec<f64> = x.iter().map(|v| v / s).collect();
    let fast = crate::fast::dropout::moments(&scaled, p, budget)?;
    let back = |e: &[Estimate], order: i32| -> Vec<Estimate> {
        e.iter().map(|e| e.scaled(s.powi(order))).collect()
    };
    let unit_mean = back(&fast.unit_mean, 1);
    let unit_second = back(&fast.unit_second, 2);
    let unit_variance = back(&fast.unit_variance, 2);
    let sum_mean = back(&[fast.sum_mean], 1);
    let sum_variance = back(&[fast.sum_variance], 2);
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
    let results = vec![
        EvalResult::new(
            "E[z]",
            per_unit(&f::unit_mean),
            Some(exact_mean),
            &unit_mean,
        ),
        EvalResult::new(
            "E[z^2]",
            per_unit(&|a| f::unit_raw_moment(a, rate, 2)),
            Some(exact_second),
            &unit_second,
        ),
        EvalResult::new(
            "Var[z]",
            per_unit(&|a| f::unit_variance(a, rate)),
            Some(exact_var),
            &unit_variance,
        ),
        EvalResult::new("E[S]", Values::Scalar(f::sum_mean(x)), exact_sum, &sum_mean),
        EvalResult::new(
            "Var[S]",
            Values::Scalar(f::sum_variance(x, rate)),
            exact_sum_var,
            &sum_variance,
        ),
    ]
    .into_iter()
    .map(|r| r.with_sampler(SamplerKind::Fast))
    .collect();
    EvalOutput {
        quantity: "moments",
        p,
        d,
        samples: budget.samples,
        seed: budget.seed,
        results,
    }
    .checked()
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
