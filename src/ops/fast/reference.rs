//! The straightforward samplers the fast path is tested against: one
//! `f64` uniform per element through the crate's [`InvertedDropout`], then
//! `M`, `V`, `R²`, `LN(z)`, `R` and `o` computed directly from `z`, run by
//! the engine's per-draw loop ([`crate::engine::estimate`]).

use super::attention::AttentionEstimates;
use super::norm::{NormEstimates, check_eps};
use crate::engine::{Budget, Sampler, Stream, estimate};
use crate::error::{Error, check_finite_vec, check_len};
use crate::ops::{DropoutLayer, InvertedDropout, Rate, TrainPass};

/// Reference sampler of `[M, V, R², LN(z)_0, …, LN(z)_{d−1}]`.
#[derive(Debug, Clone)]
pub struct ReferenceNorm {
    x: Vec<f64>,
    p: f64,
    eps: f64,
    ln: bool,
}

impl ReferenceNorm {
    /// Same parameters as [`super::FastNorm::new`].
    pub fn new(x: &[f64], p: f64, eps: f64, ln: bool) -> Result<Self, Error> {
        check_finite_vec("x", x)?;
        Rate::new(p)?;
        check_eps(eps)?;
        Ok(ReferenceNorm {
            x: x.to_vec(),
            p,
            eps,
            ln,
        })
    }

    /// Runs `budget.samples` masks.
    pub fn estimate(&self, budget: Budget) -> Result<NormEstimates, Error> {
        let e = estimate(&DropThen(self), budget)?.estimates();
        Ok(NormEstimates {
            mean: e[0],
            var: e[1],
            r2: e[2],
            ln: e[3..].to_vec(),
        })
    }
}

impl FromDropped for ReferenceNorm {
    fn dropped(&self) -> (&[f64], f64) {
        (&self.x, self.p)
    }

    fn dim(&self) -> usize {
        3 + if self.ln { self.x.len() } else { 0 }
    }

    fn statistics(&self, z: &[f64], out: &mut [f64]) {
        let d = z.len() as f64;
        let m = z.iter().sum::<f64>() / d;
        let v = z.iter().map(|t| (t - m) * (t - m)).sum::<f64>() / d;
        let r2 = z.iter().map(|t| t * t).sum::<f64>() / d;
        out[0] = m;
        out[1] = v;
        out[2] = r2;
        if self.ln {
            let s = (v + self.eps).sqrt();
            for (o, t) in out[3..].iter_mut().zip(z.iter()) {
                *o = (t - m) / s;
            }
        }
    }
}

/// Reference sampler of `[R, (R − Σa)², o]` for one attention row.
#[derive(Debug, Clone)]
pub struct ReferenceAttention {
    a: Vec<f64>,
    v: Vec<f64>,
    p: f64,
    total: f64,
}

impl ReferenceAttention {
    /// Same parameters as [`super::FastAttention::new`].
    pub fn new(a: &[f64], v: &[f64], p: f64) -> Result<Self, Error> {
        check_finite_vec("a", a)?;
        check_finite_vec("v", v)?;
        check_len("v", v, a.len())?;
        Rate::new(p)?;
        Ok(ReferenceAttention {
            a: a.to_vec(),
            v: v.to_vec(),
            p,
            total: a.iter().sum(),
        })
    }

    /// Runs `budget.samples` rows.
    pub fn estimate(&self, budget: Budget) -> Result<AttentionEstimates, Error> {
        let e = estimate(&DropThen(self), budget)?.estimates();
        Ok(AttentionEstimates {
            row_sum: e[0],
            row_sum_var: e[1],
            output: e[2],
        })
    }
}

impl FromDropped for ReferenceAttention {
    fn dropped(&self) -> (&[f64], f64) {
        (&self.a, self.p)
    }

    fn dim(&self) -> usize {
        3
    }

    fn statistics(&self, b: &[f64], out: &mut [f64]) {
        let r: f64 = b.iter().sum();
        out[0] = r;
        out[1] = (r - self.total) * (r - self.total);
        out[2] = b.iter().zip(&self.v).map(|(b, v)| b * v).sum();
    }
}

/// What a reference sampler computes from one training pass of the crate's
/// [`InvertedDropout`]: the one draw both samplers share is [`DropThen`]'s.
trait FromDropped: Sync {
    /// The vector dropout is applied to, and the drop rate.
    fn dropped(&self) -> (&[f64], f64);
    /// Number of statistics per draw.
    fn dim(&self) -> usize;
    /// The statistics of one dropped vector `z`, into `out` (`dim` long).
    fn statistics(&self, z: &[f64], out: &mut [f64]);
}

/// The engine's [`Sampler`] for a [`FromDropped`]: one training pass of
/// [`InvertedDropout`] over the vector, then its statistics.
struct DropThen<'a, T>(&'a T);

impl<T: FromDropped> Sampler for DropThen<'_, T> {
    type Scratch = (Vec<f64>, Vec<bool>);

    fn dim(&self) -> usize {
        self.0.dim()
    }

    fn scratch(&self) -> Self::Scratch {
        let d = self.0.dropped().0.len();
        (vec![0.0; d], vec![false; d])
    }

    fn draw(
        &self,
        rng: &mut Stream,
        (z, mask): &mut Self::Scratch,
        out: &mut [f64],
    ) -> Result<(), Error> {
        let (x, p) = self.0.dropped();
        InvertedDropout.forward_train(TrainPass::new(x, z, mask), p, rng)?;
        self.0.statistics(z, out);
        Ok(())
    }
}
