//! The normalization kernel: per mask `M`, `V`, `R²` by table look-ups, and
//! optionally `E[LN(z)_k]` for every channel without touching each element.
//!
//! # Per mask
//!
//! ```text
//! z_k = m_k x_k / q
//! M   = (1/d) Σ_k m_k (x_k/q)            one look-up per 4 channels
//! R²  = (1/d) Σ_k m_k (x_k/q)²           (same look-up: two-column tables)
//! V   = R² − M²
//! s   = 1/√(V + ε)
//! ```
//!
//! # Per channel, algebraically
//!
//! `LN(z)_k = (z_k − M) s = m_k (x_k/q) s − M s`, so over a block of masks
//!
//! ```text
//! Σ_block LN_k = (x_k/q) A_k − G           A_k = Σ_{masks keeping k} s
//!                                          G   = Σ_masks M s
//! ```
//!
//! and the per-channel work is one masked sum over *masks* per channel:
//! masks come 64 at a time, each 64×64 block of bits is transposed so that
//! one word holds channel `k`'s keep bits across the 64 masks, and the
//! sums of `s` over every subset of each 4 masks are tabulated, so a channel
//! costs 16 look-ups per 64 masks instead of 64 conditional adds (and the
//! AVX-512 path makes 8 channels' look-ups with one permute).
//!
//! # Layout of a block
//!
//! The generator's words are iid Bernoulli(q) bits whatever they are called,
//! so a block's `64·⌈d/64⌉` words are read *word-major*: word `j` of mask `b`
//! is `words[64 j + b]`. Then the 64 masks' word `j` are contiguous, which
//! is what both the per-mask look-ups (8 masks per vector) and the
//! transpose of block `j` (one contiguous 64×64 bit matrix) want.
//!
//! # Standard errors by batch means
//!
//! A per-draw variance of `LN_k` would need two more masked sums per
//! channel (`Σ s²` and `Σ M s²` over the masks keeping `k`), which would
//! triple the per-channel work. Instead the blocks of 64 masks serve as
//! batches: block sums are iid (the masks are), so their spread gives an
//! unbiased variance with one square per channel per block
//! ([`super::estimate_from_batches`]); the cost is fewer degrees of freedom,
//! one per 64 masks (15 625 at 10^6 masks, 0.6 % relative error on the SE).
//! `E[M]`, `E[V]`, `E[R²]` keep per-draw sums. All arithmetic is `f64` in a
//! fixed order.

use super::bits::transpose64_on;
use super::compact::MaskBits;
use super::lanes::Xoshiro8;
use super::run::{ChunkKernel, Isa, estimate_from_batches, estimate_from_sums, run_chunks};
use super::tables::SubsetTables;
use crate::engine::{Budget, Stream};
use crate::error::{Error, check_finite_vec};
use crate::ops::Rate;
use crate::stats::Estimate;

/// Scalar sums: per draw Σ M, Σ M², Σ V, Σ V², Σ R², Σ (R²)²; then Σ n_b²
/// over the blocks `b` of `n_b` draws (for the batch-means standard error).
const SCALARS: usize = 7;

/// Estimates of the normalization statistics of `z = dropout(x)`.
#[derive(Debug, Clone, PartialEq)]
pub struct NormEstimates {
    /// `E[M]`, `M = mean_k z_k`.
    pub mean: Estimate,
    /// `E[V]`, `V = mean_k z_k² − M²`.
    pub var: Estimate,
    /// `E[R²]`, `R² = mean_k z_k²`.
    pub r2: Estimate,
    /// `E[LN(z)_k] = E[(z_k − M)/√(V + ε)]` per channel (empty when not asked).
    pub ln: Vec<Estimate>,
}

/// The fast kernel for `M`, `V`, `R²` and (optionally) `E[LN(z)]`.
#[derive(Debug, Clone)]
pub struct FastNorm {
    scaled: Vec<f64>,
    eps: f64,
    ln: bool,
    bits: MaskBits,
    tables: SubsetTables<2>,
}

impl FastNorm {
    /// The kernel for input `x`, drop rate `p`, LayerNorm `ε` (`> 0`), with
    /// the per-channel `E[LN(z)]` when `ln`.
    pub fn new(x: &[f64], p: f64, eps: f64, ln: bool) -> Result<Self, Error> {
        check_finite_vec("x", x)?;
        let rate = Rate::new(p)?;
        check_eps(eps)?;
        let scaled: Vec<f64> = x.iter().map(|v| v / rate.q()).collect();
        let squared: Vec<f64> = scaled.iter().map(|v| v * v).collect();
        let tables = SubsetTables::new([&scaled, &squared]);
        Ok(FastNorm {
            bits: MaskBits::new(rate.q())?,
            scaled,
            eps,
            ln,
            tables,
        })
    }

    fn d(&self) -> usize {
        self.scaled.len()
    }

