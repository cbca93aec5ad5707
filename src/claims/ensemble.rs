//! The ensemble family: the mask average of `f(dropout(x))` against the
//! evaluation output `f(x)`. Derivations: [`crate::formulas::ensemble`].
//!
//! Each claim's estimate is the measured gap `mean of f(z) − f(x)`. For the
//! affine `f` the claimed gap is 0 and the oracle enumerates it; for the
//! convex `f` the claimed gap is the finite sum over the 64 masks (Jensen
//! guarantees it is ≥ 0, and computing it refuses a negative value), and
//! the report shows the measured gap beside it. On the mathematics the
//! gaps come from [`crate::fast::ensemble`]: each `f` here is a function of
//! one masked sum, so a mask costs one table look-up.

use super::Shape;
use super::fn_claim::{
    FastFn, FastFnClaim, FnClaim, dropout_alone_family, sample_means, with_fast,
};
use crate::engine::Stream;
use crate::error::Error;
use crate::exact::{Oracle, enumerated_gap};
use crate::fast::ensemble as fast;
use crate::formulas::ensemble as f;
use crate::ops::{Rate, Subject, TrainPass};
use crate::registry::Family;
use crate::stats::Statistic;

/// The input, `d = 6`.
pub const X: [f64; 6] = [0.8, -0.4, 1.2, 0.3, -1.0, 0.6];
/// Weights of the linear map.
pub const W: [f64; 6] = [0.5, -1.0, 0.7, 0.2, -0.3, 1.1];
/// Offset: `w·x + c = 0.26`, close to the ReLU's kink.
pub const C: f64 = -2.4;
/// Drop rate.
pub const P: f64 = 0.3;

fn rate() -> Result<Rate, Error> {
    Rate::new(P)
}

fn gap_draw(s: &Subject, rng: &mut Stream, g: fn(&[f64]) -> f64) -> Result<f64, Error> {
    let (mut z, mut m) = ([0.0; 6], [false; 6]);
    s.dropout
        .forward_train(TrainPass::new(&X, &mut z, &mut m), P, rng)?;
    Ok(g(&z) - g(&X))
}

fn affine(z: &[f64]) -> f64 {
    f::affine(&W, C, z)
}
fn relu(z: &[f64]) -> f64 {
    f::relu_affine(&W, C, z)
}

/// The Jensen gap of a convex `g`, refusing a negative value.
fn convex_gap(g: fn(&[f64]) -> f64) -> Result<Vec<f64>, Error> {
    let (gap, rounding) = enumerated_gap(&X, rate()?, g)?;
    if gap < -rounding {
        return Err(Error::Degenerate {
            what: format!(
                "a convex function's mask average fell below f(x) by {}",
                -gap
            ),
        });
    }
    Ok(vec![gap])
}

// The claims' `estimate` closures differ only in the function they pass to
// `gap_draw`: `FnClaim` holds plain `fn` pointers, which cannot capture it.
static CLAIMS: std::sync::LazyLock<Vec<FastFnClaim>> = std::sync::LazyLock::new(|| {
    with_fast(
        vec![
            FnClaim {
                id: "ensemble.affine_gap",
                family: "ensemble",
                formula: "affine f = w.z + c: E_m[f(z)] - f(x) = 0",
                shape: Shape::Scalar,
                samples: 400_000,
                statistic: Statistic::default(),
                analytic: || Ok(vec![0.0]),
                oracle: Some(|| {
                    let (gap, rounding) = enumerated_gap(&X, rate()?, affine)?;
                    Ok(Oracle {
                        values: vec![gap],
                        rounding: vec![rounding],
                    })
                }),
                estimate: |s, b| {
                    sample_means(s, b, 1, |s, rng, out| {
                        out[0] = gap_draw(s, rng, affine)?;
                        Ok(())
                    })
                },
            },
            FnClaim {
                id: "ensemble.relu_gap",
                family: "ensemble",
                formula: "f = relu(w.z + c): E_m[f(z)] - f(x) = G >= 0 (Jensen; G over 64 masks)",
                shape: Shape::Scalar,
                samples: 400_000,
                statistic: Statistic::default(),
                analytic: || convex_gap(relu),
                oracle: None,
                estimate: |s, b| {
                    sample_means(s, b, 1, |s, rng, out| {
                        out[0] = gap_draw(s, rng, relu)?;
                        Ok(())
                    })
                },
            },
            FnClaim {
                id: "ensemble.logsumexp_gap",
                family: "ensemble",
                formula: "f = log sum exp z: E_m[f(z)] - f(x) = G >= 0 (Jensen; G over 64 masks)",
                shape: Shape::Scalar,
                samples: 400_000,
                statistic: Statistic::default(),
                analytic: || convex_gap(f::log_sum_exp),
                oracle: None,
                estimate: |s, b| {
                    sample_means(s, b, 1, |s, rng, out| {
                        out[0] = gap_draw(s, rng, f::log_sum_exp)?;
                        Ok(())
                    })
                },
            },
        ],
        &FAST,
    )
});

/// The fast estimators (on the mathematics) by claim id: every claim of
/// this family has one, from the bit-mask kernels of [`crate::fast::ensemble`].
const FAST: [(&str, FastFn); 3] = [
    ("ensemble.affine_gap", |b| {
        Ok(vec![fast::gap(&fast::affine_gap_kernel(&X, &W, C, P)?, b)?])
    }),
    ("ensemble.relu_gap", |b| {
        Ok(vec![fast::gap(&fast::relu_gap_kernel(&X, &W, C, P)?, b)?])
    }),
    ("ensemble.logsumexp_gap", |b| {
        Ok(vec![fast::gap(&fast::log_sum_exp_gap_kernel(&X, P)?, b)?])
    }),
];

/// This family: its claims, in report order.
pub fn family() -> Family {
    dropout_alone_family(
        "ensemble",
        "the ensemble gap of a convex function of the dropout output",
        &CLAIMS,
    )
}
