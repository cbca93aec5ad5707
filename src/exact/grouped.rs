//! Grouped enumeration: exact expectations at any `d` when the units fall
//! into a few groups of identical units.
//!
//! # Why it is exact
//!
//! If the units split into `K` groups whose members are interchangeable (the
//! same input values in every role), a function of the masks that treats the
//! members of a group alike depends on the masks only through the kept counts
//! `c_g` of the groups. The counts are independent, `c_g ~ Binomial(n_g, q)`,
//! so
//!
//! ```text
//! E[f] = Σ_{c_1=0}^{n_1} … Σ_{c_K=0}^{n_K}  Π_g P(c_g) · f(c_1, …, c_K)
//! ```
//!
//! with `Π_g (n_g + 1)` terms instead of `2^d`. For a per-unit quantity
//! `φ_k` of a unit `k` in group `g`, condition on the counts: given `c`, the
//! kept set of group `g` is a uniformly random subset of size `c_g`, so unit
//! `k` is kept with probability `c_g / n_g`, and
//!
//! ```text
//! E[φ_k] = Σ_c P(c) · [ (c_g/n_g) φ(c, k kept) + (1 − c_g/n_g) φ(c, k dropped) ]
//! ```
//!
//! This is the same sum as conditioning on unit `k`'s own mask first and
//! enumerating the other `n_g − 1` units of its group, rearranged.
//!
//! # Rounding
//!
//! The binomial weights are built by the ratio recurrence
//! `P(k+1)/P(k) = (n−k)/(k+1) · q/p` outward from the mode (no overflow, no
//! log-gamma), then divided by their sum. Each weight takes at most
//! `4 |k − mode| + 2` roundings from the recurrence and `n + 2` from the
//! normalisation, so its relative error is below `η_g = (5 n_g + 4) ε`
//! (first order; weights that underflow are below `10^-300` and contribute
//! nothing measurable). With `N` terms and `K` multiplications per weight,
//! Higham's bound for recursive summation gives the oracle's bound
//! `((N + K) ε + Σ_g η_g) · Σ_c P(c) |f(c)|`, plus the mass of any
//! negligible counts skipped times a bound on `|f|` (see
//! [`enumerate_counts`]).

use crate::error::Error;
use crate::ops::Rate;
use crate::stats::tolerance;

use super::Oracle;

/// Largest number of terms `Π (n_g + 1)` the grouped enumeration accepts.
pub const MAX_GROUPED_TERMS: u64 = 50_000_000;

/// The `Binomial(n, q)` probabilities `P(0..=n)` and a bound on their
/// relative error.
pub fn binomial_weights(n: usize, rate: Rate) -> (Vec<f64>, f64) {
    let mut w = vec![0.0; n + 1];
    if rate.p() == 0.0 {
        w[n] = 1.0;
        return (w, 0.0);
    }
    let odds = rate.q() / rate.p();
    let mode = (((n + 1) as f64 * rate.q()).floor() as usize).min(n);
    w[mode] = 1.0;
    for k in mode..n {
        w[k + 1] = w[k] * ((n - k) as f64 / (k + 1) as f64) * odds;
    }
    for k in (0..mode).rev() {
        w[k] = w[k + 1] * ((k + 1) as f64 / (n - k) as f64) / odds;
    }
    let total: f64 = w.iter().sum();
    w.iter_mut().for_each(|v| *v /= total);
    (
        w,
        tolerance::gamma_upper(tolerance::binomial_weight_roundings(n)),
    )
}

/// Weights below this are skipped by [`enumerate_counts`] when the caller
/// gives a bound on `|f|`.
pub const NEGLIGIBLE_WEIGHT: f64 = 1e-30;

