//! A compound site: `dropout → LN1 → LN2`. The first norm is corrected by
//! `c1 = c(μ, σ)`; the second sees LN1's leftover mask noise and is
//! corrected by the bypass factor `c2`.
//!
//! # Setting
//!
//! `z = dropout_p(x)`, `u = LN1(z)` with `(γ1, β1)`, output `LN2(u)` with
//! `(γ2, β2)`; `μ`, `σ²` of `x`; `ε = 0` (the `ε` versions follow the same
//! steps with `σ² → σ² + ε`).
//!
//! # Derivation (leading order)
//!
//! Step 1, LN1's mean: by [`super::layernorm`],
//!
//! ```text
//! E[u_k] ≈ ĉ1_k = β1_k + c1 γ1_k (x_k − μ)/σ,        c1 = c(μ, σ)
//! ```
//!
//! Step 2, LN1's noise: the mask moves `z_k` by `(m_k/q − 1) x_k`, of
//! variance `(p/q) x_k²`; LN1 multiplies it by `γ1_k / sqrt(E[V]) = γ1_k c1/σ`
//! (to leading order; the shared moves of `M` and `V` are `O(1/√d)` and
//! common to all units), so unit `k` of `u` carries independent noise of
//! variance
//!
//! ```text
//! Var u_k ≈ (p/q) γ1_k² x_k² c1² / σ²
//! ```
//!
//! Step 3, LN2 as a bypass site: `u = ĉ1 + noise` is exactly the shape of
//! [`super::bypass`] with signal `ĉ1` (spread `Var_k ĉ1`) and per-unit noise
//! whose mean over units is `(p/q) c1² S/σ²`, where `S = mean_k γ1_k² x_k²`.
//! The bypass step gives
//!
//! ```text
//! c2² = Var_k ĉ1 / (Var_k ĉ1 + (p/q) c1² S/σ²) = q / (q + p ρ²)
//! ρ²  = c1² S / (σ² Var_k ĉ1)
//! E[LN2(LN1(z))_k] ≈ β2_k + c2 γ2_k (ĉ1_k − mean ĉ1)/sqrt(Var_k ĉ1)
//!                  = β2_k + c2 (LN2(ĉ1)_k − β2_k)
//! ```
//!
//! Two weaker estimates are kept for comparison: the c1-only estimate
//! `LN2(ĉ1)` (corrects LN1's mean, ignores LN1's noise) and the uncorrected
//! `LN2(LN1(x))`.
//!
//! # Assumptions and order of error
//!
//! Independent masks, `σ > 0`, `Var_k ĉ1 > 0`, `d ≥ 2`. Every step is
//! leading order: step 1 and the bypass step each drop `O(1/d)` terms, and
//! step 2 drops the correlation that `M` and `V` induce between units (also
//! `O(1/d)` in the output). The suite measures the total gap on exact
//! oracles.

use super::Rate;
use super::ShiftedNormParams;
use super::layernorm::{input_moments, shrink_eps, shrink_towards_beta};
use super::mean_and_variance;
use crate::error::Error;

/// The pieces of the compound estimate.
#[derive(Debug, Clone, PartialEq)]
pub struct Compound {
    /// `c1 = c(μ, σ)` (its `ε` version when `ε1 > 0`).
    pub c1: f64,
    /// `ĉ1 = β1 + c1 (LN1(x) − β1)`.
    pub c1_hat: Vec<f64>,
    /// `S = mean_k γ1_k² x_k²`.
    pub s: f64,
    /// `ρ² = c1² S / ((σ² + ε1) Var_k ĉ1)`.
    pub rho2: f64,
    /// `c2 = sqrt(q/(q + p ρ²))` (with `ε2`: the bypass `ε` version).
    pub c2: f64,
}

/// `c1`, `ĉ1`, `S`, `ρ²`, `c2` for `x` at `rate` through `ln1`, `ln2`.
pub fn compound(
    x: &[f64],
    ln1: &impl ShiftedNormParams,
    ln2: &impl ShiftedNormParams,
    rate: Rate,
) -> Result<Compound, Error> {
    let (mu, s2) = input_moments(x)?;
    crate::error::check_len("gamma2", ln2.gamma(), x.len())?;
    let c1 = shrink_eps(mu, s2, ln1.eps(), rate);
    let c1_hat = shrink_towards_beta(&super::layernorm::uncorrected(x, ln1)?, ln1.beta(), c1);
    let (_, signal) = mean_and_variance(&c1_hat);
    if signal == 0.0 {
        return Err(Error::Degenerate {
            what: "LN1's corrected output is constant (γ1 = 0?): LN2 is undefined".into(),
        });
    }
    let s = x
        .iter()
        .zip(ln1.gamma())
        .map(|(a, g)| g * g * a * a)
        .sum::<f64>()
        / x.len() as f64;
    let noise = c1 * c1 * s / (s2 + ln1.eps());
    let rho2 = noise / signal;
    let c2 = ((signal + ln2.eps()) / (signal + rate.odds() * noise + ln2.eps())).sqrt();
    super::representable("the compound correction", vec![signal, s, rho2, c2])?;
    Ok(Compound {
        c1,
        c1_hat,
        s,
        rho2,
        c2,
    })
}

/// `LN2(ĉ1)`, the c1-only estimate.
pub fn c1_only<L: ShiftedNormParams>(
    x: &[f64],
    ln1: &L,
    ln2: &L,
    rate: Rate,
) -> Result<Vec<f64>, Error> {
    let parts = compound(x, ln1, ln2, rate)?;
    super::layernorm::uncorrected(&parts.c1_hat, ln2)
}

/// `β2 + c2 (LN2(ĉ1) − β2)`, the c1 + c2 estimate of `E[LN2(LN1(z))]`:
/// the [`c1_only`] estimate shrunk towards β2 by `c2`.
pub fn corrected<L: ShiftedNormParams>(
    x: &[f64],
    ln1: &L,
    ln2: &L,
    rate: Rate,
) -> Result<Vec<f64>, Error> {
    let c2 = compound(x, ln1, ln2, rate)?.c2;
    let c1_only = c1_only(x, ln1, ln2, rate)?;
    Ok(shrink_towards_beta(&c1_only, ln2.beta(), c2))
}

/// `LN2(LN1(x))`, the uncorrected output.
pub fn uncorrected<L: ShiftedNormParams>(x: &[f64], ln1: &L, ln2: &L) -> Result<Vec<f64>, Error> {
    let u = super::layernorm::uncorrected(x, ln1)?;
    super::layernorm::uncorrected(&u, ln2)
}
