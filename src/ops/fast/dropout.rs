//! Inverted dropout of one vector on bit masks: the per-unit moments, the
//! sum `S = Σ_k z_k`, the kept count `K` and the original scheme.
//!
//! # Per-unit statistics from keep counts
//!
//! ```text
//! z_k = m_k x_k / q, so for any g with g(0) = 0:  g(z_k) = m_k g(x_k/q)
//! over n masks of which K_k keep unit k:
//!     Σ g(z_k)ʳ = g(x_k/q)ʳ K_k                        (r = 1 … 4)
//! ```
//!
//! `E[z_kʳ]` is the mean of `t = m_k (x_k/q)ʳ`, the original scheme's
//! `E[m_k x_k]` the mean of `t = m_k x_k`, `Var z_k` the sample variance of
//! `t = m_k x_k/q`: each is the plain estimator of the generic path, computed
//! from the counts `K_k` alone (`PowerSums::of_scaled_indicator`).
//!
//! # The sum and the kept count
//!
//! `S = Σ_k m_k (x_k/q)` is one masked sum (a table look-up per 8 units);
//! its power sums, shifted by `Σ_k x_k`, give `E[S]` and `Var S`
//! (`PowerSums`). `K = Σ_k m_k · 1` is the masked sum of ones (exact: an
//! integer below 2⁵³), and `P(K = k)` is the mean of the indicator
//! `1{K = k}`, an indicator mean exactly as on the generic path.

use super::mask_statistics::{MaskedSumPowers, SumHistogram, UnitDiscordances, UnitKeeps};
use super::masks::{Both, MaskKernel, MaskStatistic};
use super::power_sums::{PowerSums, indicator_means};
use crate::engine::Budget;
use crate::error::{Error, check_finite_vec};
use crate::ops::Rate;
use crate::stats::Estimate;

/// The kernel counting, per unit of `x`, the masks that keep it.
pub fn unit_keeps_kernel(x: &[f64], p: f64) -> Result<MaskKernel<UnitKeeps>, Error> {
    check_finite_vec("x", x)?;
    MaskKernel::new(p, UnitKeeps { units: x.len() })
}

/// The kernel of the power sums of `S − Σx`, `S = Σ_k m_k x_k/q`.
pub fn sum_kernel(x: &[f64], p: f64) -> Result<MaskKernel<impl MaskStatistic + use<>>, Error> {
    MaskKernel::new(p, sum_statistic(x, p)?)
}

fn sum_statistic(
    x: &[f64],
    p: f64,
) -> Result<MaskedSumPowers<1, impl Fn([f64; 1]) -> [f64; 1] + Sync + use<>>, Error> {
    check_finite_vec("x", x)?;
    let q = Rate::new(p)?.q();
    let scaled: Vec<f64> = x.iter().map(|v| v / q).collect();
    let shift = sum_shift(x);
    MaskedSumPowers::new([&scaled], move |[s]| [s - shift])
}

/// The constant the sum's power sums are shifted by: `E[S] = Σ x_k`, where
/// the shift makes the one-pass moments most accurate (any constant gives
/// the same variance).
fn sum_shift(x: &[f64]) -> f64 {
    x.iter().sum()
}

/// The kernel of the kept-count histogram over `d + 1` counts.
pub fn kept_count_kernel(
    d: usize,
    p: f64,
) -> Result<MaskKernel<impl MaskStatistic + use<>>, Error> {
    let hist = SumHistogram::new(&vec![1.0; d], d + 1, |s| Some(s as usize))?;
    MaskKernel::new(p, hist)
}

/// Per unit, the masks of `budget` that keep it.
fn keep_counts(x: &[f64], p: f64, budget: Budget) -> Result<Vec<f64>, Error> {
    unit_keeps_kernel(x, p)?.sums(budget)
}

/// Per unit, the estimate of `E[m_k c_k]` (`per_unit_value` gives `c_k`
/// from `x_k`), or its variance when `variance`.
fn per_unit(
    x: &[f64],
    p: f64,
    budget: Budget,
    per_unit_value: impl Fn(f64) -> f64,
    variance: bool,
) -> Result<Vec<Estimate>, Error> {
    let counts = keep_counts(x, p, budget)?;
    Ok(x.iter()
        .zip(&counts)
        .map(|(&a, &k)| {
            let sums = PowerSums::of_scaled_indicator(per_unit_value(a), k, budget.samples);
            if variance {
                sums.variance()
            } else {
                sums.mean()
            }
        })
        .collect())
}

