//! One kernel for every statistic of a single mask: Bernoulli(q) masks of
//! `d` units made by [`MaskBits`], each handed to a [`MaskStatistic`] that
//! adds what it needs (keep counts, masked sums and their powers, a
//! histogram) into the chunk's sums.
//!
//! # How masks are laid out
//!
//! Every bit [`MaskBits`] makes is an independent Bernoulli(q) draw, so any
//! fixed partition of the bits into masks gives independent masks:
//!
//! ```text
//! d ≤ 64:  a word holds ⌊64/d⌋ masks, mask j of a word in bits j·d … j·d+d−1
//!          (the 64 mod d top bits are unused), so a 5-unit mask costs 1/12
//!          of a generated word;
//! d > 64:  a mask is ⌈d/64⌉ whole words, the bits past unit d cleared.
//! ```
//!
//! Mask `i` of a chunk is always made from the same bits of the chunk's
//! lanes (the words are generated in batches of a fixed size, in order), so
//! the chunk's sums are a fixed function of `(seed, chunk)`: bit-identical on
//! any number of threads and instruction-set level ([`super::run_chunks_on`]),
//! as long as the statistic adds in a fixed order.
//!
//! # Blocks of long masks
//!
//! When `d > 64` a batch is 64 masks (the last one of a chunk fewer), and
//! the statistic gets the whole batch at once as a [`MaskBlock`]: the masks
//! one after another (mask-major, as generated) and the same bits
//! word-major (word `j` of mask `b` at `64 j + b`, the layout of
//! [`super::SubsetTables::block_sums`] and of the 64×64 transposes), masks
//! past the batch all-dropped. A statistic that can do better than one mask
//! at a time overrides [`MaskStatistic::add_block`] — 64 masked sums by
//! vector permutes, keep counts by one transpose and popcounts per 64 units
//! — and must add exactly what `add` on each mask in order adds, bit for
//! bit, so the layout never changes a result.

use super::blocks::tail_mask;
use super::compact::MaskBits;
use super::lanes::Xoshiro8;
use super::run::{ChunkKernel, Isa, run_chunks};
use crate::engine::{Budget, Stream};
use crate::error::Error;
use crate::ops::Rate;

/// What one mask contributes to a chunk's sums.
pub trait MaskStatistic: Sync {
    /// Units per mask.
    fn units(&self) -> usize;
    /// Length of the sum vector.
    fn width(&self) -> usize;
    /// Adds the statistics of `mask` (unit `k` is bit `k % 64` of
    /// `mask[k / 64]`; bits past the last unit are 0) into `sums`.
    fn add(&self, mask: &[u64], sums: &mut [f64]);

    /// Adds the statistics of every mask of `block` (`d > 64`), in mask
    /// order: the same sums, bit for bit, as [`Self::add`] on each mask in
    /// turn, which is what this default does. `isa` is the level the caller
    /// is compiled for (see [`super::ChunkKernel::chunk_on`]).
    #[inline(always)]
    fn add_block(&self, isa: Isa, block: &MaskBlock<'_>, sums: &mut [f64]) {
        let _ = isa;
        for mask in block.masks() {
            self.add(mask, sums);
        }
    }
}

/// A batch of at most 64 masks of `d > 64` units, in both layouts (see the
/// module docs); bits past the last unit are 0 in both.
#[derive(Debug, Clone, Copy)]
pub struct MaskBlock<'a> {
    /// `len` masks of `words` words each, one after another.
    mask_major: &'a [u64],
    /// 64 masks word-major; masks `len..64` are all zeros.
    word_major: &'a [u64],
    len: usize,
    words: usize,
}

impl<'a> MaskBlock<'a> {
    /// The block of `len ≤ 64` masks of `words` words each, given in both
    /// layouts (`mask_major`: `len · words` words; `word_major`: `64 · words`,
    /// masks past `len` zero).
    pub(crate) fn new(
        mask_major: &'a [u64],
        word_major: &'a [u64],
        len: usize,
        words: usize,
    ) -> Self {
        debug_assert!(len <= 64 && mask_major.len() == len * words);
        debug_assert_eq!(word_major.len(), 64 * words);
        MaskBlock {
            mask_major,
            word_major,
            len,
            words,
        }
    }

    /// Number of masks.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the block has no masks.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The masks, in order, each `⌈d/64⌉` words.
    pub fn masks(&self) -> std::slice::ChunksExact<'a, u64> {
        self.mask_major.chunks_exact(self.words)
    }

    /// The 64 masks word-major: word `j` of mask `b` is `[64 j + b]`.
    pub fn word_major(&self) -> &'a [u64] {
        self.word_major
    }
}

/// Words generated per batch (and masks per batch when `d > 64`).
const BATCH_WORDS: usize = 64;

/// Masks of `stat.units()` Bernoulli(q) bits, each added by `stat`.
#[derive(Debug, Clone)]
pub struct MaskKernel<S> {
    bits: MaskBits,
    stat: S,
}

