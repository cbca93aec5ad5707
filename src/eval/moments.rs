//! `eval moments`: `E[z]`, `E[z²]`, `Var z` per unit and `E[S]`, `Var S` of the sum.

use super::{EvalOutput, EvalResult, Values, power_of_two_scale};
use crate::claims::dropout::{PairSampler, sum_oracle};
use crate::engine::{Budget, estimate};
use crate::error::{Error, check_finite_vec};
use crate::exact::{MAX_ENUMERATION_D, unit_expectation};
use crate::formulas::dropout as f;
use crate::ops::{Rate, Subject};

/// Evaluates the dropout moments of `x` at rate `p`.
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
    let subject = Subject::reference();
    let sampler = PairSampler {
        subject: &subject,
        x: &scaled,
        p,
        dim: 3 * d + 2,
        statistic: |draw, out| {
            let d = draw.x.len();
            let (s, s_alt): (f64, f64) = (draw.z.iter().sum(), draw.z_alt.iter().sum());
            for k in 0..d {
                let (a, b) = (draw.z[k], draw.z_alt[k]);
                out[k] = a;
                out[d + k] = a * a;
                out[2 * d + k] = 0.5 * (a - b) * (a - b);
            }
            out[3 * d] = s;
            out[3 * d + 1] = 0.5 * (s - s_alt) * (s - s_alt);
        },
    };
    let mut est = estimate(&sampler, budget)?.estimates();
    let orders = (0..3 * d + 2).map(|i| if i < d || i == 3 * d { 1 } else { 2 });
    for (e, order) in est.iter_mut().zip(orders) {
        *e = e.scaled(s.powi(order));
    }
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
            &est[0..d],
        ),
        EvalResult::new(
            "E[z^2]",
            per_unit(&|a| f::unit_raw_moment(a, rate, 2)),
            Some(exact_second),
            &est[d..2 * d],
        ),
        EvalResult::new(
            "Var[z]",
            per_unit(&|a| f::unit_variance(a, rate)),
            Some(exact_var),
            &est[2 * d..3 * d],
        ),
        EvalResult::new(
            "E[S]",
            Values::Scalar(f::sum_mean(x)),
            exact_sum,
            &est[3 * d..3 * d + 1],
        ),
        EvalResult::new(
            "Var[S]",
            Values::Scalar(f::sum_variance(x, rate)),
            exact_sum_var,
            &est[3 * d + 1..],
        ),
    ];
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
