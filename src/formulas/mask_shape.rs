//! Mask shape: one mask per entry, or one mask per feature shared by every
//! position.
//!
//! # Setting
//!
//! A block `X ∈ R^{T×d}` (positions `t`, features `k`), dropped to
//! `z_tk = m_tk x_tk / q` (independent: every `m_tk` its own Bernoulli(q))
//! or `z_tk = m_k x_tk / q` (shared: one `m_k` per feature). The column sum
//! is `S_k = Σ_t z_tk`.
//!
//! # Derivation (exact)
//!
//! ```text
//! independent: S_k = Σ_t m_tk x_tk / q, a sum of T independent units
//!              Var S_k = Σ_t Var z_tk = (p/q) Σ_t x_tk²
//! shared:      S_k = (m_k / q) Σ_t x_tk, one unit with value Σ_t x_tk
//!              Var S_k = (p/q) (Σ_t x_tk)²
//! column k entirely dropped (every z_tk = 0, for x_tk ≠ 0):
//!              independent: all T masks are 0 → P = p^T
//!              shared:      the one mask is 0  → P = p
//! ```
//!
//! Both shapes have the same mean `E[S_k] = Σ_t x_tk`; only second-order
//! quantities tell them apart. When the column's entries share a sign,
//! `(Σ_t x_tk)² > Σ_t x_tk²` and the shared mask is noisier.
//!
//! # Telling the shape from outputs alone
//!
//! With every `x_tk ≠ 0`, a shared mask zeroes either all or none of a
//! column. An independent mask leaves a column "mixed" (some entries zero,
//! some not) with probability `1 − q^T − p^T` per column and draw. One mixed
//! column therefore proves independence; none in `n` draws of `d` columns
//! happens to an independent layer with probability `(q^T + p^T)^{n d}`.

use super::Rate;

/// `Var S_k` with independent masks, per column of the row-major `T × d`
/// block `x`.
pub fn independent_variance(x: &[f64], d: usize, rate: Rate) -> Vec<f64> {
    (0..d)
        .map(|k| rate.odds() * x.iter().skip(k).step_by(d).map(|v| v * v).sum::<f64>())
        .collect()
}

/// `Var S_k` with one mask per feature shared over positions.
pub fn shared_variance(x: &[f64], d: usize, rate: Rate) -> Vec<f64> {
    (0..d)
        .map(|k| {
            let s: f64 = x.iter().skip(k).step_by(d).sum();
            rate.odds() * s * s
        })
        .collect()
}

/// `P(column k all zero)`: `p^T` independent, `p` shared.
pub fn zero_column_probability(positions: usize, d: usize, shared: bool, rate: Rate) -> Vec<f64> {
    let p = if shared {
        rate.p()
    } else {
        super::ipow(rate.p(), positions as u32)
    };
    vec![p; d]
}

/// Probability that an independent mask shows no mixed column in `draws`
/// draws of a `T × d` block: `(q^T + p^T)^(draws · d)`.
pub fn independent_never_mixed(positions: usize, d: usize, draws: u64, rate: Rate) -> f64 {
    let t = positions as i32;
    (rate.q().powi(t) + rate.p().powi(t)).powf((draws * d as u64) as f64)
}
