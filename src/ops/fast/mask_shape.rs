//! Independent versus shared-over-positions masks on a `T × d` block, on bit
//! masks.
//!
//! ```text
//! X row-major, entry (t, k) at index t·d + k
//! independent: one bit per entry, T·d units;  S_k = Σ_t m_tk x_tk / q
//! shared:      one bit per feature, d units;  S_k = m_k (Σ_t x_tk) / q
//! ```
//!
//! Either way `S_k` is a masked sum of a fixed column (zero off feature
//! `k`), so the `d` column sums are `d` masked sums of one mask, and `Var S_k`
//! comes from their power sums, shifted by `Σ_t x_tk` (`PowerSums`).
//! Column `k` is all zero exactly when its units are all dropped: the
//! independent group `{t·d + k : t < T}`, or the shared unit `k`; `P(all
//! zero)` is the mean of that indicator.

use super::mask_statistics::{GroupsDropped, MaskedSumPowers};
use super::masks::{MaskKernel, MaskStatistic};
use super::power_sums::{PowerSums, indicator_means};
use crate::engine::Budget;
use crate::error::{Error, check_finite_vec, check_len};
use crate::ops::Rate;
use crate::stats::Estimate;

/// The totals `Σ_t x_tk` of the `D` features of the row-major block `x`.
fn feature_totals<const D: usize>(x: &[f64]) -> [f64; D] {
    let mut s = [0.0; D];
    for (i, v) in x.iter().enumerate() {
        s[i % D] += v;
    }
    s
}

/// The kernel of the power sums of `S_k − Σ_t x_tk`, `k < D`, for the
/// block `x` of `positions × D` under independent or shared masks.
pub fn column_sums_kernel<const D: usize>(
    x: &[f64],
    positions: usize,
    shared: bool,
    p: f64,
) -> Result<MaskKernel<impl MaskStatistic + use<D>>, Error> {
    check_finite_vec("x", x)?;
    check_len("x", x, positions * D)?;
    let q = Rate::new(p)?.q();
    let totals = feature_totals::<D>(x);
    let columns: Vec<Vec<f64>> = (0..D)
        .map(|j| {
            if shared {
                (0..D)
                    .map(|k| if k == j { totals[j] / q } else { 0.0 })
                    .collect()
            } else {
                x.iter()
                    .enumerate()
                    .map(|(i, v)| if i % D == j { v / q } else { 0.0 })
                    .collect()
            }
        })
        .collect();
    let columns: [&[f64]; D] = std::array::from_fn(|j| &columns[j][..]);
    let stat = MaskedSumPowers::new(columns, move |s: [f64; D]| {
        std::array::from_fn(|k| s[k] - totals[k])
    })?;
    MaskKernel::new(p, stat)
}

/// `Var S_k` per feature.
pub fn column_sum_variances<const D: usize>(
    x: &[f64],
    positions: usize,
    shared: bool,
    p: f64,
    budget: Budget,
) -> Result<Vec<Estimate>, Error> {
    let sums = column_sums_kernel::<D>(x, positions, shared, p)?.sums(budget)?;
    let totals = feature_totals::<D>(x);
    Ok((0..D)
        .map(|k| {
            PowerSums::from_slice(&sums[4 * k..4 * k + 4], budget.samples, totals[k]).variance()
        })
        .collect())
}

/// `Var S_k` under masks shared over positions, in the pair form the
/// claim declares: `S_k = m_k (Σ_t x_tk) / q` is one dropped-out unit
/// carrying the feature's total, so `(S_k − S′_k)²/2` is a scaled count
/// of discordant pairs ([`super::dropout::unit_pair_variances`] on the
/// totals).
pub fn shared_column_pair_variances<const D: usize>(
    x: &[f64],
    positions: usize,
    p: f64,
    budget: Budget,
) -> Result<Vec<Estimate>, Error> {
    check_len("x", x, positions * D)?;
    super::dropout::unit_pair_variances(&feature_totals::<D>(x), p, budget)
}

/// The kernel counting, per feature, the masks whose column is all dropped.
pub fn zero_column_kernel(
    positions: usize,
    d: usize,
    shared: bool,
    p: f64,
) -> Result<MaskKernel<GroupsDropped>, Error> {
    let (units, groups) = if shared {
        (d, (0..d).map(|k| 1u64 << k).collect())
    } else {
        let units = positions * d;
        let groups = (0..d)
            .map(|k| (0..positions).fold(0u64, |g, t| g | 1u64 << (t * d + k)))
            .collect();
        (units, groups)
    };
    if units > 64 {
        return Err(Error::TooLarge {
            what: "T·d units of the zero-column kernel",
            limit: 64,
            got: units,
        });
    }
    MaskKernel::new(p, GroupsDropped::new(units, groups)?)
}

/// `P(column k all zero)` per feature, as means of the indicators.
pub fn zero_column_probabilities(
    positions: usize,
    d: usize,
    shared: bool,
    p: f64,
    budget: Budget,
) -> Result<Vec<Estimate>, Error> {
    let counts = zero_column_kernel(positions, d, shared, p)?.sums(budget)?;
    Ok(indicator_means(&counts, budget.samples))
}
