//! Dropout semantics: what a layer must do, rule by rule, beyond its moments.
//!
//! # Statements
//!
//! ```text
//! eval:      z = x bit for bit, and the generator is called 0 times
//! keep rule: K = #kept of n units ~ Binomial(n, q), so K/n → q
//! survivors: kept z_k = fl(x_k / q) (one division) or fl(x_k · fl(1/q))
//!            (the reciprocal rule of candle, burn and most frameworks),
//!            which is within one ulp of x_k / q; dropped z_k = 0; the
//!            returned mask says which is which
//! backward:  ∂L/∂x_k = g_k · m_k / q with the forward pass's mask m
//! p = 0:     q = 1, every unit kept, z = x and ∂L/∂x = g bit for bit
//! p = 1:     rejected with Error::InvalidRate (the rule dropmc specifies)
//! p < 0, p > 1, NaN, ±∞: rejected with Error::InvalidRate
//! ```
//!
//! # Derivation: the backward pass
//!
//! ```text
//! fix the mask m:     z_k(x) = m_k x_k / q            (linear in x)
//! Jacobian:           ∂z_j/∂x_k = δ_jk m_k / q
//! chain rule:         ∂L/∂x_k = Σ_j g_j ∂z_j/∂x_k = g_k m_k / q
//! central difference: (z_j(x + h e_k) − z_j(x − h e_k)) / 2h = δ_jk m_k / q
//!                     for every h > 0, because z is linear in x
//! ```
//!
//! So a finite difference of the masked function (the forward pass replayed
//! with the same random numbers) must agree with the backward pass up to
//! floating-point rounding. With `h = 1` the rounding is bounded by
//!
//! ```text
//! |FD_k − backward_k| ≤ 4 ε |g_k| (|x_k| + h) / (q h) + 2 ε |g_k| / q
//! ```
//!
//! (`x_k ± h` and the two divisions by `q` round once each, relative ε/2,
//! on values at most `(|x_k| + h)/q`; the difference and the halving add
//! nothing larger; the backward pass's own product and division round at
//! most twice on `|g_k|/q`; the constants double the sum for safety).
//!
//! # Derivation: the keep fraction
//!
//! Each unit is kept independently with probability `q`, so the number kept
//! among `n` units is `Binomial(n, q)`: mean `n q`, variance `n p q`. The
//! binomial test of the claim is the z-test of `K/n` against `q` with the
//! standard error `sqrt(p q / n)` estimated from the draws.
//!
//! # Why `p = 1` is an error
//!
//! The inverted scale `1/q` does not exist at `q = 0`. Returning zeros
//! would be a defensible rule too, but it hides the configuration mistake
//! that `p = 1` almost always is; dropmc specifies rejection, so a layer
//! under test must return [`crate::Error::InvalidRate`] for it.
//!
//! # Assumptions
//!
//! The layer draws every random number from the generator it is given (the
//! finite-difference check replays that generator).

use super::Rate;

/// Bound on `|FD_k − backward_k|` from rounding alone (see the module doc).
pub fn finite_difference_bound(x: f64, g: f64, h: f64, rate: Rate) -> f64 {
    let eps = f64::EPSILON;
    4.0 * eps * g.abs() * (x.abs() + h) / (rate.q() * h) + 2.0 * eps * g.abs() / rate.q()
}

/// Bound on `|backward_k − g_k/q|` for a layer that scales in a different
/// order (`g · (1/q)`, `(g · m) / q`): at most two roundings of relative
/// `ε/2` each on `|g_k|/q`.
pub fn backward_bound(g: f64, rate: Rate) -> f64 {
    f64::EPSILON * g.abs() / rate.q()
}

/// [`backward_bound`] for a layer computing in a float format of machine
/// epsilon `epsilon` whose smallest subnormal is `smallest_subnormal`:
/// float64's own bound for float64's epsilon; for a narrower format
/// (float32, float16, bfloat16, where the scale may be any of the rounded
/// `fl(1/q)`, `fl(1/fl(q))`), the longest of those roundings,
/// `fl(g · fl(1/fl(q)))`, step by step, with `u = epsilon/2`:
///
/// 1. `fl(q) = q(1 + δ₀)` and `fl(1/fl(q)) = (1/q)(1 + δ₀')(1 + δ₁)` with
///    `1/(1 + δ₀) = 1 + δ₀'`, `|δ₀'| ≤ u/(1 − u)`; to first order, three
///    factors `(1 + δ)` with `|δ| ≤ u` (the `u/(1−u)` excess is `u²`, inside
///    the bound's `3u²` term below);
/// 2. the product rounds once more: `fl(y) = y(1 + δ₂) + η`, where `η`,
///    `|η| ≤ s/2` with `s` the smallest subnormal, is the absolute error of
///    a result below the normal range (then `δ₂ = 0`);
/// 3. so `|fl(g S) − g/q| ≤ (|g|/q)((1 + u)³ − 1) + s/2`, with
///    `(1 + u)³ − 1 = 3u + 3u² + u³` (the `u²` terms matter in bfloat16,
///    `u = 2⁻⁸`).
pub fn backward_bound_in(g: f64, rate: Rate, epsilon: f64, smallest_subnormal: f64) -> f64 {
    if epsilon == f64::EPSILON {
        return backward_bound(g, rate);
    }
    let u = epsilon / 2.0;
    g.abs() / rate.q() * ((1.0 + u).powi(3) - 1.0) + smallest_subnormal / 2.0
}

/// The two accepted roundings of a kept unit, `fl(x/q)` and
/// `fl(x · fl(1/q))`.
///
/// # Why within one ulp
///
/// `fl(1/q) = (1/q)(1 + δ₁)` and the product `x · fl(1/q)` rounds once more,
/// so `x · fl(1/q) = (x/q)(1 + δ₁)(1 + δ₂)`, `|δ_i| ≤ u = ε/2`: relative
/// error at most `2u + u²` against the exact `x/q`, while `fl(x/q)` has at
/// most `u`. Two values that are both within `2u` relative of `x/q` differ
/// by at most `3u + O(u²)` relative, under two units in the last place;
/// [`ulp_distance`] of the two is 0 or 1 on every input this crate tries
/// (checked by the claim itself), and a layer whose kept outputs are
/// either of them passes.
pub fn kept_roundings(x: f64, rate: Rate) -> (f64, f64) {
    (x / rate.q(), x * (1.0 / rate.q()))
}

/// Distance in units in the last place between two finite doubles of the
/// same sign (the difference of their bit patterns; `u64::MAX` otherwise).
pub fn ulp_distance(a: f64, b: f64) -> u64 {
    if a == b {
        return 0;
    }
    if !(a.is_finite() && b.is_finite()) || a.is_sign_negative() != b.is_sign_negative() {
        return u64::MAX;
    }
    a.to_bits().abs_diff(b.to_bits())
}

/// The invalid drop rates every operation must reject.
pub const INVALID_RATES: [f64; 6] = [1.0, -0.1, 1.5, f64::NAN, f64::INFINITY, f64::NEG_INFINITY];
