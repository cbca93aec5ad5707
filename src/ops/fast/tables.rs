//! Nibble-indexed subset sums: a masked sum of `W` fixed columns in one
//! table look-up per 4 units, and the same for 64 masks at once with the
//! look-ups made by vector permutes.
//!
//! # The tables
//!
//! For group `g` (units `4g … 4g+3`) and nibble `n` (4 bits), entry
//! `T[g][n]` holds `Σ_{j : bit j of n is 1} c[4g + j]` for each column `c`.
//! A mask stored as bits (unit `k` is bit `k % 64` of word `k / 64`) then
//! gives `Σ_k m_k c[k]` as `Σ_g T[g][nibble g of the mask]`: `d/4` look-ups
//! in place of `d` multiply-adds. Each entry is built once, by doubling
//! (`T[n] = T[n − 2^j] + c[4g + j]` for `2^j ≤ n < 2^{j+1}`), and units past
//! the end of a partial last group add nothing.
//!
//! # Why nibbles and not bytes
//!
//! Byte tables need half the look-ups, but 256 entries per 8 units: 512
//! bytes per unit and column pair, 256 KiB at d = 512 (beyond the level-1
//! cache, so every look-up waits for the level-2 cache) and 51 MB at
//! d = 10^5. Nibble tables are 64 bytes per unit and column pair, and one
//! group's 16 entries of a column are exactly two 8-lane `f64` vectors: an
//! AVX-512 two-source permute (`vpermt2pd`) looks up 8 masks' nibbles at
//! once, reading only the low 4 bits of each 64-bit index lane, so the
//! index is the mask word shifted right by `4 (g mod 16)` with no masking.
//!
//! # Order of additions
//!
//! Every path adds a mask's look-ups in group order, one at a time, into a
//! sum that starts at `+0.0`:
//!
//! ```text
//! S = (…((0 + T[0][n₀]) + T[1][n₁]) + …) + T[G−1][n_{G−1}]
//! ```
//!
//! [`SubsetTables::masked_sum`] (one mask, scalar), the portable
//! [`SubsetTables::block_sums`] (64 masks, scalar) and its AVX-512 form (64
//! masks, 8 per vector lane group) make these same roundings, so they give
//! the same bits; the vector form only runs 16 such chains side by side.

use super::run::Isa;

/// Units per table group (the bits of one look-up index).
pub const GROUP: usize = 4;

/// One group's 16 subset sums of one column, aligned so that a vector path
/// loads them as two whole cache-line halves.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C, align(64))]
struct Entries([f64; 16]);

/// Subset-sum tables for `W` columns over groups of `GROUP` units.
#[derive(Debug, Clone)]
pub struct SubsetTables<const W: usize> {
    units: usize,
    table: Vec<[Entries; W]>,
}

impl<const W: usize> SubsetTables<W> {
    /// Tables for the columns `columns[c][k]`, `k < units` (all the same
    /// length). Units past the end of a partial last group count as 0.
    pub fn new(columns: [&[f64]; W]) -> Self {
        let units = columns.first().map_or(0, |c| c.len());
        let mut t = SubsetTables {
            units,
            table: vec![[Entries([0.0; 16]); W]; units.div_ceil(GROUP)],
        };
        t.refill(columns);
        t
    }

    /// Rebuilds the tables in place for new columns of the same length
    /// (no allocation, for tables remade on every block).
    #[inline(always)]
    pub fn refill(&mut self, columns: [&[f64]; W]) {
        for col in &columns {
            assert_eq!(col.len(), self.units, "columns of one table set");
        }
        let units = self.units;
        for (g, entries) in self.table.iter_mut().enumerate() {
            for (e, col) in entries.iter_mut().zip(&columns) {
                let t = &mut e.0;
                t[0] = 0.0;
                for j in 0..GROUP {
                    let k = GROUP * g + j;
                    let (low, high) = t.split_at_mut(1 << j);
                    if k < units {
                        let v = col[k];
                        for (dst, src) in high[..1 << j].iter_mut().zip(low.iter()) {
                            *dst = src + v;
                        }
                    } else {
                        high[..1 << j].copy_from_slice(low);
                    }
                }
            }
        }
    }

