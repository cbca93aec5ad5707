//! Byte-indexed subset sums: a masked sum of `W` fixed columns in one table
//! look-up per 8 units.
//!
//! For group `g` (units `8g … 8g+7`) and byte `b`, entry `T[g][b]` holds
//! `Σ_{j : bit j of b is 1} c[8g + j]` for each column `c`. A mask stored
//! as bits (unit `k` is bit `k % 64` of word `k / 64`) then gives
//! `Σ_k m_k c[k]` as `Σ_g T[g][byte g of the mask]`: `d/8` look-ups in place of
//! `d` multiply-adds. Entries are built once, in a fixed order
//! (`T[b] = T[b without its lowest bit] + c[lowest bit]`), and the sum runs
//! over groups in a fixed order with four interleaved partial sums, so the
//! result is a fixed function of the mask.

/// Subset-sum tables for `W` columns over groups of 8 units.
#[derive(Debug, Clone)]
pub struct SubsetTables<const W: usize> {
    groups: usize,
    table: Vec<[f64; W]>,
}

impl<const W: usize> SubsetTables<W> {
    /// Tables for the columns `columns[c][k]`, `k < units` (all the same
    /// length). Units past the end of a partial last group count as 0.
    pub fn new(columns: [&[f64]; W]) -> Self {
        let units = columns.first().map_or(0, |c| c.len());
        let groups = units.div_ceil(8);
        let mut table = vec![[0.0; W]; groups * 256];
        for g in 0..groups {
            let t = &mut table[g * 256..(g + 1) * 256];
            for b in 1..256usize {
                let low = b.trailing_zeros() as usize;
                let k = 8 * g + low;
                let mut e = t[b & (b - 1)];
                for (c, col) in columns.iter().enumerate() {
                    if k < units {
                        e[c] += col[k];
                    }
                }
                t[b] = e;
            }
        }
        SubsetTables { groups, table }
    }

    /// Number of 8-unit groups.
    pub fn groups(&self) -> usize {
        self.groups
    }

    /// One group's 256 entries.
    #[inline]
    pub fn group(&self, g: usize) -> &[[f64; W]] {
        &self.table[g * 256..(g + 1) * 256]
    }

    /// `Σ_k m_k c[k]` for each column, for the mask held in `words`
    /// (`words.len() · 8 ≥ groups`; bits past the last unit must be 0).
    #[inline(always)]
    pub fn masked_sum(&self, words: &[u64]) -> [f64; W] {
        let mut part = [[0.0; W]; 4];
        let full = self.groups / 8;
        // Whole words: 8 look-ups each, unrolled; group g adds into part[g % 4].
        for (i, &w) in words.iter().take(full).enumerate() {
            let base = &self.table[i * 8 * 256..(i + 1) * 8 * 256];
            for (j, byte) in w.to_le_bytes().into_iter().enumerate() {
                let e = &base[j * 256 + byte as usize];
                let p = &mut part[j & 3];
                for c in 0..W {
                    p[c] += e[c];
                }
            }
        }
        // A partial last word.
        if let Some(&w) = words.get(full) {
            for (j, byte) in w.to_le_bytes().into_iter().enumerate() {
                let g = full * 8 + j;
                if g == self.groups {
                    break;
                }
                let e = &self.table[g * 256 + byte as usize];
                let p = &mut part[j & 3];
                for c in 0..W {
                    p[c] += e[c];
                }
            }
        }
        let mut out = [0.0; W];
        for c in 0..W {
            out[c] = (part[0][c] + part[1][c]) + (part[2][c] + part[3][c]);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_sum_adds_exactly_the_kept_columns() {
        // Integer-valued columns: every partial sum is exact, so the table
        // sum must equal the direct sum bit for bit.
        let a: Vec<f64> = (0..21).map(|k| (k * 7 % 13) as f64 - 6.0).collect();
        let b: Vec<f64> = (0..21).map(|k| (k * k) as f64).collect();
        let t = SubsetTables::new([&a, &b]);
        assert_eq!(t.groups(), 3);
        for mask in [0u64, 1, 0b1011_0110_0101, (1 << 21) - 1, 0x15_5555] {
            let want = (0..21)
                .filter(|k| mask >> k & 1 == 1)
                .fold([0.0, 0.0], |s, k| [s[0] + a[k], s[1] + b[k]]);
            assert_eq!(t.masked_sum(&[mask]), want, "mask {mask:b}");
        }
    }
}