/// `E[z_kʳ]` per unit (`r ≥ 1`).
pub fn unit_raw_moments(x: &[f64], p: f64, r: i32, budget: Budget) -> Result<Vec<Estimate>, Error> {
    let q = Rate::new(p)?.q();
    per_unit(x, p, budget, |a| (a / q).powi(r), false)
}

/// `Var z_k` per unit in the pair form the claim declares: per pair of
/// independent masks, `(z_k − z′_k)²/2` is `x_k²/(2q²)` when exactly one
/// keeps unit `k` (probability `2pq`) and 0 otherwise, so its mean over `n`
/// pairs comes from the discordance counts alone
/// (`UnitDiscordances`, `PowerSums::of_scaled_indicator`).
pub fn unit_pair_variances(x: &[f64], p: f64, budget: Budget) -> Result<Vec<Estimate>, Error> {
    check_finite_vec("x", x)?;
    let q = Rate::new(p)?.q();
    let counts = MaskKernel::new(p, UnitDiscordances { units: x.len() })?.sums(budget)?;
    Ok(x.iter()
        .zip(&counts)
        .map(|(&a, &k)| {
            PowerSums::of_scaled_indicator(a * a / (2.0 * q * q), k, budget.samples).mean()
        })
        .collect())
}

/// `Var z_k` per unit: the single-draw sample variance (what `eval
/// moments` shows).
pub fn unit_variances(x: &[f64], p: f64, budget: Budget) -> Result<Vec<Estimate>, Error> {
    let q = Rate::new(p)?.q();
    per_unit(x, p, budget, |a| a / q, true)
}

/// The original (non-inverted) scheme's training output `E[m_k x_k]` per unit.
pub fn original_scheme_means(x: &[f64], p: f64, budget: Budget) -> Result<Vec<Estimate>, Error> {
    per_unit(x, p, budget, |a| a, false)
}

/// The power sums of `S` over `budget` masks (`mean()`: `E[S]`,
/// `variance()`: `Var S`).
pub fn sum_power_sums(x: &[f64], p: f64, budget: Budget) -> Result<PowerSums, Error> {
    let sums = sum_kernel(x, p)?.sums(budget)?;
    Ok(PowerSums::from_slice(&sums, budget.samples, sum_shift(x)))
}

/// `P(K = k)` for `k = 0 … d`, as means of the indicators `1{K = k}`.
pub fn kept_count_pmf(d: usize, p: f64, budget: Budget) -> Result<Vec<Estimate>, Error> {
    let counts = kept_count_kernel(d, p)?.sums(budget)?;
    Ok(indicator_means(&counts, budget.samples))
}

/// What `eval moments` reports, from one pass over the masks.
#[derive(Debug, Clone, PartialEq)]
pub struct DropoutMoments {
    /// `E[z_k]` per unit.
    pub unit_mean: Vec<Estimate>,
    /// `E[z_k²]` per unit.
    pub unit_second: Vec<Estimate>,
    /// `Var z_k` per unit.
    pub unit_variance: Vec<Estimate>,
    /// `E[S]`.
    pub sum_mean: Estimate,
    /// `Var S`.
    pub sum_variance: Estimate,
}

/// The kernel of [`moments`]: keep counts and the sum's power sums of the
/// same masks.
pub fn moments_kernel(x: &[f64], p: f64) -> Result<MaskKernel<impl MaskStatistic + use<>>, Error> {
    let keeps = UnitKeeps { units: x.len() };
    MaskKernel::new(p, Both(keeps, sum_statistic(x, p)?))
}

/// Every moment of [`DropoutMoments`] from the same `budget.samples` masks.
pub fn moments(x: &[f64], p: f64, budget: Budget) -> Result<DropoutMoments, Error> {
    let q = Rate::new(p)?.q();
    let sums = moments_kernel(x, p)?.sums(budget)?;
    let (counts, sum) = sums.split_at(x.len());
    let n = budget.samples;
    let unit = |r: i32, a: f64, k: f64| PowerSums::of_scaled_indicator((a / q).powi(r), k, n);
    let sum = PowerSums::from_slice(sum, n, sum_shift(x));
    let per =
        |g: &dyn Fn(f64, f64) -> Estimate| x.iter().zip(counts).map(|(&a, &k)| g(a, k)).collect();
    Ok(DropoutMoments {
        unit_mean: per(&|a, k| unit(1, a, k).mean()),
        unit_second: per(&|a, k| unit(2, a, k).mean()),
        unit_variance: per(&|a, k| unit(1, a, k).variance()),
        sum_mean: sum.mean(),
        sum_variance: sum.variance(),
    })
}
