//! The moment and kept-count claims on a Python dropout: two training
//! passes per draw through the suite's [`PairSampler`], at the user's rate.

use dropmc::claims::dropout::{Draw, PairSampler};
use dropmc::claims::fn_claim::half_squared_difference;
use dropmc::claims::{Card, Shape};
use dropmc::engine::estimate;
use dropmc::formulas::dropout as f;
use dropmc::ops::Rate;
use dropmc::stats::{Statistic, two_point_skewness};

use super::{COUNT_X, MOMENT_SAMPLES, PyClaim, Setup, family_of};

/// A per-unit statistic `g(z_k)` with `g(0) = 0` takes two values, with
/// probabilities `q` and `p` (the Rust suite's `unit_statistic`, at `p`).
fn unit_statistic(rate: Rate) -> Statistic {
    Statistic::Mean {
        skewness: two_point_skewness(rate.q()),
    }
}

/// A moment claim: two training passes per draw through [`PairSampler`].
#[allow(clippy::too_many_arguments)]
fn pair_claim<'a>(
    id: &'static str,
    formula: &'static str,
    shape: Shape,
    x: Vec<f64>,
    rate: Rate,
    statistic_kind: Statistic,
    analytic: Vec<f64>,
    statistic: fn(&Draw, &mut [f64]),
) -> PyClaim<'a> {
    let dim = analytic.len();
    let p = rate.p();
    // The suite's budget, raised to the test's minimum where an extreme
    // rate makes the statistic skewed enough to need more (p or q below
    // about 0.005), so no claim is inconclusive by construction.
    let samples = MOMENT_SAMPLES.max(statistic_kind.min_samples());
    PyClaim {
        card: Card::new(id, family_of(id), formula, shape, samples).with_statistic(statistic_kind),
        analytic,
        note: None,
        estimate: Box::new(move |subject, budget| {
            let sampler = PairSampler {
                subject,
                x: &x,
                p,
                dim,
                statistic,
            };
            Ok(estimate(&sampler, budget)?.estimates())
        }),
    }
}

fn per_unit(x: &[f64], g: impl Fn(f64) -> f64) -> Vec<f64> {
    x.iter().map(|&a| g(a)).collect()
}

fn powers(z: &[f64], r: u32, out: &mut [f64]) {
    for (o, v) in out.iter_mut().zip(z) {
        *o = dropmc::formulas::ipow(*v, r);
    }
}

/// The moment and kept-count claims (none at `p = 0`, where every moment
/// is the input's and `semantics.p_zero_identity` judges the layer).
pub(super) fn moment_claims<'a>(setup: &Setup) -> Vec<PyClaim<'a>> {
    let rate = setup.rate;
    if rate.p() == 0.0 {
        return Vec::new();
    }
    let x = setup.moment_x.clone();
    let unit = unit_statistic(rate);
    let moment = |id, formula, r: i32, statistic: fn(&Draw, &mut [f64])| {
        pair_claim(
            id,
            formula,
            Shape::Vector,
            x.clone(),
            rate,
            unit,
            per_unit(&x, |a| f::unit_raw_moment(a, rate, r)),
            statistic,
        )
    };
    vec![
        moment("dropout.mean", "E[z_k] = x_k", 1, |d, out| {
            out.copy_from_slice(d.z)
        }),
        moment(
            "dropout.second_moment",
            "E[z_k^2] = x_k^2 / q",
            2,
            |d, out| powers(d.z, 2, out),
        ),
        moment(
            "dropout.third_moment",
            "E[z_k^3] = x_k^3 / q^2",
            3,
            |d, out| powers(d.z, 3, out),
        ),
        moment(
            "dropout.fourth_moment",
            "E[z_k^4] = x_k^4 / q^3",
            4,
            |d, out| powers(d.z, 4, out),
        ),
        pair_claim(
            "dropout.variance",
            "Var z_k = x_k^2 p / q",
            Shape::Vector,
            x.clone(),
            rate,
            // (z_k − z'_k)²/2 is nonzero with probability 2pq.
            Statistic::Mean {
                skewness: two_point_skewness(2.0 * rate.p() * rate.q()),
            },
            per_unit(&x, |a| f::unit_variance(a, rate)),
            |d, out| {
                for ((o, a), b) in out.iter_mut().zip(d.z).zip(d.z_alt) {
                    *o = half_squared_difference(*a, *b);
                }
            },
        ),
        pair_claim(
            "dropout.sum_mean",
            "E[S] = sum_k x_k",
            Shape::Scalar,
            x.clone(),
            rate,
            Statistic::default(),
            vec![f::sum_mean(&x)],
            |d, out| out[0] = d.z.iter().sum(),
        ),
        pair_claim(
            "dropout.sum_variance",
            "Var S = (p/q) sum_k x_k^2",
            Shape::Scalar,
            x.clone(),
            rate,
            Statistic::default(),
            vec![f::sum_variance(&x, rate)],
            |d, out| {
                let (s, t): (f64, f64) = (d.z.iter().sum(), d.z_alt.iter().sum());
                out[0] = half_squared_difference(s, t);
            },
        ),
        pair_claim(
            "dropout.kept_count",
            "K = #kept ~ Binomial(d, q): P(K=k) = C(d,k) q^k p^(d-k)",
            Shape::Vector,
            COUNT_X.to_vec(),
            rate,
            Statistic::Indicator { trials: 1 },
            f::kept_count_pmf(COUNT_X.len() as u64, rate).unwrap_or_default(),
            |d, out| {
                out.fill(0.0);
                out[d.mask.iter().filter(|m| **m).count()] = 1.0;
            },
        ),
    ]
}
