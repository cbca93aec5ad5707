//! The ensemble gaps `E_m[f(z)] − f(x)` on bit masks, for the three `f` of
//! [`crate::formulas::ensemble`]. Each is a function of one masked sum, so a
//! mask costs one table look-up, not a pass over `z`:
//!
//! ```text
//! affine  f(z) = w·z + c         = s + c,        s = Σ_k m_k (w_k x_k/q)
//! ReLU    f(z) = max(0, w·z + c) = max(0, s + c), the same s
//! LSE     f(z) = ln Σ_k exp(z_k)
//!              = ln Σ_k (m_k e^{x_k/q} + (1 − m_k) e⁰)     (a dropped z_k is 0)
//!              = ln(d + s),      s = Σ_k m_k (e^{x_k/q} − 1)
//! ```
//!
//! The per-mask gap `t = f(z) − f(x)` (with `f(x)` from the formulas module)
//! goes into power sums (`PowerSums`); its mean is the estimate. The LSE
//! form needs `e^{x_k/q}` finite (`x_k/q < 709`): a larger input is an error,
//! not an infinity.

use super::mask_statistics::MaskedSumPowers;
use super::masks::{MaskKernel, MaskStatistic};
use super::power_sums::PowerSums;
use crate::engine::Budget;
use crate::error::{Error, check_finite_vec, check_len};
use crate::formulas::ensemble as f;
use crate::ops::Rate;
use crate::stats::Estimate;

/// The kernel of the power sums of `value(s) − baseline`, `s` the masked sum
/// of `column`.
fn gap_kernel<V: Fn(f64) -> f64 + Sync>(
    column: &[f64],
    p: f64,
    value: V,
    baseline: f64,
) -> Result<MaskKernel<impl MaskStatistic + use<V>>, Error> {
    let stat = MaskedSumPowers::new([column], move |[s]| [value(s) - baseline])?;
    MaskKernel::new(p, stat)
}

/// `w_k x_k / q`, the column of the affine and ReLU gaps.
fn weighted(x: &[f64], w: &[f64], p: f64) -> Result<Vec<f64>, Error> {
    check_finite_vec("x", x)?;
    check_finite_vec("w", w)?;
    check_len("w", w, x.len())?;
    let q = Rate::new(p)?.q();
    Ok(x.iter().zip(w).map(|(x, w)| w * x / q).collect())
}

/// The kernel of the affine gap `w·z + c − (w·x + c)`.
pub fn affine_gap_kernel(
    x: &[f64],
    w: &[f64],
    c: f64,
    p: f64,
) -> Result<MaskKernel<impl MaskStatistic + use<>>, Error> {
    gap_kernel(&weighted(x, w, p)?, p, move |s| s + c, f::affine(w, c, x))
}

/// The kernel of the ReLU gap `max(0, w·z + c) − max(0, w·x + c)`.
pub fn relu_gap_kernel(
    x: &[f64],
    w: &[f64],
    c: f64,
    p: f64,
) -> Result<MaskKernel<impl MaskStatistic + use<>>, Error> {
    let baseline = f::relu_affine(w, c, x);
    gap_kernel(&weighted(x, w, p)?, p, move |s| (s + c).max(0.0), baseline)
}

/// The kernel of the log-sum-exp gap `ln Σ exp z_k − ln Σ exp x_k`.
pub fn log_sum_exp_gap_kernel(
    x: &[f64],
    p: f64,
) -> Result<MaskKernel<impl MaskStatistic + use<>>, Error> {
    check_finite_vec("x", x)?;
    let q = Rate::new(p)?.q();
    let column: Vec<f64> = x.iter().map(|v| (v / q).exp_m1()).collect();
    let d = x.len() as f64;
    gap_kernel(&column, p, move |s| (d + s).ln(), f::log_sum_exp(x))
}

/// The mean gap over `budget.samples` masks of one of the kernels above.
pub fn gap<S: MaskStatistic>(kernel: &MaskKernel<S>, budget: Budget) -> Result<Estimate, Error> {
    let sums = kernel.sums(budget)?;
    Ok(PowerSums::from_slice(&sums, budget.samples, 0.0).mean())
}
