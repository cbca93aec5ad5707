//! The in-crate example family's claim (compiled with the `example-family`
//! cargo feature only; closed form and derivation:
//! [`crate::formulas::example`]): the product of two adjacent dropped-out
//! units is unbiased. It declares its statistic's law ([`Law`]) as every
//! claim testing a mean must, and is registered by one line of
//! `claims::families`.

use super::fn_claim::{FnClaim, sample_means};
use super::{Card, Claim, Draw, Estimator, Law, Shape, listed};
use crate::error::Error;
use crate::exact::enumerate_masks;
use crate::formulas::example as f;
use crate::ops::{Rate, TrainPass};
use crate::stats::{Statistic, two_point_skewness};

/// The family name its claims carry.
pub const FAMILY: &str = "in_crate_example";
/// The configuration: mixed signs, no zero unit.
pub const X: [f64; 4] = [0.5, -1.0, 2.0, 1.5];
/// The drop rate.
pub const P: f64 = 0.3;

fn rate() -> Result<Rate, Error> {
    Rate::new(P)
}

/// The product `z_i z_{i+1} = m_i m_{i+1} x_i x_{i+1} / q²` is
/// `x_i x_{i+1} / q²` when both units are kept (probability `q²`) and 0
/// otherwise: a two-point draw with `keep = q²`, tested as a mean (skewness
/// [`two_point_skewness`]`(q²)`, 0.04 at `p = 0.3`; at `p = 0.2`,
/// `q² = 0.64`, the Student-t test's exact size at the minimum budget is
/// 2.17 α, above the suite's 2 α, which `tests/test_sizes.rs` reports).
fn keep() -> f64 {
    (1.0 - P) * (1.0 - P)
}

/// Writes `z_i z_{i+1}` for each adjacent pair of the dropped-out `z`.
fn adjacent_products_into(z: &[f64], out: &mut [f64]) {
    for (o, w) in out.iter_mut().zip(z.windows(2)) {
        *o = w[0] * w[1];
    }
}

static CLAIMS: std::sync::LazyLock<[FnClaim; 1]> = std::sync::LazyLock::new(|| {
    [FnClaim {
        card: Card::new(
            "in_crate_example.adjacent_product",
            FAMILY,
            "i != j: E[z_i z_j] = x_i x_j (adjacent units)",
            Shape::Vector,
            200_000,
        )
        .with_statistic(Statistic::Mean {
            skewness: two_point_skewness(keep()),
        }),
        analytic: || Ok(f::adjacent_products(&X)),
        oracle: Some(|| {
            let q = rate()?.q();
            enumerate_masks(X.len(), rate()?, X.len() - 1, |mask, out| {
                let z: Vec<f64> = X
                    .iter()
                    .zip(mask)
                    .map(|(x, &m)| if m { x / q } else { 0.0 })
                    .collect();
                adjacent_products_into(&z, out);
            })
        }),
        estimate: |s, b| {
            sample_means(s, b, X.len() - 1, |s, rng, out| {
                let (mut z, mut m) = ([0.0; X.len()], [false; X.len()]);
                s.dropout
                    .forward_train(TrainPass::new(&X, &mut z, &mut m), P, rng)?;
                adjacent_products_into(&z, out);
                Ok(())
            })
        },
        fast: None,
        law: Some(|| {
            Law::repeated(
                Draw::TwoPoint { keep: keep() },
                X.len() - 1,
                Estimator::Mean,
            )
        }),
    }]
});

/// The family's claims in report order.
pub fn claims() -> Vec<&'static dyn Claim> {
    listed(&*CLAIMS)
}
