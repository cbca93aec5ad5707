//! The mask-shape family: independent versus shared-over-positions masks on
//! a `4 × 3` block. Derivations: [`crate::formulas::mask_shape`]. Oracles
//! enumerate all masks (2^12 independent, 2^3 shared). On the mathematics
//! every claim uses the bit-mask estimators of [`crate::ops::fast::mask_shape`]:
//! one mask per sample, the independent variance as a sample variance (its
//! test declares that estimator's skewness from the exact law), the shared
//! variance as the pair form of one unit carrying the feature's total (a
//! scaled count, tested exactly).

use super::fn_claim::{FnClaim, half_squared_difference, indicator, sample_means};
use super::{Card, Shape};
use super::{Claim, listed};
use crate::engine::{Stream, stream};
use crate::error::Error;
use crate::exact::{Oracle, enumerate_masks};
use crate::formulas::mask_shape as f;
use crate::ops::fast::mask_shape as fast;
use crate::ops::{BlockPass, DropoutLayer, MaskShape, Rate, Subject, TrainPass};
use crate::stats::{CentralMoments, Statistic};

/// Positions `T`.
pub const T: usize = 4;
/// Features `d`.
pub const D: usize = 3;
/// The block, row-major; every entry non-zero so zeros reveal the mask.
pub const X: [f64; 12] = [
    1.0, 0.5, -1.0, //
    2.0, 0.5, 1.0, //
    1.5, -0.5, 2.0, //
    0.5, 1.0, -0.5,
];
/// Drop rate.
pub const P: f64 = 0.3;

fn rate() -> Result<Rate, Error> {
    Rate::new(P)
}

fn pass(s: &Subject, shape: MaskShape, rng: &mut Stream) -> Result<[f64; 12], Error> {
    let (mut z, mut m) = ([0.0; 12], [false; 12]);
    s.dropout.forward_positions(
        BlockPass::new(TrainPass::new(&X, &mut z, &mut m), T, shape),
        P,
        rng,
    )?;
    Ok(z)
}

fn column_sums(z: &[f64]) -> [f64; D] {
    let mut s = [0.0; D];
    for (i, v) in z.iter().enumerate() {
        s[i % D] += v;
    }
    s
}

fn variance_draw(
    s: &Subject,
    shape: MaskShape,
    rng: &mut Stream,
    out: &mut [f64],
) -> Result<(), Error> {
    let (a, b) = (
        column_sums(&pass(s, shape, rng)?),
        column_sums(&pass(s, shape, rng)?),
    );
    for k in 0..D {
        out[k] = half_squared_difference(a[k], b[k]);
    }
    Ok(())
}

fn zero_column_draw(
    s: &Subject,
    shape: MaskShape,
    rng: &mut Stream,
    out: &mut [f64],
) -> Result<(), Error> {
    let z = pass(s, shape, rng)?;
    for (k, o) in out.iter_mut().enumerate() {
        *o = indicator(z.iter().skip(k).step_by(D).all(|v| *v == 0.0));
    }
    Ok(())
}

/// The mask bits of a shape: one per entry (independent), one per feature
/// broadcast to every row (shared).
fn mask_bits(shared: bool) -> usize {
    if shared { D } else { T * D }
}

/// The column sums `S_k = Σ_t m_tk x_tk / q` of one mask.
fn masked_column_sums(mask: &[bool], shared: bool, q: f64) -> [f64; D] {
    let mut s = [0.0; D];
    for (i, x) in X.iter().enumerate() {
        let m = if shared { mask[i % D] } else { mask[i] };
        if m {
            s[i % D] += x / q;
        }
    }
    s
}

/// Var S_k by enumeration: the independent case over all `T·d` masks, the
/// shared case over `d` feature masks broadcast to every row.
fn variance_oracle(shared: bool) -> Result<Oracle, Error> {
    let q = rate()?.q();
    let raw = enumerate_masks(mask_bits(shared), rate()?, 2 * D, |mask, out| {
        let s = masked_column_sums(mask, shared, q);
        for k in 0..D {
            out[k] = s[k];
            out[D + k] = s[k] * s[k];
        }
    })?;
    Ok(raw.variances())
}

/// The statistic `mask_shape.independent_variance` declares: each column
/// sum is the inverted-dropout sum of its `T` entries
/// ([`CentralMoments::of_dropped_sum`]), and the fast path runs its
/// single-draw sample variance, an implementation the pair form of two
/// passes; the larger skewness of the two over the three columns
/// ([`CentralMoments::variance_skewness_on_either_path`]).
fn independent_variance_statistic() -> Statistic {
    let skewness = (0..D)
        .map(|k| {
            let column: Vec<f64> = X.iter().skip(k).step_by(D).copied().collect();
            CentralMoments::of_dropped_sum(&column, 1.0 - P).variance_skewness_on_either_path()
        })
        .fold(0.0, f64::max);
    Statistic::Mean { skewness }
}