    /// Runs `budget.samples` masks. With the per-channel `E[LN(z)]`, at
    /// least two blocks of 64 masks (129 masks) are needed for its
    /// batch-means standard error.
    pub fn estimate(&self, budget: Budget) -> Result<NormEstimates, Error> {
        if self.ln && budget.samples <= 2 * 64 {
            return Err(Error::TooFewSamples {
                needed: 2 * 64 + 1,
                got: budget.samples,
            });
        }
        let sums = run_chunks(self, budget)?;
        let n = budget.samples;
        let ln = if self.ln {
            let d = self.d();
            let (sum, rest) = sums[SCALARS..].split_at(d);
            let (sum_sq, sum_weighted) = rest.split_at(d);
            (0..d)
                .map(|k| estimate_from_batches(sum[k], sum_sq[k], sum_weighted[k], sums[6], n))
                .collect()
        } else {
            Vec::new()
        };
        Ok(NormEstimates {
            mean: estimate_from_sums(sums[0], sums[1], n),
            var: estimate_from_sums(sums[2], sums[3], n),
            r2: estimate_from_sums(sums[4], sums[5], n),
            ln,
        })
    }
}

/// Checks a LayerNorm epsilon: finite and `> 0` (with `ε = 0`, the
/// all-dropped mask, of probability `p^d`, has no LayerNorm).
pub fn check_eps(eps: f64) -> Result<f64, Error> {
    if eps.is_finite() && eps > 0.0 {
        Ok(eps)
    } else {
        Err(Error::InvalidOption {
            what: format!("LayerNorm epsilon must be finite and > 0, got {eps}"),
        })
    }
}

impl ChunkKernel for FastNorm {
    fn width(&self) -> usize {
        SCALARS + if self.ln { 3 * self.d() } else { 0 }
    }

    #[inline(always)]
    fn chunk(&self, rng: &mut Stream, draws: usize, sums: &mut [f64]) {
        self.chunk_on(Isa::Portable, rng, draws, sums);
    }

    #[inline(always)]
    fn chunk_on(&self, isa: Isa, rng: &mut Stream, draws: usize, sums: &mut [f64]) {
        let d = self.d();
        let nw = d.div_ceil(64);
        let inv_d = 1.0 / d as f64;
        let mut lanes = Xoshiro8::from_stream(rng);
        // 64 masks, word-major: word j of mask b is words[64 j + b].
        let mut words = vec![0u64; 64 * nw];
        let mut scratch = Vec::new();
        let mut per_mask = [[0.0f64; 64]; 2];
        let mut per = [0.0f64; 64];
        let (mut mean, mut var) = ([0.0f64; 64], [0.0f64; 64]);
        let mut mask_tables = SubsetTables::new([&per[..]]);
        let mut kept = vec![0.0f64; if self.ln { d } else { 0 }];
        let (scalars, channels) = sums.split_at_mut(SCALARS);
        for nb in block_sizes(draws) {
            fill_block(&self.bits, &mut lanes, &mut words, &mut scratch, d, nb);
            self.tables.block_sums(isa, &words, &mut per_mask);
            for b in 0..nb {
                let m = per_mask[0][b] * inv_d;
                let r2 = per_mask[1][b] * inv_d;
                mean[b] = m;
                var[b] = r2 - m * m;
                scalars[0] += m;
                scalars[1] += m * m;
                scalars[4] += r2;
                scalars[5] += r2 * r2;
            }
            for &v in &var[..nb] {
                scalars[2] += v;
                scalars[3] += v * v;
            }
            if self.ln {
                // Element-wise (vector) square roots and divisions, then the
                // sum Σ M s in mask order.
                for (s, &v) in per.iter_mut().zip(&var) {
                    *s = 1.0 / (v + self.eps).sqrt();
                }
                per[nb..].fill(0.0);
                let mut centre = 0.0;
                for (&m, &s) in mean.iter().zip(&per).take(nb) {
                    centre += m * s;
                }
                mask_tables.refill([&per[..]]);
                // Block sum of LN_k: (x_k/q)·Σ_{masks keeping k} s − Σ M s;
                // the channel sums are three contiguous runs of d.
                channel_sums_over_masks(isa, &words, &mask_tables, &mut kept);
                let n = nb as f64;
                let (sum, rest) = channels.split_at_mut(d);
                let (sum_sq, sum_weighted) = rest.split_at_mut(d);
                for (k, &a) in kept.iter().enumerate() {
                    let block = self.scaled[k] * a - centre;
                    sum[k] += block;
                    sum_sq[k] += block * block;
                    sum_weighted[k] += n * block;
                }
                scalars[6] += n * n;
            }
        }
    }
}

/// The sizes of the blocks of (at most) 64 masks that `draws` draws make,
/// in order: every block full but the last.
pub(crate) fn block_sizes(draws: usize) -> impl Iterator<Item = usize> {
    (0..draws)
        .step_by(64)
        .map(move |done| (draws - done).min(64))
}

