//! The statistics a [`super::masks::MaskKernel`] adds per mask. Every one
//! adds in a fixed order (units in index order, columns in index order), so
//! its sums are a fixed function of the masks.
//!
//! * [`UnitKeeps`] — per unit, the number of masks keeping it. Any statistic
//!   of one unit, `g(m_k x_k / q)`, is `g(x_k/q)` on those masks and `g(0)`
//!   on the rest, so every per-unit moment follows from these counts.
//! * [`UnitDiscordances`] — two masks of `d` units side by side (one mask
//!   of `2d` bits); per unit, the number of mask pairs in which exactly one
//!   of the two keeps it. The pair form `(z_k − z′_k)²/2` of a unit is
//!   `x_k²/(2q²)` on those pairs and 0 on the rest.
//! * [`MaskedSumPowers`] — `W` masked sums `s_c = Σ_k m_k col_c[k]` (one
//!   table look-up per 8 units, [`SubsetTables`]), a map `f` of them, and
//!   the power sums `Σt, Σt², Σt³, Σt⁴` of each `t_c = f(s)_c` (for
//!   [`super::PowerSums`]).
//! * [`SumHistogram`] — a bin of one masked sum (`None`: no bin), counted.
//! * [`GroupsDropped`] — per group of units, the number of masks that drop
//!   every unit of the group.

use super::bits::transpose64_on;
use super::masks::{MaskBlock, MaskStatistic};
use super::run::Isa;
use super::tables::SubsetTables;
use crate::error::Error;

/// Per unit, the number of masks keeping it.
#[derive(Debug, Clone)]
pub struct UnitKeeps {
    pub units: usize,
}

impl MaskStatistic for UnitKeeps {
    fn units(&self) -> usize {
        self.units
    }
    fn width(&self) -> usize {
        self.units
    }
    #[inline(always)]
    fn add(&self, mask: &[u64], sums: &mut [f64]) {
        for (i, &word) in mask.iter().enumerate() {
            let mut w = word;
            while w != 0 {
                sums[64 * i + w.trailing_zeros() as usize] += 1.0;
                w &= w - 1;
            }
        }
    }
    /// Per 64 units, one transpose of the block's word `j` across its 64
    /// masks gives one word per unit holding its keep bits across the
    /// masks; its popcount is the unit's count in the block. A count is an
    /// integer below 2⁵³, so adding it at once is the same `f64` as adding
    /// 1.0 per keeping mask.
    #[inline(always)]
    fn add_block(&self, isa: Isa, block: &MaskBlock<'_>, sums: &mut [f64]) {
        let mut by_unit = [0u64; 64];
        for (rows, group) in block.word_major().chunks_exact(64).zip(sums.chunks_mut(64)) {
            by_unit.copy_from_slice(rows);
            transpose64_on(isa, &mut by_unit);
            for (s, w) in group.iter_mut().zip(&by_unit) {
                *s += f64::from(w.count_ones());
            }
        }
    }
}

/// Per unit `k < units`, the number of masks of `2 · units` bits whose bits
/// `k` and `units + k` differ (exactly one of two independent masks keeps
/// the unit).
#[derive(Debug, Clone)]
pub struct UnitDiscordances {
    pub units: usize,
}

impl MaskStatistic for UnitDiscordances {
    fn units(&self) -> usize {
        2 * self.units
    }
    fn width(&self) -> usize {
        self.units
    }
    #[inline(always)]
    fn add(&self, mask: &[u64], sums: &mut [f64]) {
        let bit = |i: usize| (mask[i / 64] >> (i % 64)) & 1;
        for (k, s) in sums.iter_mut().enumerate() {
            if bit(k) != bit(self.units + k) {
                *s += 1.0;
            }
        }
    }
}

/// Power sums of `t = f(s)`, `s_c = Σ_k m_k col_c[k]`: `sums[4c + r − 1]`
/// accumulates `t_cʳ` for `r = 1 … 4`.
pub struct MaskedSumPowers<const W: usize, F> {
    units: usize,
    tables: SubsetTables<W>,
    f: F,
}

impl<const W: usize, F: Fn([f64; W]) -> [f64; W] + Sync> MaskedSumPowers<W, F> {
    /// The statistic for the columns (all of one length `d ≥ 1`) and map `f`.
    pub fn new(columns: [&[f64]; W], f: F) -> Result<Self, Error> {
        let units = columns.first().map_or(0, |c| c.len());
        if units == 0 {
            return Err(Error::Empty { what: "mask" });
        }
        for c in &columns {
            crate::error::check_len("column", c, units)?;
            crate::error::check_finite_vec("column", c)?;
        }
        Ok(MaskedSumPowers {
            units,
            tables: SubsetTables::new(columns),
            f,
        })
    }
}

