//! One attention row under dropout on bit masks, for the claims and
//! `eval attn`: the entries `E[b_i]`, the row sum `R` and the output `o`
//! with their variances, and the distribution of `R`.
//!
//! This module serves every statistic of the row (and `dropmc bench`'s W3)
//! through the shared `MaskKernel`, which packs short rows several to a
//! generated word.
//!
//! ```text
//! b_i = m_i a_i / q
//! E[b_i]: mean of m_i (a_i/q), from the keep count of key i   (as fast::dropout)
//! R = Σ_i m_i (a_i/q),  o = Σ_i m_i (a_i v_i/q)               two masked sums
//!     power sums of R − Σa and o − Σ a v  →  E[R], Var R, E[o], Var o
//! P(R = r_j): mean of 1{bin(R) = j}                              an indicator mean
//! ```

use super::mask_statistics::{MaskedSumPowers, SumHistogram, UnitKeeps};
use super::masks::{Both, MaskKernel, MaskStatistic};
use super::power_sums::{PowerSums, indicator_means, scaled_indicator_means};
use crate::engine::Budget;
use crate::error::{Error, check_finite_vec, check_len};
use crate::ops::Rate;
use crate::stats::Estimate;

/// Estimates of one attention row.
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionRowEstimates {
    /// `E[b_i]` per key (empty from [`row_sums`]).
    pub entry_mean: Vec<Estimate>,
    /// `E[R]`.
    pub row_sum_mean: Estimate,
    /// `Var R`.
    pub row_sum_variance: Estimate,
    /// `E[o]`.
    pub output_mean: Estimate,
    /// `Var o`.
    pub output_variance: Estimate,
}

/// The shifts of `R` and `o`: `Σ a` and `Σ a v`.
fn shifts(a: &[f64], v: &[f64]) -> [f64; 2] {
    [a.iter().sum(), a.iter().zip(v).map(|(a, v)| a * v).sum()]
}

fn sums_statistic(
    a: &[f64],
    v: &[f64],
    p: f64,
) -> Result<MaskedSumPowers<2, impl Fn([f64; 2]) -> [f64; 2] + Sync + use<>>, Error> {
    check_finite_vec("a", a)?;
    check_finite_vec("v", v)?;
    check_len("v", v, a.len())?;
    let q = Rate::new(p)?.q();
    let scaled: Vec<f64> = a.iter().map(|x| x / q).collect();
    let weighted: Vec<f64> = scaled.iter().zip(v).map(|(s, v)| s * v).collect();
    let [r0, o0] = shifts(a, v);
    MaskedSumPowers::new([&scaled, &weighted], move |[r, o]| [r - r0, o - o0])
}

/// The kernel of the power sums of `R − Σa` and `o − Σ a v`.
pub fn row_sums_kernel(
    a: &[f64],
    v: &[f64],
    p: f64,
) -> Result<MaskKernel<impl MaskStatistic + use<>>, Error> {
    MaskKernel::new(p, sums_statistic(a, v, p)?)
}

/// The kernel of [`row`]: keep counts per key, then the sums' power sums.
pub fn row_kernel(
    a: &[f64],
    v: &[f64],
    p: f64,
) -> Result<MaskKernel<impl MaskStatistic + use<>>, Error> {
    let keeps = UnitKeeps { units: a.len() };
    MaskKernel::new(p, Both(keeps, sums_statistic(a, v, p)?))
}

fn from_power_sums(
    entry_mean: Vec<Estimate>,
    sums: &[f64],
    shift: [f64; 2],
    n: u64,
) -> AttentionRowEstimates {
    let r = PowerSums::from_slice(&sums[..4], n, shift[0]);
    let o = PowerSums::from_slice(&sums[4..], n, shift[1]);
    AttentionRowEstimates {
        entry_mean,
        row_sum_mean: r.mean(),
        row_sum_variance: r.variance(),
        output_mean: o.mean(),
        output_variance: o.variance(),
    }
}

/// `E[R]`, `Var R`, `E[o]`, `Var o` of the row `a` with values `v`
/// (`entry_mean` left empty).
pub fn row_sums(
    a: &[f64],
    v: &[f64],
    p: f64,
    budget: Budget,
) -> Result<AttentionRowEstimates, Error> {
    let sums = row_sums_kernel(a, v, p)?.sums(budget)?;
    Ok(from_power_sums(
        Vec::new(),
        &sums,
        shifts(a, v),
        budget.samples,
    ))
}

/// Every estimate of [`AttentionRowEstimates`] from the same masks.
pub fn row(a: &[f64], v: &[f64], p: f64, budget: Budget) -> Result<AttentionRowEstimates, Error> {
    let q = Rate::new(p)?.q();
    let sums = row_kernel(a, v, p)?.sums(budget)?;
    let (counts, rest) = sums.split_at(a.len());
    let n = budget.samples;
    let scaled: Vec<f64> = a.iter().map(|x| x / q).collect();
    let entry_mean = scaled_indicator_means(&scaled, counts, n);
    Ok(from_power_sums(entry_mean, rest, shifts(a, v), n))
}

/// The kernel of [`row_sum_distribution`].
pub fn row_sum_histogram_kernel(
    a: &[f64],
    p: f64,
    bins: usize,
    bin: fn(f64) -> Option<usize>,
) -> Result<MaskKernel<impl MaskStatistic + use<>>, Error> {
    let q = Rate::new(p)?.q();
    let scaled: Vec<f64> = a.iter().map(|x| x / q).collect();
    MaskKernel::new(p, SumHistogram::new(&scaled, bins, bin)?)
}

/// `P(bin(R) = j)` for `j < bins`, as means of the indicators.
pub fn row_sum_distribution(
    a: &[f64],
    p: f64,
    bins: usize,
    bin: fn(f64) -> Option<usize>,
    budget: Budget,
) -> Result<Vec<Estimate>, Error> {
    let counts = row_sum_histogram_kernel(a, p, bins, bin)?.sums(budget)?;
    Ok(indicator_means(&counts, budget.samples))
}