impl<S: MaskStatistic> MaskKernel<S> {
    /// The kernel for `stat` at drop rate `p` (validated; `d ≥ 1`).
    pub fn new(p: f64, stat: S) -> Result<Self, Error> {
        let rate = Rate::new(p)?;
        if stat.units() == 0 {
            return Err(Error::Empty { what: "mask" });
        }
        Ok(MaskKernel {
            bits: MaskBits::new(rate.q())?,
            stat,
        })
    }

    /// The statistic.
    pub fn statistic(&self) -> &S {
        &self.stat
    }

    /// Runs `budget.samples` masks and returns the total sums.
    pub fn sums(&self, budget: Budget) -> Result<Vec<f64>, Error> {
        run_chunks(self, budget)
    }
}

impl<S: MaskStatistic> ChunkKernel for MaskKernel<S> {
    fn width(&self) -> usize {
        self.stat.width()
    }

    #[inline(always)]
    fn chunk(&self, rng: &mut Stream, draws: usize, sums: &mut [f64]) {
        self.chunk_on(Isa::Portable, rng, draws, sums);
    }

    #[inline(always)]
    fn chunk_on(&self, isa: Isa, rng: &mut Stream, draws: usize, sums: &mut [f64]) {
        let d = self.stat.units();
        let mut lanes = Xoshiro8::from_stream(rng);
        let mut words = vec![0u64; BATCH_WORDS * d.div_ceil(64)];
        let mut scratch = Vec::new();
        let tail = tail_mask(d);
        let mut done = 0;
        if d <= 64 {
            let per_word = 64 / d;
            while done < draws {
                let masks = (draws - done).min(BATCH_WORDS * per_word);
                let batch = &mut words[..masks.div_ceil(per_word)];
                self.bits.fill(&mut lanes, batch, &mut scratch);
                for (i, &w) in batch.iter().enumerate() {
                    for j in 0..per_word.min(masks - i * per_word) {
                        self.stat.add(&[(w >> (j * d)) & tail], sums);
                    }
                }
                done += masks;
            }
        } else {
            let nw = d.div_ceil(64);
            let mut word_major = vec![0u64; 64 * nw];
            while done < draws {
                let masks = (draws - done).min(BATCH_WORDS);
                let batch = &mut words[..masks * nw];
                self.bits.fill(&mut lanes, batch, &mut scratch);
                for mask in batch.chunks_exact_mut(nw) {
                    mask[nw - 1] &= tail;
                }
                if masks < 64 {
                    word_major.fill(0);
                }
                for (b, mask) in batch.chunks_exact(nw).enumerate() {
                    for (j, &w) in mask.iter().enumerate() {
                        word_major[64 * j + b] = w;
                    }
                }
                let block = MaskBlock::new(batch, &word_major, masks, nw);
                self.stat.add_block(isa, &block, sums);
                done += masks;
            }
        }
    }
}

/// Two statistics of the same masks side by side: `a`'s sums, then `b`'s.
#[derive(Debug, Clone)]
pub struct Both<A, B>(pub A, pub B);

impl<A: MaskStatistic, B: MaskStatistic> MaskStatistic for Both<A, B> {
    fn units(&self) -> usize {
        self.0.units()
    }
    fn width(&self) -> usize {
        self.0.width() + self.1.width()
    }
    #[inline(always)]
    fn add(&self, mask: &[u64], sums: &mut [f64]) {
        let (a, b) = sums.split_at_mut(self.0.width());
        self.0.add(mask, a);
        self.1.add(mask, b);
    }
    /// `a`'s sums and `b`'s are disjoint, so adding all of `a`'s first is
    /// the same per-sum order as alternating per mask.
    #[inline(always)]
    fn add_block(&self, isa: Isa, block: &MaskBlock<'_>, sums: &mut [f64]) {
        let (a, b) = sums.split_at_mut(self.0.width());
        self.0.add_block(isa, block, a);
        self.1.add_block(isa, block, b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::CHUNK;

    /// Counts the masks it sees, checking that no bit past the last unit is set.
    struct Record(usize);
    impl MaskStatistic for Record {
        fn units(&self) -> usize {
            self.0
        }
        fn width(&self) -> usize {
            1
        }
        fn add(&self, mask: &[u64], sums: &mut [f64]) {
            let last = mask[mask.len() - 1];
            assert_eq!(last & !tail_mask(self.0), 0, "bits past the last unit");
            sums[0] += 1.0;
        }
    }

    #[test]
    fn every_draw_gets_exactly_one_mask() {
        for d in [1, 5, 12, 63, 64, 65, 130] {
            let k = MaskKernel::new(0.3, Record(d)).unwrap();
            let n = 2 * CHUNK + 77;
            let s = k.sums(Budget::new(n, 3).unwrap()).unwrap();
            assert_eq!(s[0], n as f64, "d = {d}");
        }
    }

    #[test]
    fn bad_rate_and_empty_masks_are_errors() {
        assert!(MaskKernel::new(1.0, Record(3)).is_err());
        assert!(MaskKernel::new(0.1, Record(0)).is_err());
    }
}