/// `E[f(c)]` over independent kept counts `c_g ~ Binomial(sizes[g], q)`,
/// `f` writing `dim` values.
///
/// `sup_f`, when finite, is a bound on `|f|` that the caller guarantees;
/// counts whose binomial weight is below `NEGLIGIBLE_WEIGHT` are then
/// skipped, and the skipped mass `T_g` of each group adds `Σ_g T_g · sup_f`
/// to the rounding bound (about `10^-25` at `d = 4096`). Skipping shrinks
/// the number of terms, and with it the rounding bound, about 15-fold at
/// `d = 4096`.
pub fn enumerate_counts<F>(
    sizes: &[usize],
    rate: Rate,
    dim: usize,
    sup_f: f64,
    mut f: F,
) -> Result<Oracle, Error>
where
    F: FnMut(&[usize], &mut [f64]),
{
    if sizes.is_empty() || sizes.contains(&0) {
        return Err(Error::Empty { what: "group" });
    }
    let terms = sizes
        .iter()
        .try_fold(1u64, |acc, &n| acc.checked_mul(n as u64 + 1))
        .unwrap_or(u64::MAX);
    if terms > MAX_GROUPED_TERMS {
        return Err(Error::TooLarge {
            what: "terms of the grouped enumeration",
            limit: MAX_GROUPED_TERMS as usize,
            got: terms.min(usize::MAX as u64) as usize,
        });
    }
    let tables: Vec<(Vec<f64>, f64)> = sizes.iter().map(|&n| binomial_weights(n, rate)).collect();
    let eta: f64 = tables.iter().map(|t| t.1).sum();
    let k = sizes.len();
    // The range [lo, hi] of counts kept per group, and the mass left out.
    let mut lo = vec![0usize; k];
    let mut hi = sizes.to_vec();
    let mut skipped = 0.0;
    if sup_f.is_finite() {
        for (g, (w, _)) in tables.iter().enumerate() {
            while w[lo[g]] < NEGLIGIBLE_WEIGHT && lo[g] < hi[g] {
                skipped += w[lo[g]];
                lo[g] += 1;
            }
            while w[hi[g]] < NEGLIGIBLE_WEIGHT && hi[g] > lo[g] {
                skipped += w[hi[g]];
                hi[g] -= 1;
            }
        }
    }
    let terms: u64 = lo
        .iter()
        .zip(&hi)
        .map(|(l, h)| (h - l + 1) as u64)
        .product();
    let mut counts = lo.clone();
    let mut out = vec![0.0; dim];
    let mut values = vec![0.0; dim];
    let mut magnitude = vec![0.0; dim];
    loop {
        let weight: f64 = counts.iter().zip(&tables).map(|(&c, t)| t.0[c]).product();
        if weight > 0.0 {
            f(&counts, &mut out);
            for ((v, a), o) in values.iter_mut().zip(&mut magnitude).zip(&out) {
                *v += weight * o;
                *a += weight * o.abs();
            }
        }
        // Odometer over the counts.
        let mut g = 0;
        loop {
            if g == k {
                let factor = tolerance::gamma_upper(tolerance::enumeration_roundings(
                    terms as f64,
                    k as f64,
                )) + eta;
                let truncation = if sup_f.is_finite() {
                    skipped * sup_f
                } else {
                    0.0
                };
                let rounding = magnitude.iter().map(|a| factor * a + truncation).collect();
                return Ok(Oracle { values, rounding });
            }
            counts[g] += 1;
            if counts[g] <= hi[g] {
                break;
            }
            counts[g] = lo[g];
            g += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binomial_weights_match_hand_values() {
        // Binomial(4, 0.7): P(4) = 0.2401, P(2) = 6 · 0.49 · 0.09 = 0.2646.
        let (w, eta) = binomial_weights(4, Rate::new(0.3).unwrap());
        assert!((w[4] - 0.2401).abs() <= 4.0 * eta);
        assert!((w[2] - 0.2646).abs() <= 4.0 * eta);
        // Large n: the mean n q is recovered.
        let (w, _) = binomial_weights(4096, Rate::new(0.3).unwrap());
        let mean: f64 = w.iter().enumerate().map(|(k, p)| k as f64 * p).sum();
        assert!((mean - 4096.0 * 0.7).abs() < 1e-8);
    }
}
