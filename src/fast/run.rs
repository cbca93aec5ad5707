//! The fast path's parallel loop: the engine's chunking contract, with a
//! whole chunk handed to a kernel instead of one draw at a time.
//!
//! Exactly as [`crate::engine::estimate`]: the draws are cut into fixed chunks
//! of [`CHUNK`]; chunk `c` reads only the ChaCha8 stream `(seed, c)`; chunks
//! run on rayon in blocks of [`BLOCK`] and their sums are added to the total
//! in chunk order. A kernel's chunk result is a vector of plain `f64` sums
//! that starts from zero, so the total is the same sequence of additions on
//! any number of threads: bit-identical results, memory of one block of sum
//! vectors whatever the sample count.

use rayon::prelude::*;

use crate::engine::{BLOCK, Budget, CHUNK, Stream, stream};
use crate::error::Error;
use crate::stats::Estimate;

/// A kernel that turns one chunk's stream into a vector of sums.
pub trait ChunkKernel: Sync {
    /// Length of the sum vector.
    fn width(&self) -> usize;
    /// Makes `draws` draws from `rng` and adds their statistics into `sums`
    /// (zeroed by the caller), in a fixed order.
    fn chunk(&self, rng: &mut Stream, draws: usize, sums: &mut [f64]);
}

/// Runs `budget.samples` draws of `kernel` and returns the total sums.
pub fn run_chunks<K: ChunkKernel>(kernel: &K, budget: Budget) -> Result<Vec<f64>, Error> {
    let budget = Budget::new(budget.samples, budget.seed)?;
    let chunks = budget.samples.div_ceil(CHUNK);
    let mut total = vec![0.0; kernel.width()];
    let mut first = 0;
    while first < chunks {
        let last = (first + BLOCK).min(chunks);
        let block: Vec<Vec<f64>> = (first..last)
            .into_par_iter()
            .map(|c| {
                let draws = CHUNK.min(budget.samples - c * CHUNK) as usize;
                let mut rng = stream(budget.seed, c);
                let mut sums = vec![0.0; kernel.width()];
                kernel.chunk(&mut rng, draws, &mut sums);
                sums
            })
            .collect();
        for sums in &block {
            for (t, s) in total.iter_mut().zip(sums) {
                *t += s;
            }
        }
        first = last;
    }
    Ok(total)
}

/// A mean and its standard error from `Σ t`, `Σ t²` over `n` draws:
/// `mean = Σt/n`, `s² = (Σt² − n·mean²)/(n − 1)`, `SE = s/√n`.
///
/// The one-pass form loses about `ε · mean²/s²` of relative accuracy in `s²`;
/// the kernels feed it statistics of order one, or shifted to be centred.
pub fn estimate_from_sums(sum: f64, sum_sq: f64, n: u64) -> Estimate {
    let nf = n as f64;
    let value = sum / nf;
    let var = if n > 1 {
        ((sum_sq - nf * value * value) / (nf - 1.0)).max(0.0)
    } else {
        0.0
    };
    Estimate {
        value,
        stderr: (var / nf).sqrt(),
        n,
    }
}
