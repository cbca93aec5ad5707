//! The block layout every per-channel bit-mask kernel shares
//! ([`super::FastSite`], [`super::FastCompound`]): masks drawn 64 at a
//! time, and the sum, for every channel, of a per-mask value over the masks
//! that keep it.
//!
//! # Layout of a block
//!
//! The generator's words are iid Bernoulli(q) bits whatever they are called,
//! so a block's `64·⌈d/64⌉` words are read *word-major*: word `j` of mask `b`
//! is `words[64 j + b]`. Then the 64 masks' word `j` are contiguous, which
//! is what both the per-mask look-ups (8 masks per vector) and the
//! transpose of block `j` (one contiguous 64×64 bit matrix) want.
//!
//! # Per channel, without touching each element
//!
//! A normalized output is `(z_k − M) s = m_k (x_k/q) s − M s` per mask, so
//! over a block of masks
//!
//! ```text
//! Σ_block out_k = (x_k/q) A_k − G          A_k = Σ_{masks keeping k} s
//!                                          G   = Σ_masks M s
//! ```
//!
//! and the per-channel work is one masked sum over *masks* per channel:
//! each 64×64 block of bits is transposed so that one word holds channel
//! `k`'s keep bits across the 64 masks, and the sums of `s` over every
//! subset of each 4 masks are tabulated, so a channel costs 16 look-ups per
//! 64 masks instead of 64 conditional adds (and the AVX-512 path makes 8
//! channels' look-ups with one permute): `channel_sums_over_masks`.

use super::bits::transpose64_on;
use super::compact::MaskBits;
use super::lanes::Xoshiro8;
use super::run::Isa;
use super::tables::SubsetTables;

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
