//! The per-element path `dropmc bench` times the kernels against: one `f64`
//! uniform per element through the crate's [`InvertedDropout`], then the
//! statistics computed directly from the dropped vector `z`, run by the
//! engine's per-draw loop ([`crate::engine::estimate`]). The same draw as
//! the claims' generic path; only the benchmark uses it.

use crate::engine::{Budget, Sampler, Stream, estimate};
use crate::error::Error;
use crate::formulas::mean_and_variance;
use crate::ops::{DropoutLayer, InvertedDropout, LayerNorm, Rate, TrainPass};
use crate::stats::Estimate;

/// What is computed from each dropped vector `z = dropout_p(x)`.
pub(super) enum Statistics<'a> {
    /// `[M, V, R²]`, then `LN(z)_k` per unit when a LayerNorm is given.
    Norm(Option<&'a LayerNorm>),
    /// `[R, (R − Σa)², o]` of an attention row (`x = a`) with values `v`.
    AttentionRow { v: &'a [f64], total: f64 },
}

/// Estimates of `statistics` over `budget.samples` draws of
/// `dropout_p(x)`, in the order [`Statistics`] lists them.
pub(super) fn estimate_per_element(
    x: &[f64],
    p: f64,
    statistics: Statistics,
    budget: Budget,
) -> Result<Vec<Estimate>, Error> {
    Rate::new(p)?;
    crate::error::check_finite_vec("x", x)?;
    Ok(estimate(&DropThen { x, p, statistics }, budget)?.estimates())
}

/// One training pass of [`InvertedDropout`] over `x`, then the statistics.
struct DropThen<'a> {
    x: &'a [f64],
    p: f64,
    statistics: Statistics<'a>,
}

impl Sampler for DropThen<'_> {
    type Scratch = (Vec<f64>, Vec<bool>);

    fn dim(&self) -> usize {
        match self.statistics {
            Statistics::Norm(ln) => 3 + ln.map_or(0, LayerNorm::dim),
            Statistics::AttentionRow { .. } => 3,
        }
    }

    fn scratch(&self) -> Self::Scratch {
        (vec![0.0; self.x.len()], vec![false; self.x.len()])
    }

    fn draw(
        &self,
        rng: &mut Stream,
        (z, mask): &mut Self::Scratch,
        out: &mut [f64],
    ) -> Result<(), Error> {
        InvertedDropout.forward_train(TrainPass::new(self.x, z, mask), self.p, rng)?;
        match self.statistics {
            Statistics::Norm(ln) => {
                let (m, v) = mean_and_variance(z);
                out[0] = m;
                out[1] = v;
                out[2] = z.iter().map(|t| t * t).sum::<f64>() / z.len() as f64;
                if let Some(ln) = ln {
                    ln.forward(z, &mut out[3..])?;
                }
            }
            Statistics::AttentionRow { v, total } => {
                let r: f64 = z.iter().sum();
                out[0] = r;
                out[1] = (r - total) * (r - total);
                out[2] = z.iter().zip(v).map(|(b, v)| b * v).sum();
            }
        }
        Ok(())
    }
}
