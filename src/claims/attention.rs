//! The attention family: dropout on one row of attention probabilities, at
//! the seed's case `a = (0.2, 0.3, 0.5)`, `p = 0.5`. Derivations:
//! [`crate::formulas::attention`]. Every claim has an oracle that
//! enumerates the 8 masks.
//!
//! On an implementation under test each draw runs the subject's
//! [`forward_attention`] twice, independently (`b`, `b'`), for the variance
//! statistics `(R − R')²/2`. On the mathematics every claim uses the
//! bit-mask estimators of [`crate::ops::fast::attention_row`] (one mask per
//! sample; variances as sample variances, [`crate::ops::fast::PowerSums`]).
//! Each claim's mean test declares the skewness of the estimator it runs,
//! from its statistic's exact law.
//!
//! [`forward_attention`]: crate::ops::DropoutLayer::forward_attention

use super::fn_claim::{FnClaim, half_squared_difference, indicator, sample_means};
use super::{Card, Shape};
use super::{Claim, listed};
use crate::engine::Stream;
use crate::error::Error;
use crate::exact::{Oracle, enumerate_masks};
use crate::formulas::attention as f;
use crate::ops::fast::attention_row as fast;
use crate::ops::{Rate, Subject, TrainPass};
use crate::stats::{CentralMoments, Statistic, two_point_skewness};

/// The seed's attention row.
pub const A: [f64; 3] = [0.2, 0.3, 0.5];
/// The values the row averages.
pub const V: [f64; 3] = [1.0, -2.0, 3.0];
/// The seed's drop rate.
pub const P: f64 = 0.5;

fn rate() -> Result<Rate, Error> {
    Rate::new(P)
}

/// `b_i` takes two values, `a_i / q` with probability `q` and 0: its
/// skewness is [`two_point_skewness`]`(q)` (0 at the seed's `p = 1/2`).
fn entry_statistic() -> Statistic {
    Statistic::Mean {
        skewness: two_point_skewness(1.0 - P),
    }
}

/// Row sum, output, and the row itself of one pass.
fn pass(s: &Subject, rng: &mut Stream) -> Result<([f64; 3], f64, f64), Error> {
    let (mut b, mut m) = ([0.0; 3], [false; 3]);
    s.dropout
        .forward_attention(TrainPass::new(&A, &mut b, &mut m), P, rng)?;
    let r = b.iter().sum();
    let o = f::output_mean(&b, &V);
    Ok((b, r, o))
}

/// Index of the seed support value `r` equals, up to the rounding of three
/// divisions and two additions on values at most 2 (bound `8 ε · 2`).
pub fn support_index(r: f64) -> Option<usize> {
    f::SEED_ROW_SUMS
        .iter()
        .position(|s| (r - s).abs() <= 16.0 * f64::EPSILON)
}

/// The dropped-out row of one mask: `b_i = m_i a_i / q`.
fn masked_row(mask: &[bool], q: f64) -> [f64; 3] {
    let mut b = [0.0; 3];
    for ((b, a), &m) in b.iter_mut().zip(&A).zip(mask) {
        *b = if m { a / q } else { 0.0 };
    }
    b
}

/// `E[g(b)]` over the 8 masks.
fn oracle(dim: usize, g: fn(&[f64], &mut [f64])) -> Result<Oracle, Error> {
    let q = rate()?.q();
    enumerate_masks(A.len(), rate()?, dim, |mask, out| {
        g(&masked_row(mask, q), out)
    })
}

/// The scalar of a row the claims on sums average: the row sum `R` or
/// the output `o`.
#[derive(Clone, Copy)]
enum RowScalar {
    Sum,
    Output,
}

/// What a claim on `R` or `o` estimates: its mean, or its variance.
#[derive(Clone, Copy)]
enum Moment {
    Mean,
    Variance,
}

/// The statistic a claim on `R` or `o` declares, from the scalar's exact
/// law: both are inverted-dropout sums, of `a_i` and of `a_i v_i`
/// ([`CentralMoments::of_dropped_sum`]). Its skewness for the mean (a plain
/// mean on both paths); for the variance the larger of the single-draw
/// sample variance's (the fast path) and the pair form's (an
/// implementation's two passes),
/// [`CentralMoments::variance_skewness_on_either_path`].
fn row_scalar_statistic(scalar: RowScalar, moment: Moment) -> Statistic {
    let terms: Vec<f64> = match scalar {
        RowScalar::Sum => A.to_vec(),
        RowScalar::Output => A.iter().zip(&V).map(|(a, v)| a * v).collect(),
    };
    let moments = CentralMoments::of_dropped_sum(&terms, 1.0 - P);
    let skewness = match moment {
        Moment::Mean => moments.skewness().abs(),
        Moment::Variance => moments.variance_skewness_on_either_path(),
    };
    Statistic::Mean { skewness }
}

