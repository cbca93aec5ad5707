//! The sampling engine: seeded portable streams, Bernoulli masks, and the
//! parallel estimation loop whose result does not depend on the thread count.
//!
//! # Contract
//!
//! For a given seed and sample count, [`estimate`] returns bit-identical
//! results on any number of threads and any machine:
//!
//! 1. the `n` draws are cut into fixed chunks of [`CHUNK`] draws (the last one
//!    may be shorter); chunk `c` uses its own ChaCha8 stream `(seed, c)`
//!    ([`stream`]), so what a chunk computes never depends on who runs it;
//! 2. each chunk accumulates its draws in order into its own
//!    [`MeanAccumulator`];
//! 3. chunks run in parallel in blocks of [`BLOCK`] chunks, and the block's
//!    accumulators are merged into the total in chunk order. Memory is one
//!    block of accumulators, whatever the sample count.

mod runner;
mod stream;

pub use runner::{BLOCK, Budget, CHUNK, Sampler, estimate, estimate_with_progress};
pub use stream::{Stream, derive_seed, keep, stream};

pub use crate::stats::MeanAccumulator;
