//! Bypass ("damped") sites: `y = h + dropout(v)`, and several independently
//! dropped terms `y = h + Σ_j dropout_{p_j}(v_j)`, in front of LayerNorm.
//!
//! # Setting
//!
//! The evaluation input is `x = h + Σ_j v_j` with mean `μ`, spread `σ²`.
//! Term `j` is dropped at rate `p_j` (`q_j = 1 − p_j`), independently of
//! the others; `w_j = mean_k v_jk²`. One term: `v̄² = mean_k v_k²`.
//!
//! # Derivation: `E[V_y]` (exact)
//!
//! Write `y = x + e` with `e_k = Σ_j (m_jk/q_j − 1) v_jk`. Each summand has
//! mean 0 and variance `(p_j/q_j) v_jk²`, and all are independent, so
//! `E[e_k] = 0`, `Var e_k = Σ_j (p_j/q_j) v_jk²`.
//!
//! ```text
//! V_y = mean_k y_k² − ȳ²
//! E[mean_k y_k²] = mean_k (x_k² + Var e_k) = σ² + μ² + Σ_j (p_j/q_j) w_j
//! E[ȳ²]          = μ² + Var ē = μ² + (1/d) Σ_j (p_j/q_j) w_j
//! E[V_y]         = σ² + (1 − 1/d) Σ_j (p_j/q_j) w_j
//! one term:  E[V_y] = σ² + (p/q) v̄² (1 − 1/d)
//! ```
//!
//! # Derivation: the damped factor (leading order)
//!
//! `E[y_k − ȳ] = x_k − μ` exactly; replacing `sqrt(V_y)` by
//! `sqrt(E[V_y])` and dropping the `1/d` term,
//!
//! ```text
//! E[LN(y)_k] ≈ β_k + c_damped (LN(x)_k − β_k)
//! c_damped² = σ² / (σ² + (p/q) v̄²) = q / (q + p ρ²),   ρ² = v̄²/σ²
//! several terms:  c² = σ² / (σ² + Σ_j (p_j/q_j) w_j)
//! with ε:  c_ε² = (σ² + ε)/(σ² + (p/q) v̄² + ε)
//! ```
//!
//! Checks: `h = 0` gives `v = x`, `v̄² = σ² + μ²`, and
//! `σ²/(σ² + (p/q)(σ² + μ²)) = q σ²/(σ² + p μ²) = c(μ, σ)²`, the plain
//! LayerNorm factor. `v → 0` gives `ρ² → 0` and `c_damped → 1`: a term that
//! carries little of the signal barely disturbs the norm.
//!
//! # Assumptions and order of error
//!
//! Independent masks within and across terms; `σ > 0`, `d ≥ 2`. `E[V_y]` is
//! exact; `E[LN(y)]` is leading order with an `O(1/d)` error, for the same
//! reasons as in [`super::layernorm`].

use super::layernorm::{input_moments, shrink_towards_beta};
use super::{DropoutSite, ShiftedNormParams};
use crate::error::{Error, check_eps};

/// `Σ_j (p_j/q_j) mean_k v_jk²`, the noise the dropped terms add per unit.
pub fn added_noise(site: &impl DropoutSite) -> f64 {
    site.terms()
        .iter()
        .map(|(v, rate)| rate.odds() * v.iter().map(|a| a * a).sum::<f64>() / v.len() as f64)
        .sum()
}

/// `value`, or [`Error::Overflow`] naming `what` when it is not finite:
/// a term's squares can overflow even where the clean input `x = h + Σ v`
/// does not (`h = MAX`, `v = −MAX`), and `p = 0` then makes the noise
/// `0 · ∞`.
fn finite(what: &str, value: f64) -> Result<f64, Error> {
    if value.is_finite() {
        Ok(value)
    } else {
        Err(Error::Overflow { what: what.into() })
    }
}

/// `E[V_y] = σ² + (1 − 1/d) Σ_j (p_j/q_j) w_j` (exact).
pub fn mean_of_v(site: &impl DropoutSite) -> Result<f64, Error> {
    let (_, s2) = input_moments(&site.clean())?;
    finite(
        "E[V] of the site",
        s2 + (1.0 - 1.0 / site.dim() as f64) * added_noise(site),
    )
}

/// `ρ² = v̄²/σ²` of a one-term site.
pub fn rho2(site: &impl DropoutSite) -> Result<f64, Error> {
    let (_, s2) = input_moments(&site.clean())?;
    let [(v, _)] = site.terms() else {
        return Err(Error::Degenerate {
            what: "ρ² is defined for one dropped term".into(),
        });
    };
    finite(
        "ρ² of the site",
        v.iter().map(|a| a * a).sum::<f64>() / v.len() as f64 / s2,
    )
}

/// `c = sqrt((σ² + ε)/(σ² + Σ_j (p_j/q_j) w_j + ε))`; for one term at
/// `ε = 0` this is `sqrt(q/(q + p ρ²))`.
pub fn damped(site: &impl DropoutSite, eps: f64) -> Result<f64, Error> {
    let (_, s2) = input_moments(&site.clean())?;
    check_eps("eps", eps)?;
    let noise = finite("the site's dropout noise", added_noise(site))?;
    Ok(((s2 + eps) / (s2 + noise + eps)).sqrt())
}

/// `c_damped = sqrt(q/(q + p ρ²))`, from `ρ²` and `p` alone.
pub fn damped_from_rho2(rho2: f64, rate: super::Rate) -> f64 {
    (rate.q() / (rate.q() + rate.p() * rho2)).sqrt()
}

/// `LN(x)` of the clean input.
pub fn uncorrected(
    site: &impl DropoutSite,
    ln: &impl ShiftedNormParams,
) -> Result<Vec<f64>, Error> {
    super::layernorm::uncorrected(&site.clean(), ln)
}

/// `β + c (LN(x) − β)`, the leading-order estimate of `E[LN(y)]`.
pub fn corrected(site: &impl DropoutSite, ln: &impl ShiftedNormParams) -> Result<Vec<f64>, Error> {
    let c = damped(site, ln.eps())?;
    Ok(shrink_towards_beta(&uncorrected(site, ln)?, ln.beta(), c))
}