impl<const W: usize, F: Fn([f64; W]) -> [f64; W] + Sync> MaskStatistic for MaskedSumPowers<W, F> {
    fn units(&self) -> usize {
        self.units
    }
    fn width(&self) -> usize {
        4 * W
    }
    #[inline(always)]
    fn add(&self, mask: &[u64], sums: &mut [f64]) {
        add_powers(&(self.f)(self.tables.masked_sum(mask)), sums);
    }
    /// The 64 masked sums by [`SubsetTables::block_sums`] (the same bits as
    /// [`SubsetTables::masked_sum`] per mask), then the powers in mask order.
    #[inline(always)]
    fn add_block(&self, isa: Isa, block: &MaskBlock<'_>, sums: &mut [f64]) {
        let mut per_mask = [[0.0f64; 64]; W];
        self.tables
            .block_sums(isa, block.word_major(), &mut per_mask);
        // `b` picks mask `b`'s sum out of every column's row of 64.
        #[allow(clippy::needless_range_loop)]
        for b in 0..block.len() {
            add_powers(&(self.f)(std::array::from_fn(|c| per_mask[c][b])), sums);
        }
    }
}

/// Adds `tᶜ, (tᶜ)², (tᶜ)³, (tᶜ)⁴` into `sums[4c ..4c + 4]` for each column `c`.
#[inline(always)]
fn add_powers<const W: usize>(t: &[f64; W], sums: &mut [f64]) {
    for (s, &t) in sums.chunks_exact_mut(4).zip(t) {
        let t2 = t * t;
        s[0] += t;
        s[1] += t2;
        s[2] += t2 * t;
        s[3] += t2 * t2;
    }
}

/// Counts of `bin(Σ_k m_k col[k])` over `bins` bins (a sum with no bin is
/// not counted).
pub struct SumHistogram<F> {
    units: usize,
    bins: usize,
    tables: SubsetTables<1>,
    bin: F,
}

impl<F: Fn(f64) -> Option<usize> + Sync> SumHistogram<F> {
    /// The histogram of `bin` of the masked sum of `column` (`d ≥ 1`).
    pub fn new(column: &[f64], bins: usize, bin: F) -> Result<Self, Error> {
        if column.is_empty() {
            return Err(Error::Empty { what: "mask" });
        }
        crate::error::check_finite_vec("column", column)?;
        Ok(SumHistogram {
            units: column.len(),
            bins,
            tables: SubsetTables::new([column]),
            bin,
        })
    }
}

// Same shape as `UnitKeeps`'s impl: the `MaskStatistic` signatures and
// accessors, because only what `add` accumulates differs.
impl<F: Fn(f64) -> Option<usize> + Sync> MaskStatistic for SumHistogram<F> {
    fn units(&self) -> usize {
        self.units
    }
    fn width(&self) -> usize {
        self.bins
    }
    #[inline(always)]
    fn add(&self, mask: &[u64], sums: &mut [f64]) {
        let [s] = self.tables.masked_sum(mask);
        self.count(s, sums);
    }
    /// The 64 sums by [`SubsetTables::block_sums`], counted in mask order.
    #[inline(always)]
    fn add_block(&self, isa: Isa, block: &MaskBlock<'_>, sums: &mut [f64]) {
        let mut per_mask = [[0.0f64; 64]; 1];
        self.tables
            .block_sums(isa, block.word_major(), &mut per_mask);
        for &s in &per_mask[0][..block.len()] {
            self.count(s, sums);
        }
    }
}

impl<F: Fn(f64) -> Option<usize>> SumHistogram<F> {
    /// Counts the sum `s` in its bin, if it has one.
    #[inline(always)]
    fn count(&self, s: f64, sums: &mut [f64]) {
        if let Some(b) = (self.bin)(s).filter(|&b| b < self.bins) {
            sums[b] += 1.0;
        }
    }
}

/// Per group (a set of units, as bits of one word; `d ≤ 64`), the number of
/// masks that drop every unit of the group.
#[derive(Debug, Clone)]
pub struct GroupsDropped {
    units: usize,
    groups: Vec<u64>,
}

impl GroupsDropped {
    /// The counts for `groups` over masks of `units` units (`1 ≤ d ≤ 64`,
    /// every group non-empty and inside the mask).
    pub fn new(units: usize, groups: Vec<u64>) -> Result<Self, Error> {
        if units == 0 || units > 64 {
            return Err(Error::InvalidOption {
                what: format!("unit groups need 1 to 64 units, got {units}"),
            });
        }
        let inside = super::blocks::tail_mask(units);
        if let Some(g) = groups.iter().find(|&&g| g == 0 || g & !inside != 0) {
            return Err(Error::InvalidOption {
                what: format!("group {g:#b} is empty or outside {units} units"),
            });
        }
        Ok(GroupsDropped { units, groups })
    }
}

