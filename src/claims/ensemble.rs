//! The ensemble family: the mask average of `f(dropout(x))` against the
//! evaluation output `f(x)`. Derivations: [`crate::formulas::ensemble`].
//!
//! Each claim's estimate is the measured gap `mean of f(z) − f(x)`. For the
//! affine `f` the claimed gap is 0 and the oracle enumerates it; for the
//! convex `f` the claimed gap is the finite sum over the 64 masks (Jensen
//! guarantees it is ≥ 0, and computing it refuses a negative value), and
//! the report shows the measured gap beside it. On the mathematics the
//! gaps come from [`crate::ops::fast::ensemble`]: each `f` here is a function of
//! one masked sum, so a mask costs one table look-up.

use super::fn_claim::{FastFn, sample_means};
use super::listed;
use super::{Card, Claim, Shape};
use crate::engine::{Budget, Stream};
use crate::error::Error;
use crate::exact::{Oracle, enumerated_gap, gap_moments};
use crate::formulas::ensemble as f;
use crate::ops::fast::ensemble as fast;
use crate::ops::{Rate, Subject, TrainPass};
use crate::stats::{DEFAULT_SKEWNESS, Estimate, Statistic};
use std::sync::OnceLock;

/// The input, `d = 6`.
pub const X: [f64; 6] = [0.8, -0.4, 1.2, 0.3, -1.0, 0.6];
/// Weights of the linear map.
pub const W: [f64; 6] = [0.5, -1.0, 0.7, 0.2, -0.3, 1.1];
/// Offset: `w·x + c = 0.26`, close to the ReLU's kink.
pub const C: f64 = -2.4;
/// Drop rate.
pub const P: f64 = 0.3;

/// The family name its claims carry.
const FAMILY: &str = "ensemble";

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

/// Whether the function of the dropout output is affine (gap 0) or convex
/// (gap `G ≥ 0` by Jensen).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Curvature {
    Affine,
    Convex,
}

/// A claim on the ensemble gap of one function `g` of the dropout output.
/// Closed form: 0 for an affine `g` (its oracle enumerates the gap), the
/// enumerated Jensen gap for a convex one (refusing a negative value).
/// Estimate: the mean of `g(z) − g(x)`; on the mathematics, `fast`.
pub struct GapClaim {
    /// What it states.
    pub card: Card,
    pub g: fn(&[f64]) -> f64,
    pub curvature: Curvature,
    /// The bit-mask estimator of [`crate::ops::fast::ensemble`].
    pub fast: FastFn,
    /// The skewness its mean test declares, computed once
    /// ([`GapClaim::declared_skewness`]).
    pub skewness: OnceLock<f64>,
}

impl GapClaim {
    /// The skewness of the per-draw gap `g(z) − g(x)`, the statistic both
    /// paths average, from its exact law over the 64 masks
    /// ([`gap_moments`]); the default [`DEFAULT_SKEWNESS`] only if that
    /// enumeration fails (then the claim's closed form or oracle fails
    /// too, and the claim with it).
    pub fn declared_skewness(&self) -> f64 {
        *self.skewness.get_or_init(|| {
            rate()
                .and_then(|r| gap_moments(&X, r, self.g))
                .map_or(DEFAULT_SKEWNESS, |m| m.skewness().abs())
        })
    }
}

impl Claim for GapClaim {
    fn card(&self) -> Card {
        self.card.with_statistic(Statistic::Mean {
            skewness: self.declared_skewness(),
        })
    }
    fn analytic(&self) -> Result<Vec<f64>, Error> {
        match self.curvature {
            Curvature::Affine => Ok(vec![0.0]),
            Curvature::Convex => convex_gap(self.g),
        }
    }
    fn oracle(&self) -> Result<Option<Oracle>, Error> {
        if self.curvature == Curvature::Convex {
            return Ok(None);
        }
        let (gap, rounding) = enumerated_gap(&X, rate()?, self.g)?;
        Ok(Some(Oracle {
            values: vec![gap],
            rounding: vec![rounding],
        }))
    }
    fn estimate(&self, subject: &Subject, budget: Budget) -> Result<Vec<Estimate>, Error> {
        let g = self.g;
        sample_means(subject, budget, 1, move |s, rng, out| {
            out[0] = gap_draw(s, rng, g)?;
            Ok(())
        })
    }
    fn fast_estimate(&self, budget: Budget) -> Option<Result<Vec<Estimate>, Error>> {
        Some((self.fast)(budget))
    }
    fn fast_path(&self) -> Option<super::FastPath> {
        Some(super::FastPath::Masks)
    }
    /// The draw is the gap `g(m ⊙ x / q) − g(x)` over the family's masks.
    fn law(&self) -> super::Law {
        let draw = super::Draw::MaskedFunction {
            x: X.to_vec(),
            p: P,
            g: self.g,
        };
        super::Law::repeated(draw, 1, super::Estimator::Mean)
    }
}

/// The family's claims, in report order.
static CLAIMS: [GapClaim; 3] = [
    GapClaim {
        card: Card::new(
            "ensemble.affine_gap",
            FAMILY,
            "affine f = w.z + c: E_m[f(z)] - f(x) = 0",
            Shape::Scalar,
            400_000,
        ),
        g: affine,
        curvature: Curvature::Affine,
        skewness: OnceLock::new(),
        fast: |b| Ok(vec![fast::gap(&fast::affine_gap_kernel(&X, &W, C, P)?, b)?]),
    },
    GapClaim {
        card: Card::new(
            "ensemble.relu_gap",
            FAMILY,
            "f = relu(w.z + c): E_m[f(z)] - f(x) = G >= 0 (Jensen; G over 64 masks)",
            Shape::Scalar,
            400_000,
        ),
        g: relu,
        curvature: Curvature::Convex,
        skewness: OnceLock::new(),
        fast: |b| Ok(vec![fast::gap(&fast::relu_gap_kernel(&X, &W, C, P)?, b)?]),
    },
    GapClaim {
        card: Card::new(
            "ensemble.logsumexp_gap",
            FAMILY,
            "f = log sum exp z: E_m[f(z)] - f(x) = G >= 0 (Jensen; G over 64 masks)",
            Shape::Scalar,
            400_000,
        ),
        g: f::log_sum_exp,
        curvature: Curvature::Convex,
        skewness: OnceLock::new(),
        fast: |b| Ok(vec![fast::gap(&fast::log_sum_exp_gap_kernel(&X, P)?, b)?]),
    },
];

/// The family's claims in report order (named and described in
/// [`super::families`]).
pub fn claims() -> Vec<&'static dyn Claim> {
    listed(&CLAIMS)
}
