//! Attention dropout after the softmax: one row of attention probabilities.
//!
//! # Setting
//!
//! A row `a` of attention probabilities (`a_i ≥ 0`, `Σ a_i = 1`), values
//! `v_i` (one number per position; a vector value works per coordinate),
//! independent masks `m_i ~ Bernoulli(q)` and the dropped row
//! `b_i = m_i a_i / q`. The row sum is `R = Σ_i b_i` and the output
//! `o = Σ_i b_i v_i`.
//!
//! # Derivation (exact)
//!
//! Each `b_i` is one inverted-dropout unit with value `a_i`
//! ([`super::dropout`]), and the masks are independent, so
//!
//! ```text
//! E[b_i] = q · a_i/q + p · 0         = a_i
//! E[R]   = Σ_i E[b_i]                = Σ_i a_i = 1
//! Var R  = Σ_i Var b_i               = (p/q) Σ_i a_i²
//! E[o]   = Σ_i E[b_i] v_i            = Σ_i a_i v_i
//! Var o  = Σ_i v_i² Var b_i          = (p/q) Σ_i a_i² v_i²
//! ```
//!
//! The row no longer sums to one: dropout after the softmax keeps the row
//! right only on average.
//!
//! # The seed's case: a = (0.2, 0.3, 0.5), p = 0.5
//!
//! `q = 1/2`, so each of the 8 masks has probability `1/8` and a kept entry
//! doubles. The row sums, mask by mask (kept entries listed):
//!
//! ```text
//! {}: 0    {0.2}: 0.4   {0.3}: 0.6   {0.5}: 1   {0.2,0.3}: 1
//! {0.2,0.5}: 1.4   {0.3,0.5}: 1.6   {0.2,0.3,0.5}: 2
//! P(R = 1) = 2/8 = 1/4,  E[R] = 8/8 = 1
//! Var R = (0.5/0.5)(0.04 + 0.09 + 0.25) = 0.38
//! ```
//!
//! # Wrong variants
//!
//! Renormalising the survivors (`b_i = m_i a_i / Σ_j m_j a_j`) makes every
//! row sum to one but biases `E[b_i]` towards small entries; dropping the
//! logits before the softmax changes the distribution itself. Both fail
//! `E[b_i] = a_i`.

use super::Rate;

/// `E[b_i] = a_i`.
pub fn entry_mean(a: &[f64]) -> Vec<f64> {
    a.to_vec()
}

/// `E[R] = Σ a_i`.
pub fn row_sum_mean(a: &[f64]) -> f64 {
    a.iter().sum()
}

/// `Var R = (p/q) Σ a_i²`.
pub fn row_sum_variance(a: &[f64], rate: Rate) -> f64 {
    rate.odds() * a.iter().map(|v| v * v).sum::<f64>()
}

/// `E[o] = Σ a_i v_i`.
pub fn output_mean(a: &[f64], v: &[f64]) -> f64 {
    a.iter().zip(v).map(|(a, v)| a * v).sum()
}

/// `Var o = (p/q) Σ a_i² v_i²`.
pub fn output_variance(a: &[f64], v: &[f64], rate: Rate) -> f64 {
    rate.odds() * a.iter().zip(v).map(|(a, v)| a * a * v * v).sum::<f64>()
}

/// The seed case's row-sum support, in increasing order.
pub const SEED_ROW_SUMS: [f64; 7] = [0.0, 0.4, 0.6, 1.0, 1.4, 1.6, 2.0];

/// The seed case's row-sum distribution: masks per support value over 8.
pub fn seed_row_sum_pmf() -> Vec<f64> {
    [1.0, 1.0, 1.0, 2.0, 1.0, 1.0, 1.0]
        .iter()
        .map(|c| c / 8.0)
        .collect()
}
