//! Full enumeration of all 2^d masks.
//!
//! ```text
//! E[f(m)] = Σ_{m ∈ {0,1}^d} q^{|m|} p^{d − |m|} f(m)
//! ```
//!
//! Each expectation comes with a bound on its own floating-point rounding
//! (Higham's bound for recursive summation, `(N + d) ε Σ w |f|` with `N` the
//! number of terms and `d` multiplications per weight), so a comparison with a
//! closed form uses a derived tolerance, not a chosen one.

use crate::error::Error;
use crate::ops::Rate;
use crate::tolerance;

/// Roundings a registered closed form may make, relative to its value.
///
/// # Derivation (and its assumption)
///
/// The registry's closed forms are products and quotients of at most a few
/// powers (`x^r / q^(r−1)`, `p/q`, `q^k p^(d−k)`: at most `d + 4 ≤ 24`
/// factors for `d ≤ 20`), or sums of at most `d ≤ 20` such terms of one
/// sign (`(p/q) Σ x_k²`, `Σ a_i² v_i²`), or one subtraction of two such
/// sums at most a factor 2 apart (`E[V]`, `Var M`). Recursive summation of
/// `N` terms of one sign adds `γ_{N−1}` on the sum (Higham 4.4), products add
/// `γ_n` (Lemma 3.1), and a subtraction of quantities at most twice the
/// result triples the relative bound: `3 (24 + 20) = 132` roundings,
/// `γ_132 ≈ 66 ε` (the check used a bare `64 ε` before; now it is counted). A closed form outside this shape states its own bound
/// through its oracle's `rounding`.
pub const CLOSED_FORM_ROUNDINGS: f64 = 132.0;

/// Largest `d` the full enumeration accepts (2^22 ≈ 4·10^6 masks).
pub const MAX_ENUMERATION_D: usize = 22;

/// Exact expectations with their rounding bounds.
#[derive(Debug, Clone, PartialEq)]
pub struct Oracle {
    pub values: Vec<f64>,
    /// Bound on `|values − true value|` from floating-point rounding alone.
    pub rounding: Vec<f64>,
}

impl Oracle {
    /// True when `closed_form` agrees with every value within the rounding of
    /// both computations: the oracle's own bound plus the closed form's,
    /// [`tolerance::bound`]`(`[`CLOSED_FORM_ROUNDINGS`]`, max(|c|, |v|))`.
    pub fn agrees_with(&self, closed_form: &[f64]) -> bool {
        closed_form.len() == self.values.len()
            && self
                .values
                .iter()
                .zip(&self.rounding)
                .zip(closed_form)
                .all(|((v, r), c)| {
                    (v - c).abs()
                        <= r + tolerance::bound(CLOSED_FORM_ROUNDINGS, c.abs().max(v.abs()))
                })
    }
}

/// `E[f(m)]` over all `2^d` masks, `f` writing `dim` values per mask.
pub fn enumerate_masks<F>(d: usize, rate: Rate, dim: usize, mut f: F) -> Result<Oracle, Error>
where
    F: FnMut(&[bool], &mut [f64]),
{
    if d == 0 {
        return Err(Error::Empty { what: "x" });
    }
    if d > MAX_ENUMERATION_D {
        return Err(Error::TooLarge {
            what: "d for full enumeration",
            limit: MAX_ENUMERATION_D,
            got: d,
        });
    }
    let terms = 1u64 << d;
    let mut mask = vec![false; d];
    let mut out = vec![0.0; dim];
    let mut values = vec![0.0; dim];
    let mut magnitude = vec![0.0; dim];
    for bits in 0..terms {
        let mut weight = 1.0;
        for (k, m) in mask.iter_mut().enumerate() {
            *m = (bits >> k) & 1 == 1;
            weight *= if *m { rate.q() } else { rate.p() };
        }
        if weight == 0.0 {
            continue;
        }
        f(&mask, &mut out);
        for ((v, a), o) in values.iter_mut().zip(&mut magnitude).zip(&out) {
            *v += weight * o;
            *a += weight * o.abs();
        }
    }
    let factor = (terms as f64 + d as f64) * f64::EPSILON;
    let rounding = magnitude.iter().map(|a| factor * a).collect();
    Ok(Oracle { values, rounding })
}

/// `E[f(z)]` for one unit with value `a`, by its two outcomes:
/// `q f(a/q) + p f(0)`.
pub fn unit_expectation(a: f64, rate: Rate, f: impl Fn(f64) -> f64) -> f64 {
    rate.q() * f(a / rate.q()) + rate.p() * f(0.0)
}
