//! The ensemble view of dropout is approximate: evaluation computes `f(x)`,
//! the mask average is `E_m[f(z)]`, and they agree only for affine `f`.
//!
//! # Derivation
//!
//! ```text
//! affine f(z) = w·z + c:
//!     E_m[f(z)] = w·E_m[z] + c = w·x + c = f(x)          (exact, E[z] = x)
//! convex f:  Jensen's inequality with E_m[z] = x gives
//!     E_m[f(z)] ≥ f(E_m[z]) = f(x)
//! the gap   G = E_m[f(z)] − f(x) ≥ 0
//! ```
//!
//! `relu(w·z + c)` is convex in `z` (a convex function of an affine map), and
//! so is `log Σ_k exp(z_k)` (log-sum-exp). The gap is strictly positive when
//! the masks move `z` across a kink or a curved region; for the
//! configurations of the ensemble claims its value is the finite sum over
//! all `2^d` masks, which the exact oracles compute (`exact::enumerated_gap`).
//!
//! # Assumptions
//!
//! Independent masks, `0 ≤ p < 1`; `d ≤ 22` for the enumeration.

/// `w·z + c`.
pub fn affine(w: &[f64], c: f64, z: &[f64]) -> f64 {
    w.iter().zip(z).map(|(a, b)| a * b).sum::<f64>() + c
}

/// `max(0, w·z + c)`.
pub fn relu_affine(w: &[f64], c: f64, z: &[f64]) -> f64 {
    affine(w, c, z).max(0.0)
}

/// `log Σ_k exp(z_k)`, shifted by the maximum for stability.
pub fn log_sum_exp(z: &[f64]) -> f64 {
    let top = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    top + z.iter().map(|v| (v - top).exp()).sum::<f64>().ln()
}
