//! The fast sampling path: masks as bits, masked sums by table look-up.
//!
//! The hot claims (`E[M]`, `E[V]`, `E[R²]`, `E[LN(z)]`, attention rows) are
//! expectations of sums of masked terms with `x` fixed for a whole run. This
//! module computes them without ever forming `z`:
//!
//! * [`BernoulliBits`] — 64 Bernoulli(q) bits at a time, exact for every
//!   `f64` `q`, by walking `q`'s binary expansion (proof in its docs);
//!   [`MaskBits`] — the same bits in bulk: three digits on every word, then
//!   one walk for the lanes still open in the whole batch;
//! * [`Xoshiro8`] — eight xoshiro256++ generators in lock-step (vector code),
//!   seeded per chunk from the engine's ChaCha8 stream;
//! * [`SubsetTables`] — sums of `x/q` and `(x/q)²` over every subset of each
//!   4 channels, so a masked sum is one look-up per nibble of the mask, and
//!   64 masks' sums are vector permutes on AVX-512;
//! * `MaskKernel` — one mask at a time handed to a `MaskStatistic`
//!   (keep counts, masked sums and their powers, histograms; short masks
//!   packed several to a word), behind the claims of the dropout
//!   ([`mod@dropout`]), attention ([`attention_row`]), mask-shape
//!   ([`mod@mask_shape`]) and ensemble ([`mod@ensemble`]) families and `eval
//!   moments|attn`; `PowerSums` turns its sums into means and variances;
//! * [`FastSite`] — the same for a whole dropout site
//!   `y = h + Σ_j dropout(v_j)` before LayerNorm or RMSNorm (`ε ≥ 0`, the
//!   constant-input rule by bit patterns, `constant`), which the
//!   normalization claims and `eval` use: `M`, `V`, `R²` per mask and the
//!   norm's output per channel from one masked sum over masks per channel
//!   (`blocks`: 64×64 bit transposes and subset-sum tables over
//!   masks), with batch-means standard errors;
//! * [`FastCompound`] — `LN2(LN1(dropout(x)))` per channel;
//! * `run_chunks` — the engine's chunk/stream/merge contract for whole
//!   chunks: bit-identical on any thread count and on every instruction-set
//!   level ([`Isa`]), memory independent of the sample count;
//! * [`mod@bench`] — the benchmark workloads W1–W3 behind `dropmc bench`,
//!   timed on these kernels and on the per-element path.

pub mod attention_row;
pub mod bench;
pub(crate) mod bits;
pub(crate) mod blocks;
pub(crate) mod compact;
pub(crate) mod compound;
mod conditioning;
pub(crate) mod constant;
pub mod dropout;
pub mod ensemble;
pub(crate) mod lanes;
pub mod mask_shape;
pub(crate) mod mask_statistics;
pub(crate) mod masks;
pub(crate) mod power_sums;
mod reference;
pub(crate) mod run;
pub(crate) mod site;
pub(crate) mod surrogate;
pub(crate) mod tables;

pub use bits::BernoulliBits;
pub use compact::MaskBits;
pub use compound::FastCompound;
pub use lanes::Xoshiro8;
pub use run::{ChunkKernel, Isa, observe_progress, run_chunks_on, run_chunks_with_progress};
pub use site::{FastSite, SiteEstimates};
pub use tables::SubsetTables;
