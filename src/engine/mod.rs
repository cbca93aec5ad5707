//! The sampling engine: seeded portable streams, Bernoulli masks, and the
//! parallel estimation loop whose result does not depend on the thread count.
//!
//! # Contract
//!
//! For a given seed and sample count, [`estimate`] returns bit-identical
//! results on any number of threads and at any ISA level of one platform
//! (x86-64 baseline or with AVX2/`popcnt`, the fast path's kernels included):
//!
//! 1. the `n` draws are cut into fixed chunks of [`CHUNK`] draws (the last one
//!    may be shorter); chunk `c` uses its own ChaCha8 stream `(seed, c)`
//!    ([`stream`]), so what a chunk computes never depends on who runs it;
//! 2. each chunk accumulates its draws in order into its own
//!    [`MeanAccumulator`];
//! 3. chunks run in parallel in blocks of [`BLOCK`] chunks, and the block's
//!    accumulators are merged into the total in chunk order. Memory is one
//!    block of accumulators, whatever the sample count.
//!
//! # Across platforms
//!
//! The same bits on another platform (another OS, libm or architecture)
//! hold exactly where every operation of a draw's statistic is one IEEE 754
//! binary64 operation with correct rounding: `+ − × ÷`, `sqrt` (IEEE-exact
//! by the standard), fused-free code (Rust never contracts `a * b + c`
//! into an FMA on its own), comparisons and the ChaCha8 stream (integer
//! arithmetic). Integer powers go through [`crate::formulas::ipow`]
//! (explicit multiplications) rather than `f64::powi`, whose precision the
//! standard library leaves unspecified. They do **not** hold, across
//! platforms, for a statistic that calls a libm transcendental (`exp`,
//! `ln`, `powf`, `sin`): the ensemble family's log-sum-exp gap and the
//! Gaussian draws of the BatchNorm and stack experiments (the Ziggurat of
//! `rand_distr` uses `exp`/`ln` on its rare tail path). Those are
//! reproducible on one platform and agree elsewhere to the libm's accuracy
//! (≤ 1 ulp per call on glibc and musl), well inside any standard error;
//! a portable libm (the `libm` crate) would buy cross-platform bits for them
//! at a cost in speed, which this crate does not pay.

pub mod cancel;
mod runner;
mod stream;

pub use runner::{BLOCK, Budget, CHUNK, Sampler, estimate, estimate_with_progress};
pub use stream::{Stream, derive_seed, keep, stream};

pub use crate::stats::MeanAccumulator;

/// The default seed of the report, `eval` and the test suite: the seed every
/// stream is derived from when none is given.
pub const DEFAULT_SEED: u64 = 1;
