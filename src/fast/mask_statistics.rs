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

use super::masks::MaskStatistic;
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
        let t = (self.f)(self.tables.masked_sum(mask));
        for (s, &t) in sums.chunks_exact_mut(4).zip(&t) {
            let t2 = t * t;
            s[0] += t;
            s[1] += t2;
            s[2] += t2 * t;
            s[3] += t2 * t2;
        }
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
        let inside = super::norm::tail_mask(units);
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