    /// Number of units (the columns' length).
    pub fn units(&self) -> usize {
        self.units
    }

    /// Number of 4-unit groups.
    pub fn groups(&self) -> usize {
        self.table.len()
    }

    /// Column `c`'s 16 entries of group `g`.
    #[inline]
    pub fn group(&self, g: usize, c: usize) -> &[f64; 16] {
        &self.table[g][c].0
    }

    /// `Σ_k m_k c[k]` for each column, for the mask held in `words`
    /// (`64 · words.len() ≥ units`; bits past the last unit must be 0).
    #[inline(always)]
    pub fn masked_sum(&self, words: &[u64]) -> [f64; W] {
        let mut acc = [0.0; W];
        for (g, entries) in self.table.iter().enumerate() {
            let n = nibble(words[g / 16], g);
            for c in 0..W {
                acc[c] += entries[c].0[n];
            }
        }
        acc
    }

    /// The masked sums of 64 masks at once: `out[c][r]` is
    /// [`Self::masked_sum`] of mask `r`, bit for bit. The masks are stored
    /// *word-major*: word `j` of mask `r` is `words[64 j + r]`, for
    /// `j < ⌈units/64⌉`. `isa` picks the code (an `isa` this CPU lacks
    /// falls back to the portable loop).
    #[inline(always)]
    pub fn block_sums(&self, isa: Isa, words: &[u64], out: &mut [[f64; 64]; W]) {
        let nw = self.units.div_ceil(64);
        assert!(words.len() >= 64 * nw, "64 masks of {nw} words");
        #[cfg(target_arch = "x86_64")]
        if isa == Isa::Avx512 && Isa::Avx512.available() {
            // SAFETY: the CPU has AVX-512 F (checked just above).
            unsafe { self.block_sums_avx512(words, out) };
            return;
        }
        let _ = isa;
        for o in out.iter_mut() {
            *o = [0.0; 64];
        }
        for (g, entries) in self.table.iter().enumerate() {
            let rows = &words[64 * (g / 16)..64 * (g / 16) + 64];
            for (r, &w) in rows.iter().enumerate() {
                let n = nibble(w, g);
                for c in 0..W {
                    out[c][r] += entries[c].0[n];
                }
            }
        }
    }

    /// [`Self::block_sums`] with AVX-512: lane `l` of vector `v` is mask
    /// `8v + l`; per group, each column's 16 entries are two vectors and
    /// one `vpermt2pd` looks up 8 masks, added in group order as above.
    ///
    /// # Safety
    ///
    /// The CPU must have AVX-512 F.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn block_sums_avx512(&self, words: &[u64], out: &mut [[f64; 64]; W]) {
        use std::arch::x86_64::*;
        let mut acc = [[_mm512_setzero_pd(); 8]; W];
        for (g, entries) in self.table.iter().enumerate() {
            let mut lo = [_mm512_setzero_pd(); W];
            let mut hi = [_mm512_setzero_pd(); W];
            for c in 0..W {
                // SAFETY: `Entries` is 16 `f64` aligned to 64 bytes, so both
                // halves are whole aligned vectors inside it.
                unsafe {
                    lo[c] = _mm512_load_pd(entries[c].0.as_ptr());
                    hi[c] = _mm512_load_pd(entries[c].0.as_ptr().add(8));
                }
            }
            let shift = _mm_cvtsi64_si128((GROUP * (g % 16)) as i64);
            let rows = &words[64 * (g / 16)..64 * (g / 16) + 64];
            for (v, eight) in rows.chunks_exact(8).enumerate() {
                // SAFETY: `eight` is 8 `u64`, one whole (unaligned) vector.
                let w = unsafe { _mm512_loadu_si512(eight.as_ptr().cast()) };
                // vpermt2pd reads bits 0-3 of each index lane: the nibble.
                let idx = _mm512_srl_epi64(w, shift);
                for c in 0..W {
                    let e = _mm512_permutex2var_pd(lo[c], idx, hi[c]);
                    acc[c][v] = _mm512_add_pd(acc[c][v], e);
                }
            }
        }
        for c in 0..W {
            for v in 0..8 {
                let mut lanes = [0.0; 8];
                // SAFETY: `lanes` is 8 writable `f64`.
                unsafe { _mm512_storeu_pd(lanes.as_mut_ptr(), acc[c][v]) };
                out[c][8 * v..8 * v + 8].copy_from_slice(&lanes);
            }
        }
    }
}

