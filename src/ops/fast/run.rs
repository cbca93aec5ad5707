//! The fast path's parallel loop: the engine's chunking contract, with a
//! whole chunk handed to a kernel instead of one draw at a time.
//!
//! Exactly as [`crate::engine::estimate`]: the draws are cut into fixed chunks
//! of [`CHUNK`]; chunk `c` reads only the ChaCha8 stream `(seed, c)`; chunks
//! run on rayon in blocks of [`BLOCK`] (fewer for wide kernels, see
//! [`block_len`]) and their sums are added to the total in chunk order. A
//! kernel's chunk result is a vector of plain `f64` sums that starts from
//! zero, so the total is the same sequence of additions on any number of
//! threads and any block length: bit-identical results, memory of one block
//! of sum vectors whatever the sample count.

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

    /// [`Self::chunk`], told the instruction-set level it is compiled for,
    /// so that a kernel with explicit vector code can pick it. Must give
    /// the same bits as `chunk` on every level; `isa` may be one this CPU
    /// lacks (the kernel then checks [`Isa::available`] and falls back).
    /// The default ignores `isa`.
    #[inline(always)]
    fn chunk_on(&self, isa: Isa, rng: &mut Stream, draws: usize, sums: &mut [f64]) {
        let _ = isa;
        self.chunk(rng, draws, sums);
    }
}

/// Runs `budget.samples` draws of `kernel` and returns the total sums.
pub fn run_chunks<K: ChunkKernel>(kernel: &K, budget: Budget) -> Result<Vec<f64>, Error> {
    run_chunks_on(kernel, budget, Isa::best())
}

/// `run_chunks` with the kernel compiled for `isa` (an `isa` the CPU lacks
/// falls back to [`Isa::Portable`]). Every level makes the same integer and
/// `f64` operations in the same order (Rust never contracts `a·b + c` into
/// a fused multiply-add), so every level gives the same bits; the levels
/// differ only in how many lanes an instruction handles.
pub fn run_chunks_on<K: ChunkKernel>(
    kernel: &K,
    budget: Budget,
    isa: Isa,
) -> Result<Vec<f64>, Error> {
    let samples = budget.samples;
    run_chunks_with_progress(kernel, budget, isa, &|done| {
        OBSERVER.with(|o| {
            if let Some(observer) = o.borrow().as_ref() {
                observer(done, samples);
            }
        })
    })
}

/// A progress observer: `(draws done, draws in this run)`.
pub type ProgressObserver = Box<dyn Fn(u64, u64)>;

thread_local! {
    /// The progress observer of the calling thread (see [`observe_progress`]).
    static OBSERVER: std::cell::RefCell<Option<ProgressObserver>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `body` with `observer(done, total)` called after each parallel block
/// of every kernel run `body` makes on this thread (`run_chunks`): `done`
/// draws of `total` in the current run. A caller that does not own the
/// kernels' calls — the command line around `eval`, which runs several
/// kernels — can show progress without threading a callback through every
/// function. The observer only observes: the results are the same bits.
pub fn observe_progress<T>(observer: ProgressObserver, body: impl FnOnce() -> T) -> T {
    let previous = OBSERVER.with(|o| o.borrow_mut().replace(observer));
    let result = body();
    OBSERVER.with(|o| *o.borrow_mut() = previous);
    result
}

/// Most bytes of chunk sum vectors held at once by one parallel block
/// (wide kernels run fewer chunks per block; see [`run_chunks_with_progress`]).
pub const BLOCK_BYTES: usize = 32 << 20;

/// [`run_chunks_on`], calling `progress(done)` after each parallel block
/// with the number of draws finished so far (the last call has
/// `done = budget.samples`), from the calling thread.
///
/// A block runs `BLOCK` chunks, or fewer when the kernel is wide: at most
/// `BLOCK_BYTES / (8 · width)`, but at least two per rayon thread
/// (`block_len`), so that
/// a run at d = 10^5 with per-channel sums (width ≈ 3·10^5) holds a few tens
/// of megabytes of chunk results rather than `BLOCK · 8 · width` = 154 MB.
/// The block length changes only how many chunks run in parallel between
/// two merges, never the merge itself: chunk `c`'s sums are always added to
/// the total right after chunk `c − 1`'s, so the bits do not depend on it.
pub fn run_chunks_with_progress<K: ChunkKernel>(
    kernel: &K,
    budget: Budget,
    isa: Isa,
    progress: &dyn Fn(u64),
) -> Result<Vec<f64>, Error> {
    let isa = if isa.available() { isa } else { Isa::Portable };
    let budget = Budget::new(budget.samples, budget.seed)?;
    let chunks = budget.samples.div_ceil(CHUNK);
    let width = kernel.width();
    let block_len = block_len(width, rayon::current_num_threads());
    let mut total = vec![0.0; width];
    let mut first = 0;
    while first < chunks {
        let last = (first + block_len).min(chunks);
        let carry = crate::engine::cancel::carry();
        let block: Vec<Option<Vec<f64>>> = (first..last)
            .into_par_iter()
            .map(|c| {
                // The cancellation hook: `None` when the caller asked to stop.
                if carry.run(crate::engine::cancel::requested) {
                    return None;
                }
                let draws = CHUNK.min(budget.samples - c * CHUNK) as usize;
                let mut rng = stream(budget.seed, c);
                let mut sums = vec![0.0; width];
                run_chunk(kernel, isa, &mut rng, draws, &mut sums);
                Some(sums)
            })
            .collect();
        let block = block
            .into_iter()
            .collect::<Option<Vec<_>>>()
            .ok_or(Error::Interrupted)?;
        for sums in &block {
            for (t, s) in total.iter_mut().zip(sums) {
                *t += s;
            }
        }
        first = last;
        progress((last * CHUNK).min(budget.samples));
    }
    Ok(total)
}

/// Chunks per parallel block for sum vectors of `width` on `threads`
/// threads: [`BLOCK`], or as many as fit in [`BLOCK_BYTES`], but at least
/// two per thread.
pub fn block_len(width: usize, threads: usize) -> u64 {
    let fits = (BLOCK_BYTES / (8 * width.max(1))).max(2 * threads.max(1));
    BLOCK.min(fits as u64)
}

/// Instruction-set levels the kernels are compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// Whatever the build target guarantees (SSE2 on x86-64).
    Portable,
    /// AVX2 and BMI2 (x86-64).
    Avx2,
    /// AVX-512 F/VL/BW and BMI2 (x86-64).
    Avx512,
}