/// Draws a block of 64 masks of `units` units into `words` (`64 ⌈units/64⌉`
/// words, read word-major: word `j` of mask `b` is `words[64 j + b]`),
/// clears the bits past the last unit, and makes the masks `nb..64` (past
/// the last draw of the chunk, which do not exist) all-dropped, so that
/// they add nothing to the per-channel sums.
#[inline(always)]
pub(crate) fn fill_block(
    bits: &MaskBits,
    lanes: &mut Xoshiro8,
    words: &mut [u64],
    scratch: &mut Vec<u64>,
    units: usize,
    nb: usize,
) {
    bits.fill(lanes, words, scratch);
    let tail = tail_mask(units);
    let last = words.len() - 64;
    for w in &mut words[last..] {
        *w &= tail;
    }
    if nb < 64 {
        for rows in words.chunks_exact_mut(64) {
            rows[nb..].fill(0);
        }
    }
}

/// For every channel `k < out.len()`, the sum of the per-mask values
/// tabulated in `tables` over the masks of the word-major block `words`
/// (as [`fill_block`] leaves it) that keep `k`: one
/// [`masked_sums_over_masks`] per 64 channels.
#[inline(always)]
pub(crate) fn channel_sums_over_masks(
    isa: Isa,
    words: &[u64],
    tables: &SubsetTables<1>,
    out: &mut [f64],
) {
    let mut kept = [0.0f64; 64];
    for (rows, group) in words.chunks_exact(64).zip(out.chunks_mut(64)) {
        masked_sums_over_masks(isa, rows, tables, &mut kept);
        group.copy_from_slice(&kept[..group.len()]);
    }
}

/// For each of the 64 channels whose keep bits are word `j` of 64 masks
/// (`rows[b]` = word `j` of mask `b`, the word-major layout), the sum of
/// the per-mask values tabulated in `tables` over the masks that keep it,
/// written to `out`: one 64×64 bit transpose turns the rows into one word
/// per channel holding its keep bits across the masks, and
/// [`SubsetTables::block_sums`] over those 64 words reads 16 subset sums
/// of 4 masks per channel.
#[inline(always)]
fn masked_sums_over_masks(isa: Isa, rows: &[u64], tables: &SubsetTables<1>, out: &mut [f64; 64]) {
    let mut block = [0u64; 64];
    block.copy_from_slice(rows);
    transpose64_on(isa, &mut block);
    let mut sums = [[0.0; 64]; 1];
    tables.block_sums(isa, &block, &mut sums);
    *out = sums[0];
}

/// The bits of a mask's last word that are units (`units % 64` low bits, or
/// all 64).
pub fn tail_mask(units: usize) -> u64 {
    match units % 64 {
        0 => !0,
        r => (1u64 << r) - 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::stream;
    use rand::Rng;

    /// Every channel gets the sum of the per-mask values over exactly the
    /// masks that keep it, on every instruction-set level (50 masks: rows
    /// 50-63 are zero, as in a partial block).
    #[test]
    fn channel_sums_add_exactly_the_keeping_masks() {
        let mut rng = stream(8, 0);
        let mut rows = [0u64; 64];
        for r in rows.iter_mut().take(50) {
            *r = rng.next_u64();
        }
        // Integer values: every partial sum is exact, so any order of
        // addition gives the same bits as the direct sum.
        let mut per = [0.0; 64];
        for (i, p) in per.iter_mut().enumerate().take(50) {
            *p = (i * 7 % 11) as f64 + 1.0;
        }
        let tables = SubsetTables::new([&per[..]]);
        for isa in [Isa::Portable, Isa::Avx2, Isa::Avx512] {
            let mut out = [0.0; 64];
            masked_sums_over_masks(isa, &rows, &tables, &mut out);
            for (k, got) in out.iter().enumerate() {
                let direct: f64 = (0..50)
                    .filter(|&m| rows[m] >> k & 1 == 1)
                    .map(|m| per[m])
                    .sum();
                assert_eq!(*got, direct, "{isa:?} channel {k}");
            }
        }
    }

    /// A whole word-major block of 150 channels (3 words, the last one
    /// partial): every channel's sum is the direct sum over the masks that
    /// keep it, on every level.
    #[test]
    fn block_channel_sums_cover_every_word() {
        let (d, nw) = (150usize, 3usize);
        let mut rng = stream(9, 0);
        let mut words: Vec<u64> = (0..64 * nw).map(|_| rng.next_u64()).collect();
        for w in &mut words[64 * (nw - 1)..] {
            *w &= tail_mask(d);
        }
        let per: Vec<f64> = (0..64).map(|i| (i * 5 % 13) as f64 - 4.0).collect();
        let tables = SubsetTables::new([&per[..]]);
        for isa in [Isa::Portable, Isa::Avx2, Isa::Avx512] {
            let mut out = vec![0.0; d];
            channel_sums_over_masks(isa, &words, &tables, &mut out);
            for (k, got) in out.iter().enumerate() {
                let direct: f64 = (0..64)
                    .filter(|&b| words[64 * (k / 64) + b] >> (k % 64) & 1 == 1)
                    .map(|b| per[b])
                    .sum();
                assert_eq!(*got, direct, "{isa:?} channel {k}");
            }
        }
    }
}