/// Nibble `g mod 16` of `w`: group `g`'s look-up index.
#[inline(always)]
fn nibble(w: u64, g: usize) -> usize {
    ((w >> (GROUP * (g % 16))) & 0xf) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::stream;
    use rand::Rng;

    #[test]
    fn masked_sum_adds_exactly_the_kept_columns() {
        // Integer-valued columns: every partial sum is exact, so the table
        // sum must equal the direct sum bit for bit.
        let a: Vec<f64> = (0..21).map(|k| (k * 7 % 13) as f64 - 6.0).collect();
        let b: Vec<f64> = (0..21).map(|k| (k * k) as f64).collect();
        let t = SubsetTables::new([&a, &b]);
        assert_eq!(t.groups(), 6);
        for mask in [0u64, 1, 0b1011_0110_0101, (1 << 21) - 1, 0x15_5555] {
            let want = (0..21)
                .filter(|k| mask >> k & 1 == 1)
                .fold([0.0, 0.0], |s, k| [s[0] + a[k], s[1] + b[k]]);
            assert_eq!(t.masked_sum(&[mask]), want, "mask {mask:b}");
        }
    }

    /// 64 masks of 150 units (a partial last word and group), irrational
    /// columns: the block sums on every level are the single-mask sums, bit
    /// for bit.
    #[test]
    fn block_sums_are_the_single_mask_sums_on_every_level() {
        let units: usize = 150;
        let a: Vec<f64> = (0..units).map(|k| (k as f64 * 0.37).sin()).collect();
        let b: Vec<f64> = (0..units).map(|k| (k as f64).sqrt() - 5.0).collect();
        let t = SubsetTables::new([&a, &b]);
        let nw = units.div_ceil(64);
        let mut rng = stream(21, 0);
        let mut words: Vec<u64> = (0..64 * nw).map(|_| rng.next_u64()).collect();
        for w in &mut words[64 * (nw - 1)..] {
            *w &= (1 << (units % 64)) - 1;
        }
        for isa in [Isa::Portable, Isa::Avx2, Isa::Avx512] {
            let mut out = [[0.0; 64]; 2];
            t.block_sums(isa, &words, &mut out);
            for r in 0..64 {
                let mask: Vec<u64> = (0..nw).map(|j| words[64 * j + r]).collect();
                let [x, y] = t.masked_sum(&mask);
                assert_eq!(out[0][r].to_bits(), x.to_bits(), "{isa:?} mask {r}");
                assert_eq!(out[1][r].to_bits(), y.to_bits(), "{isa:?} mask {r}");
            }
        }
    }

    #[test]
    fn refill_is_new() {
        let a: Vec<f64> = (0..9).map(|k| k as f64 * 0.1).collect();
        let b: Vec<f64> = (0..9).map(|k| 1.0 / (k as f64 + 1.0)).collect();
        let mut t = SubsetTables::new([&a]);
        t.refill([&b]);
        let fresh = SubsetTables::new([&b]);
        for g in 0..t.groups() {
            assert_eq!(t.group(g, 0), fresh.group(g, 0));
        }
    }
}
