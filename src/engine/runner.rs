//! The parallel estimation loop.

use rayon::prelude::*;

use super::stream::{Stream, stream};
use crate::error::Error;
use crate::stats::MeanAccumulator;

/// Draws per chunk: the unit of work and of seeding.
pub const CHUNK: u64 = 4096;
/// Chunks per parallel block: bounds memory at `BLOCK` accumulators.
pub const BLOCK: u64 = 64;

/// How many draws to make, from which seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub samples: u64,
    pub seed: u64,
}

impl Budget {
    /// A budget of `samples` draws from `seed`. At least two draws are needed
    /// for a standard error.
    pub fn new(samples: u64, seed: u64) -> Result<Self, Error> {
        if samples < 2 {
            return Err(Error::TooFewSamples {
                needed: 2,
                got: samples,
            });
        }
        Ok(Budget { samples, seed })
    }
}

/// One Monte Carlo draw: a vector of statistics whose expectations are the
/// quantities being estimated.
///
/// A variance is estimated without knowing the mean by drawing two
/// independent copies inside one draw and emitting `(t - t')² / 2`, whose
/// expectation is exactly `Var t`; a covariance likewise by
/// `(s - s')(t - t') / 2`. Every statistic is then a plain mean, with a plain
/// standard error.
pub trait Sampler: Sync {
    /// Per-chunk working memory (mask and output buffers).
    type Scratch: Send;
    /// Number of statistics per draw.
    fn dim(&self) -> usize;
    /// Fresh working memory for one chunk.
    fn scratch(&self) -> Self::Scratch;
    /// Makes one draw from `rng` and writes its statistics into `out`
    /// (`out.len() == self.dim()`).
    fn draw(
        &self,
        rng: &mut Stream,
        scratch: &mut Self::Scratch,
        out: &mut [f64],
    ) -> Result<(), Error>;
}

/// Runs `budget.samples` draws of `sampler` and returns the accumulated means.
/// A draw that fails stops the run with its error (the first in chunk order).
///
/// Bit-identical for the same budget whatever the rayon thread count: see the
/// module contract.
pub fn estimate<S: Sampler>(sampler: &S, budget: Budget) -> Result<MeanAccumulator, Error> {
    estimate_with_progress(sampler, budget, &|_| {})
}

/// [`estimate`], calling `progress(1)` after every draw (from whichever
/// thread made it), for samplers whose draws are slow enough to show (a
/// deep-stack replicate trains whole networks). The result is the same bits:
/// the callback only observes.
pub fn estimate_with_progress<S: Sampler>(
    sampler: &S,
    budget: Budget,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<MeanAccumulator, Error> {
    let budget = Budget::new(budget.samples, budget.seed)?;
    let dim = sampler.dim();
    let chunks = budget.samples.div_ceil(CHUNK);
    let mut total = MeanAccumulator::new(dim);
    let mut first = 0;
    while first < chunks {
        let last = (first + BLOCK).min(chunks);
        let carry = super::cancel::carry();
        let block: Vec<Result<MeanAccumulator, Error>> = (first..last)
            .into_par_iter()
            .map(|chunk| carry.run(|| run_chunk(sampler, budget, chunk, progress)))
            .collect();
        for acc in block {
            total.merge(&acc?);
        }
        first = last;
    }
    Ok(total)
}

fn run_chunk<S: Sampler>(
    sampler: &S,
    budget: Budget,
    chunk: u64,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<MeanAccumulator, Error> {
    super::cancel::checkpoint()?;
    let start = chunk * CHUNK;
    let draws = CHUNK.min(budget.samples - start);
    let mut rng = stream(budget.seed, chunk);
    let mut scratch = sampler.scratch();
    let mut out = vec![0.0; sampler.dim()];
    let mut acc = MeanAccumulator::new(sampler.dim());
    for _ in 0..draws {
        sampler.draw(&mut rng, &mut scratch, &mut out)?;
        acc.push(&out);
        progress(1);
    }
    Ok(acc)
}
