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
use crate::stats::tolerance;

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

/// `Var t = E[t²] − E[t]²` from raw moments `m1 = E[t]`, `m2 = E[t²]` with
/// rounding bounds `r1`, `r2`, and the bound on the result.
///
/// # Derivation of the bound
///
/// A computed `m̂1 = m1 + δ`, `|δ| ≤ r1`, gives `|m̂1² − m1²| ≤ (2|m1| + r1) r1`;
/// the square and the subtraction round once each, on values at most `|m2|`
/// (`m1² ≤ m2`), charged as [`tolerance::VARIANCE_FROM_MOMENTS_ROUNDINGS`]
/// with [`tolerance::gamma_upper`]; `m2`'s own bound adds `r2`.
pub fn variance_from_moments(m1: f64, r1: f64, m2: f64, r2: f64) -> (f64, f64) {
    let rounding = r2
        + (2.0 * m1.abs() + r1) * r1
        + tolerance::gamma_upper(tolerance::VARIANCE_FROM_MOMENTS_ROUNDINGS) * m2.abs();
    (m2 - m1 * m1, rounding)
}

impl Oracle {
    /// The variances of `n` statistics from an oracle of their raw moments
    /// laid out `E[t_0], …, E[t_{n−1}], E[t_0²], …, E[t_{n−1}²]` (see
    /// [`variance_from_moments`]).
    pub fn variances(&self) -> Oracle {
        let n = self.values.len() / 2;
        let (values, rounding) = (0..n)
            .map(|k| {
                let (m1, r1) = (self.values[k], self.rounding[k]);
                variance_from_moments(m1, r1, self.values[n + k], self.rounding[n + k])
            })
            .unzip();
        Oracle { values, rounding }
    }

    /// Keeps `E[t]` of an oracle of `(E[t], E[t²])`, or turns it into
    /// `Var t` when `variance`.
    pub fn mean_or_variance(self, variance: bool) -> Oracle {
        if variance {
            self.variances()
        } else {
            Oracle {
                values: vec![self.values[0]],
                rounding: vec![self.rounding[0]],
            }
        }
    }
}

/// `E[S]` of the sum `S = Σ_k z_k` of dropped-out `x` (or `Var S` when
/// `variance`) by enumerating all masks of `x`.
pub fn sum_oracle(x: &[f64], rate: Rate, variance: bool) -> Result<Oracle, Error> {
    let scale = 1.0 / rate.q();
    let raw = enumerate_masks(x.len(), rate, 2, |mask, out| {
        let s: f64 = x
            .iter()
            .zip(mask)
            .filter(|(_, m)| **m)
            .map(|(v, _)| v * scale)
            .sum();
        out[0] = s;
        out[1] = s * s;
    })?;
    Ok(raw.mean_or_variance(variance))
}

/// `E[f(m)]` over all `2^d` masks, `f` writing `dim` values per mask.
pub fn enumerate_masks<F>(d: usize, rate: Rate, dim: usize, f: F) -> Result<Oracle, Error>
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
    Ok(enumerate_mask_bits(&vec![rate; d], dim, f))
}

/// `E[f(m)]` over every word `m` of `rates.len()` mask bits, bit `b` kept
/// with probability `rates[b].q()` (weight `Π_b q_b^{m_b} p_b^{1 − m_b}`):
/// the sum behind [`enumerate_masks`] and [`super::site_expectation`]. The
/// caller has checked the number of bits against [`MAX_ENUMERATION_D`].
///
/// The rounding bound is Higham's for recursive summation,
/// `(N + bits) ε Σ w |f|`: `N = 2^bits` terms, `bits` multiplications per
/// weight.
pub(super) fn enumerate_mask_bits<F>(rates: &[Rate], dim: usize, mut f: F) -> Oracle
where
    F: FnMut(&[bool], &mut [f64]),
{
    let bits = rates.len();
    let terms = 1u64 << bits;
    let mut mask = vec![false; bits];
    let mut out = vec![0.0; dim];
    let mut values = vec![0.0; dim];
    let mut magnitude = vec![0.0; dim];
    for word in 0..terms {
        let mut weight = 1.0;
        for (b, (m, rate)) in mask.iter_mut().zip(rates).enumerate() {
            *m = (word >> b) & 1 == 1;
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
    let factor =
        tolerance::gamma_upper(tolerance::enumeration_roundings(terms as f64, bits as f64));
    let rounding = magnitude.iter().map(|a| factor * a).collect();
    Oracle { values, rounding }
}

/// `E[f(z)]` for one unit with value `a`, by its two outcomes:
/// `q f(a/q) + p f(0)`.
pub fn unit_expectation(a: f64, rate: Rate, f: impl Fn(f64) -> f64) -> f64 {
    rate.q() * f(a / rate.q()) + rate.p() * f(0.0)
}

/// The ensemble gap `E_m[g(z)] − g(x)` (see [`crate::formulas::ensemble`])
/// by enumerating every mask of `x`, with its rounding bound. A negative
/// gap beyond rounding would contradict Jensen for a convex `g`; the
/// caller decides whether that is an error.
pub fn enumerated_gap(
    x: &[f64],
    rate: Rate,
    g: impl Fn(&[f64]) -> f64,
) -> Result<(f64, f64), Error> {
    let o = enumerate_masks(x.len(), rate, 1, gap_per_mask(x, rate, g))?;
    Ok((o.values[0], o.rounding[0]))
}

/// The per-mask quantity of the ensemble gap: `out[0] = g(z) − g(x)` for
/// the mask's dropped-out `z` (one scratch row, reused over the masks);
/// shared by [`enumerated_gap`] and [`super::gap_moments`].
pub(super) fn gap_per_mask(
    x: &[f64],
    rate: Rate,
    g: impl Fn(&[f64]) -> f64,
) -> impl FnMut(&[bool], &mut [f64]) {
    let gx = g(x);
    let mut z = vec![0.0; x.len()];
    move |mask, out| {
        dropped_out(mask, x, rate, &mut z);
        out[0] = g(&z) - gx;
    }
}

/// The inverted-dropout output of one mask: `z_k = m_k x_k / q`.
pub(super) fn dropped_out(mask: &[bool], x: &[f64], rate: Rate, z: &mut [f64]) {
    for ((zk, &m), &a) in z.iter_mut().zip(mask).zip(x) {
        *zk = if m { a / rate.q() } else { 0.0 };
    }
}
