//! The in-crate example family (compiled with the `example-family` cargo
//! feature only): a closed form added the way `docs/architecture.md`
//! "Adding a formula" says, so that CI runs every per-claim test on a
//! family added in those places and no other.
//!
//! # Setting
//!
//! Inverted dropout `z_i = m_i x_i / q` at rate `p`, `q = 1 − p`, with
//! independent keep bits `m_i ~ Bernoulli(q)` (one per unit, not shared).
//!
//! # Derivation
//!
//! For two distinct units `i ≠ j` the bits `m_i`, `m_j` are independent,
//! so
//!
//! ```text
//! E[z_i z_j] = E[m_i] E[m_j] x_i x_j / q² = q · q · x_i x_j / q² = x_i x_j.
//! ```
//!
//! Inverted dropout leaves the product of two distinct units unbiased (so
//! their covariance is 0); only the diagonal `E[z_i²] = x_i² / q` is
//! inflated (`formulas::dropout`).
//!
//! # Assumptions and order of error
//!
//! Independent masks per unit; exact for every `d` and every `p < 1`.

/// `E[z_i z_{i+1}] = x_i x_{i+1}` for each pair of adjacent units.
pub fn adjacent_products(x: &[f64]) -> Vec<f64> {
    x.windows(2).map(|w| w[0] * w[1]).collect()
}