impl Isa {
    /// Whether this CPU runs code of this level.
    pub fn available(self) -> bool {
        match self {
            Isa::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("bmi2")
                    && std::arch::is_x86_feature_detected!("popcnt")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                Isa::Avx2.available()
                    && std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                    && std::arch::is_x86_feature_detected!("avx512bw")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The widest level this CPU runs.
    pub fn best() -> Isa {
        [Isa::Avx512, Isa::Avx2]
            .into_iter()
            .find(|i| i.available())
            .unwrap_or(Isa::Portable)
    }
}

/// One chunk of `kernel` on the level `isa` (checked available).
fn run_chunk<K: ChunkKernel>(
    kernel: &K,
    isa: Isa,
    rng: &mut Stream,
    draws: usize,
    sums: &mut [f64],
) {
    #[cfg(target_arch = "x86_64")]
    match isa {
        // SAFETY: `run_chunks_on` checked that the CPU has these features.
        Isa::Avx512 => return unsafe { chunk_avx512(kernel, rng, draws, sums) },
        // SAFETY: as above.
        Isa::Avx2 => return unsafe { chunk_avx2(kernel, rng, draws, sums) },
        Isa::Portable => {}
    }
    let _ = isa;
    kernel.chunk_on(Isa::Portable, rng, draws, sums);
}

// The kernels' `chunk_on` methods are `#[inline(always)]`, so each wrapper
// gets its own copy compiled with the wrapper's features.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,bmi2,popcnt")]
unsafe fn chunk_avx2<K: ChunkKernel>(kernel: &K, rng: &mut Stream, draws: usize, sums: &mut [f64]) {
    kernel.chunk_on(Isa::Avx2, rng, draws, sums);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx2,bmi2,popcnt")]
unsafe fn chunk_avx512<K: ChunkKernel>(
    kernel: &K,
    rng: &mut Stream,
    draws: usize,
    sums: &mut [f64],
) {
    kernel.chunk_on(Isa::Avx512, rng, draws, sums);
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
        dof: crate::stats::per_draw_dof(n),
    }
}

/// A mean and its standard error from block sums (batch means): the draws
/// fall in blocks `b` of `n_b` draws with sums `L_b`, and the arguments are
/// `Σ L_b`, `Σ L_b²`, `Σ n_b L_b`, `Σ n_b²` and `N = Σ n_b`.
///
/// ```text
/// mean m = Σ L_b / N
/// E[L_b] = n_b μ,  Var L_b = n_b σ²  (iid draws), so with m in place of μ
/// E[Σ_b (L_b − n_b m)²] = Σ_b (n_b σ² − 2 n_b² σ²/N + n_b² σ²/N)
///                       = σ² (N − Σ n_b²/N)
/// s² = (Σ L_b² − 2 m Σ n_b L_b + m² Σ n_b²) / (N − Σ n_b²/N)   (unbiased)
/// SE = s/√N
/// ```
///
/// It needs one square per block instead of one per draw, at the price of
/// fewer degrees of freedom (about one per block: the relative error of
/// the SE is about `1/√(2 · blocks)`, 0.6 % at 15 625 blocks of 64). With a
/// single block the spread is unknown and the SE is reported as infinite.
pub fn estimate_from_batches(
    sum: f64,
    sum_sq: f64,
    sum_weighted: f64,
    sum_n_sq: f64,
    n: u64,
) -> Estimate {
    let nf = n as f64;
    let value = sum / nf;
    let dof = nf - sum_n_sq / nf;
    let stderr = if dof > 0.0 {
        let ss = sum_sq - 2.0 * value * sum_weighted + value * value * sum_n_sq;
        (ss.max(0.0) / dof / nf).sqrt()
    } else {
        f64::INFINITY
    };
    // Degrees of freedom of the batch-means variance: about one per batch,
    // `N²/Σ n_b² − 1` (the effective number of batches less the mean's one).
    let dof = (nf * nf / sum_n_sq - 1.0).max(0.0);
    Estimate {
        value,
        stderr,
        n,
        dof,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wide_kernels_run_fewer_chunks_per_block() {
        assert_eq!(block_len(7 + 3 * 512, 2), BLOCK);
        // d = 10^5 with per-channel sums: 2.4 MB per chunk, 13 chunks.
        assert_eq!(block_len(7 + 3 * 100_000, 2), 13);
        // Never fewer than two per thread, never more than BLOCK.
        assert_eq!(block_len(1 << 30, 4), 8);
        assert_eq!(block_len(1, 1000), BLOCK);
    }
}