impl MaskStatistic for GroupsDropped {
    fn units(&self) -> usize {
        self.units
    }
    fn width(&self) -> usize {
        self.groups.len()
    }
    #[inline(always)]
    fn add(&self, mask: &[u64], sums: &mut [f64]) {
        for (s, &g) in sums.iter_mut().zip(&self.groups) {
            if mask[0] & g == 0 {
                *s += 1.0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_statistic_adds_exactly_its_definition() {
        // Units 0, 2, 3 of 5 kept.
        let mask = [0b01101u64];
        let mut keeps = vec![0.0; 5];
        UnitKeeps { units: 5 }.add(&mask, &mut keeps);
        assert_eq!(keeps, [1.0, 0.0, 1.0, 1.0, 0.0]);

        let col = [1.0, 10.0, 100.0, 1000.0, 10000.0];
        let powers = MaskedSumPowers::new([&col], |[s]| [s - 1000.0]).unwrap();
        let mut sums = vec![0.0; 4];
        powers.add(&mask, &mut sums);
        assert_eq!(
            sums,
            [101.0, 101.0f64.powi(2), 101.0f64.powi(3), 101.0f64.powi(4)]
        );

        let hist = SumHistogram::new(&[1.0; 5], 6, |s| Some(s as usize)).unwrap();
        let mut counts = vec![0.0; 6];
        hist.add(&mask, &mut counts);
        assert_eq!(counts, [0.0, 0.0, 0.0, 1.0, 0.0, 0.0]);

        let groups = GroupsDropped::new(5, vec![0b10010, 0b00011]).unwrap();
        let mut dropped = vec![0.0; 2];
        groups.add(&mask, &mut dropped);
        assert_eq!(dropped, [1.0, 0.0]);
    }

    /// Blocks of 150-unit masks (a partial last word; 64 masks and a
    /// partial block of 37): every statistic's `add_block` adds the same
    /// bits as `add` on each mask in order, on every instruction-set level.
    #[test]
    fn block_adds_are_the_per_mask_adds_bit_for_bit() {
        use super::super::masks::MaskBlock;
        use crate::engine::stream;
        use rand::Rng;
        let (d, nw) = (150usize, 3usize);
        let col: Vec<f64> = (0..d).map(|k| (k as f64 * 0.37).sin()).collect();
        let sq: Vec<f64> = col.iter().map(|c| c * c - 0.2).collect();
        let powers = MaskedSumPowers::new([&col, &sq], |[a, b]| [a - 0.5, b]).unwrap();
        let hist = SumHistogram::new(&col, 9, |s| Some((s + 4.0).max(0.0) as usize)).unwrap();
        let keeps = UnitKeeps { units: d };
        let mut rng = stream(31, 0);
        for len in [64usize, 37] {
            let mut masks: Vec<u64> = (0..len * nw).map(|_| rng.next_u64()).collect();
            for m in masks.chunks_exact_mut(nw) {
                m[nw - 1] &= super::super::blocks::tail_mask(d);
            }
            let mut word_major = vec![0u64; 64 * nw];
            for (b, m) in masks.chunks_exact(nw).enumerate() {
                for (j, &w) in m.iter().enumerate() {
                    word_major[64 * j + b] = w;
                }
            }
            let block = MaskBlock::new(&masks, &word_major, len, nw);
            for isa in [Isa::Portable, Isa::Avx2, Isa::Avx512] {
                let check = |name: &str,
                             width: usize,
                             add: &dyn Fn(&[u64], &mut [f64]),
                             add_block: &dyn Fn(&mut [f64])| {
                    let mut one = vec![0.0; width];
                    for m in masks.chunks_exact(nw) {
                        add(m, &mut one);
                    }
                    let mut all = vec![0.0; width];
                    add_block(&mut all);
                    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&all), bits(&one), "{name}, {len} masks, {isa:?}");
                };
                check("keeps", d, &|m, s| keeps.add(m, s), &|s| {
                    keeps.add_block(isa, &block, s)
                });
                check("powers", 8, &|m, s| powers.add(m, s), &|s| {
                    powers.add_block(isa, &block, s)
                });
                check("histogram", 9, &|m, s| hist.add(m, s), &|s| {
                    hist.add_block(isa, &block, s)
                });
            }
        }
    }

    #[test]
    fn bad_groups_and_columns_are_errors() {
        assert!(GroupsDropped::new(65, vec![1]).is_err());
        assert!(GroupsDropped::new(3, vec![0]).is_err());
        assert!(GroupsDropped::new(3, vec![0b1000]).is_err());
        assert!(MaskedSumPowers::new([&[][..]], |s| s).is_err());
        assert!(MaskedSumPowers::new([&[1.0][..], &[1.0, 2.0][..]], |s| s).is_err());
        assert!(SumHistogram::new(&[f64::NAN], 1, |_| Some(0)).is_err());
    }
}