// A data table: the row sum R and the output o are both scalar functions of
// b with a mean and a variance claim each, so their entries share a shape
// (the fields are `fn` pointers, which cannot take that function as a value).
static CLAIMS: std::sync::LazyLock<Vec<FnClaim>> = std::sync::LazyLock::new(|| {
    vec![
        FnClaim {
            card: Card::new(
                "attention.entry_mean",
                "attention",
                "a=(0.2,0.3,0.5), p=0.5: E[b_i] = a_i",
                Shape::Vector,
                400_000,
            )
            .with_statistic(entry_statistic()),
            analytic: || Ok(f::entry_mean(&A)),
            oracle: Some(|| oracle(3, |b, out| out.copy_from_slice(b))),
            estimate: |s, b| {
                sample_means(s, b, 3, |s, rng, out| {
                    out.copy_from_slice(&pass(s, rng)?.0);
                    Ok(())
                })
            },
            fast: Some(|b| Ok(fast::row(&A, &V, P, b)?.entry_mean)),
        },
        FnClaim {
            card: Card::new(
                "attention.row_sum_mean",
                "attention",
                "E[R] = sum_i a_i = 1",
                Shape::Scalar,
                400_000,
            )
            .with_statistic(row_scalar_statistic(RowScalar::Sum, Moment::Mean)),
            analytic: || Ok(vec![f::row_sum_mean(&A)]),
            oracle: Some(|| oracle(1, |b, out| out[0] = b.iter().sum())),
            estimate: |s, b| {
                sample_means(s, b, 1, |s, rng, out| {
                    out[0] = pass(s, rng)?.1;
                    Ok(())
                })
            },
            fast: Some(|b| Ok(vec![fast::row_sums(&A, &V, P, b)?.row_sum_mean])),
        },
        FnClaim {
            card: Card::new(
                "attention.row_sum_variance",
                "attention",
                "Var R = (p/q) sum_i a_i^2 = 0.38",
                Shape::Scalar,
                400_000,
            )
            .with_statistic(row_scalar_statistic(RowScalar::Sum, Moment::Variance)),
            analytic: || Ok(vec![f::row_sum_variance(&A, rate()?)]),
            oracle: Some(|| {
                Ok(oracle(2, |b, out| {
                    let r: f64 = b.iter().sum();
                    out[0] = r;
                    out[1] = r * r;
                })?
                .variances())
            }),
            estimate: |s, b| {
                sample_means(s, b, 1, |s, rng, out| {
                    let (r1, r2) = (pass(s, rng)?.1, pass(s, rng)?.1);
                    out[0] = half_squared_difference(r1, r2);
                    Ok(())
                })
            },
            fast: Some(|b| Ok(vec![fast::row_sums(&A, &V, P, b)?.row_sum_variance])),
        },
        FnClaim {
            card: Card::new(
                "attention.row_sum_pmf",
                "attention",
                "P(R = 0, .4, .6, 1, 1.4, 1.6, 2) = (1,1,1,2,1,1,1)/8; P(R=1) = 1/4",
                Shape::Vector,
                400_000,
            )
            .with_statistic(Statistic::Indicator { trials: 1 }),
            analytic: || Ok(f::seed_row_sum_pmf()),
            oracle: Some(|| {
                oracle(7, |b, out| {
                    out.fill(0.0);
                    if let Some(i) = support_index(b.iter().sum()) {
                        out[i] = 1.0;
                    }
                })
            }),
            estimate: |s, b| {
                sample_means(s, b, 7, |s, rng, out| {
                    let r = pass(s, rng)?.1;
                    for (i, o) in out.iter_mut().enumerate() {
                        *o = indicator(support_index(r) == Some(i));
                    }
                    Ok(())
                })
            },
            fast: Some(|b| {
                fast::row_sum_distribution(&A, P, f::SEED_ROW_SUMS.len(), support_index, b)
            }),
        },
        FnClaim {
            card: Card::new(
                "attention.output_mean",
                "attention",
                "v=(1,-2,3): E[o] = sum_i a_i v_i",
                Shape::Scalar,
                400_000,
            )
            .with_statistic(row_scalar_statistic(RowScalar::Output, Moment::Mean)),
            analytic: || Ok(vec![f::output_mean(&A, &V)]),
            oracle: Some(|| oracle(1, |b, out| out[0] = f::output_mean(b, &V))),
            estimate: |s, b| {
                sample_means(s, b, 1, |s, rng, out| {
                    out[0] = pass(s, rng)?.2;
                    Ok(())
                })
            },
            fast: Some(|b| Ok(vec![fast::row_sums(&A, &V, P, b)?.output_mean])),
        },
        FnClaim {
            card: Card::new(
                "attention.output_variance",
                "attention",
                "Var o = (p/q) sum_i a_i^2 v_i^2",
                Shape::Scalar,
                400_000,
            )
            .with_statistic(row_scalar_statistic(RowScalar::Output, Moment::Variance)),
            analytic: || Ok(vec![f::output_variance(&A, &V, rate()?)]),
            oracle: Some(|| {
                Ok(oracle(2, |b, out| {
                    let o = f::output_mean(b, &V);
                    out[0] = o;
                    out[1] = o * o;
                })?
                .variances())
            }),
            estimate: |s, b| {
                sample_means(s, b, 1, |s, rng, out| {
                    let (o1, o2) = (pass(s, rng)?.2, pass(s, rng)?.2);
                    out[0] = half_squared_difference(o1, o2);
                    Ok(())
                })
            },
            fast: Some(|b| Ok(vec![fast::row_sums(&A, &V, P, b)?.output_variance])),
        },
    ]
});

/// The family's claims in report order (named and described in
/// [`super::families`]).
pub fn claims() -> Vec<&'static dyn Claim> {
    listed(&CLAIMS)
}
