//! The claims on the sum `S = Σ_k z_k` of a dropped-out row: its mean and
//! its variance, their statistics, skewness and laws.

use super::super::fn_claim::half_squared_difference;
use super::super::law::{Draw as LawDraw, Estimator, Law};
use super::oracles::masked_sum_oracle;
use super::{Card, Draw, DropoutClaim, FAMILY, FastFn, LawFn, OracleFn, Shape};
use crate::error::Error;
use crate::formulas::dropout as f;
use crate::ops::Rate;
use crate::ops::fast::dropout as fast;
use crate::stats::{CentralMoments, Statistic};

pub(super) fn sum_of(z: &[f64]) -> f64 {
    z.iter().sum()
}

/// Which moment of the sum `S` a claim states.
#[derive(Clone, Copy)]
pub(super) enum SumMoment {
    Mean,
    Variance,
}

/// The exact central moments of `S = Σ_k m_k x_k / q`, in closed form
/// at any width ([`CentralMoments::of_dropped_sum`]; the worked case's
/// `2^512` masks could not be listed).
pub(super) fn sum_moments(x: &[f64], p: f64) -> CentralMoments {
    CentralMoments::of_dropped_sum(x, 1.0 - p)
}

/// The skewness the mean claims on `S` declare (their statistic is `S`
/// itself): −0.52 for [`UNIT_X`] (minimum budget 1 750, not the default's
/// 37 490), 0 for the worked case (`K ~ Binomial(512, 1/2)` is symmetric).
pub(super) fn sum_skewness(x: &[f64], p: f64) -> f64 {
    sum_moments(x, p).skewness()
}

/// The effective skewness the variance claims on `S` declare: on the fast
/// path their estimator is the single-draw sample variance of `S` with the
/// fourth-moment standard error ([`crate::ops::fast::PowerSums::variance`]), whose
/// Cramér rule reads `(E W³ − 3 μ₃²)/τ³`, `W = (S − μ)² − μ₂`
/// ([`CentralMoments::sample_variance_skewness`]; 2√2 for a normal `S`).
/// The generic path runs the pair form `(S − S′)²/2`, a plain mean; the
/// claim declares the larger of the two, so its minimum budget holds on
/// both paths.
pub(super) fn sum_variance_skewness(x: &[f64], p: f64) -> f64 {
    sum_moments(x, p).variance_skewness_on_either_path()
}

/// The sum `S = Σ_k m_k x_k / q` of dropped-out `x` as a draw.
pub(super) fn sum_draw(x: &[f64], p: f64) -> LawDraw {
    LawDraw::MaskedSum {
        weights: x.to_vec(),
        p,
    }
}

/// A claim on the sum `S = Σ_k z_k` of dropped-out `x` at rate `p`: its
/// closed form, its exact value ([`masked_sum_oracle`]) and its per-draw
/// statistic, `S` or `(S − S')²/2`.
pub(super) fn sum_claim(
    id: &'static str,
    formula: &'static str,
    x: &[f64],
    rate: Rate,
    samples: u64,
    moment: SumMoment,
) -> DropoutClaim {
    type Analytic = fn(&[f64], Rate) -> Result<Vec<f64>, Error>;
    type DrawStatistic = fn(&Draw, &mut [f64]);
    let (analytic, oracle, draw_statistic, fast): (Analytic, OracleFn, DrawStatistic, FastFn) =
        match moment {
            SumMoment::Mean => (
                |x, _| Ok(vec![f::sum_mean(x)]),
                |x, rate| masked_sum_oracle(x, rate, false),
                |d, out| out[0] = sum_of(d.z),
                |x, p, b| Ok(vec![fast::sum_power_sums(x, p, b)?.mean()]),
            ),
            SumMoment::Variance => (
                |x, rate| Ok(vec![f::sum_variance(x, rate)]),
                |x, rate| masked_sum_oracle(x, rate, true),
                |d, out| out[0] = half_squared_difference(sum_of(d.z), sum_of(d.z_alt)),
                |x, p, b| Ok(vec![fast::sum_power_sums(x, p, b)?.variance()]),
            ),
        };
    let (p, q) = (rate.p(), rate.q());
    let card = Card::new(id, FAMILY, formula, Shape::Scalar, samples);
    let skewness = match moment {
        SumMoment::Mean => sum_skewness(x, p),
        SumMoment::Variance => sum_variance_skewness(x, p),
    };
    let card = card.with_statistic(Statistic::Mean { skewness });
    // The draw is S itself, reduced to its mean or its variance.
    let law: LawFn = match moment {
        SumMoment::Mean => |x, p| Law::repeated(sum_draw(x, p), 1, Estimator::Mean),
        SumMoment::Variance => |x, p| Law::repeated(sum_draw(x, p), 1, Estimator::Variance),
    };
    DropoutClaim {
        card,
        x: x.to_vec(),
        p,
        analytic,
        oracle: Some(oracle),
        draw_statistic,
        fast,
        law: Some(law),
        mean_statistic: Statistic::masked_sum(x, q, matches!(moment, SumMoment::Variance)),
        range: match moment {
            SumMoment::Mean => super::range::sum_mean,
            SumMoment::Variance => super::range::sum_pair_form,
        },
    }
}
