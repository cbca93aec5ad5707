//! Per-channel masked sums over masks for kernels that keep their masks
//! mask-major (`words[b·nw + j]` = word `j` of mask `b`): the layout
//! [`super::FastSite`] and [`super::FastCompound`] use. [`super::FastNorm`]
//! has moved to the word-major layout with nibble tables and AVX-512
//! look-ups (`norm.rs`); porting the site kernels to it is the next step.
//!
//! For each 64×64 block of bits, a transpose ([`transpose64`]) makes one
//! word hold a channel's keep bits across the 64 masks; the sums of the
//! per-mask values over every subset of each 8 masks are tabulated, so a
//! channel costs 8 look-ups per 64 masks instead of 64 conditional adds.

use super::bits::transpose64;

/// For every channel, the sum of `per[b]` over the masks `b` (at most 64,
/// mask-major in `words`, `nw` words each) that keep it, written to `out`:
/// transposes each 64×64 block so one word holds a channel's keep bits
/// across the masks, and reads 8 subset sums per channel.
#[inline(always)]
pub(crate) fn mask_major_sums_over_masks(
    words: &[u64],
    nw: usize,
    per: &[f64; 64],
    tables: &mut [f64],
    out: &mut [f64],
) {
    build_mask_tables(per, tables);
    let masks = words.len() / nw;
    let mut block = [0u64; 64];
    for (j, group) in out.chunks_mut(64).enumerate() {
        for (b, row) in block.iter_mut().enumerate() {
            *row = if b < masks { words[b * nw + j] } else { 0 };
        }
        transpose64(&mut block);
        for (c, &w) in group.iter_mut().zip(&block) {
            // Two interleaved partial sums halve the chain of dependent adds.
            let mut acc = [0.0; 2];
            for h in 0..8 {
                acc[h & 1] += tables[h * 256 + ((w >> (8 * h)) & 0xff) as usize];
            }
            *c = acc[0] + acc[1];
        }
    }
}

/// Subset sums of the per-mask values over each group of 8 masks, built by
/// doubling: the entries with highest bit `j` are the entries below `2^j`
/// plus mask `j`'s value (contiguous, independent additions).
#[inline(always)]
fn build_mask_tables(per: &[f64; 64], tables: &mut [f64]) {
    for (h, t) in tables.chunks_exact_mut(256).enumerate() {
        t[0] = 0.0;
        for j in 0..8 {
            let e = per[8 * h + j];
            let (low, high) = t.split_at_mut(1 << j);
            for (dst, src) in high[..1 << j].iter_mut().zip(low.iter()) {
                *dst = src + e;
            }
        }
    }
}