fn zero_column_oracle(shared: bool) -> Result<Oracle, Error> {
    enumerate_masks(mask_bits(shared), rate()?, D, |mask, out| {
        for (k, o) in out.iter_mut().enumerate() {
            *o = indicator(if shared {
                !mask[k]
            } else {
                (0..T).all(|t| !mask[t * D + k])
            });
        }
    })
}

/// The shape a layer actually uses when asked for `requested`, judged from
/// its outputs alone over `draws` draws of [`X`] (see
/// [`crate::formulas::mask_shape`]): any column with some entries zero and
/// some not means independent masks; none means shared.
pub fn observed_shape(
    layer: &dyn DropoutLayer,
    requested: MaskShape,
    draws: u64,
    seed: u64,
) -> Result<MaskShape, Error> {
    let mut rng = stream(seed, 0);
    let (mut z, mut m) = ([0.0; 12], [false; 12]);
    for _ in 0..draws {
        layer.forward_positions(
            BlockPass::new(TrainPass::new(&X, &mut z, &mut m), T, requested),
            P,
            &mut rng,
        )?;
        let mixed = (0..D).any(|k| {
            let zeros = (0..T).filter(|t| z[t * D + k] == 0.0).count();
            zeros > 0 && zeros < T
        });
        if mixed {
            return Ok(MaskShape::Independent);
        }
    }
    Ok(MaskShape::SharedOverPositions)
}

/// Draws [`observed_shape`] uses by default, and the chance that an
/// independent layer looks shared after them.
pub fn default_shape_draws() -> (u64, f64) {
    let draws = 100;
    let miss = rate().map_or(1.0, |r| f::independent_never_mixed(T, D, draws, r));
    (draws, miss)
}

// A data table: two quantities (column variance, all-zero column) under two
// mask shapes, so the entries of one quantity share a shape and differ in
// the mask shape they name.
static CLAIMS: std::sync::LazyLock<Vec<FnClaim>> = std::sync::LazyLock::new(|| {
    vec![
        FnClaim {
            card: Card::new(
                "mask_shape.independent_variance",
                "mask_shape",
                "T=4, d=3, independent: Var S_k = (p/q) sum_t x_tk^2",
                Shape::Vector,
                200_000,
            )
            .with_statistic(independent_variance_statistic()),
            analytic: || Ok(f::independent_variance(&X, D, rate()?)),
            oracle: Some(|| variance_oracle(false)),
            estimate: |s, b| {
                sample_means(s, b, D, |s, rng, out| {
                    variance_draw(s, MaskShape::Independent, rng, out)
                })
            },
            fast: Some(|b| fast::column_sum_variances::<D>(&X, T, false, P, b)),
        },
        FnClaim {
            card: Card::new(
                "mask_shape.shared_variance",
                "mask_shape",
                "shared over positions: Var S_k = (p/q) (sum_t x_tk)^2",
                Shape::Vector,
                200_000,
            )
            // S_k is one unit carrying the feature's total: its pair form is
            // a scaled count, on both paths.
            .with_statistic(Statistic::unit_pair_form(P)),
            analytic: || Ok(f::shared_variance(&X, D, rate()?)),
            oracle: Some(|| variance_oracle(true)),
            estimate: |s, b| {
                sample_means(s, b, D, |s, rng, out| {
                    variance_draw(s, MaskShape::SharedOverPositions, rng, out)
                })
            },
            fast: Some(|b| fast::shared_column_pair_variances::<D>(&X, T, P, b)),
        },
        FnClaim {
            card: Card::new(
                "mask_shape.independent_zero_column",
                "mask_shape",
                "independent: P(column k all zero) = p^T",
                Shape::Vector,
                200_000,
            )
            .with_statistic(Statistic::Indicator { trials: 1 }),
            analytic: || Ok(f::zero_column_probability(T, D, false, rate()?)),
            oracle: Some(|| zero_column_oracle(false)),
            estimate: |s, b| {
                sample_means(s, b, D, |s, rng, out| {
                    zero_column_draw(s, MaskShape::Independent, rng, out)
                })
            },
            fast: Some(|b| fast::zero_column_probabilities(T, D, false, P, b)),
        },
        FnClaim {
            card: Card::new(
                "mask_shape.shared_zero_column",
                "mask_shape",
                "shared: P(column k all zero) = p",
                Shape::Vector,
                200_000,
            )
            .with_statistic(Statistic::Indicator { trials: 1 }),
            analytic: || Ok(f::zero_column_probability(T, D, true, rate()?)),
            oracle: Some(|| zero_column_oracle(true)),
            estimate: |s, b| {
                sample_means(s, b, D, |s, rng, out| {
                    zero_column_draw(s, MaskShape::SharedOverPositions, rng, out)
                })
            },
            fast: Some(|b| fast::zero_column_probabilities(T, D, true, P, b)),
        },
    ]
});

/// The family's claims in report order (named and described in
/// [`super::families`]).
pub fn claims() -> Vec<&'static dyn Claim> {
    listed(&CLAIMS)
}
