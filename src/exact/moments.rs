//! The exact central moments of a per-draw quantity, by enumeration: what a
//! claim's mean test declares as its skewness ([`crate::stats::CentralMoments`]
//! turns them into the skewness of the estimator the sampler computes).
//!
//! Two passes of the same enumeration, so no moment is formed by
//! subtracting large raw moments:
//!
//! 1. the means `μ_k = E q_k` of the quantity's components;
//! 2. the central powers `E (q_k − μ_k)^r`, `r = 2 … 6`, about them.

use super::enumerate::gap_per_mask;
use super::{Oracle, enumerate_masks};
use crate::error::Error;
use crate::ops::Rate;
use crate::stats::CentralMoments;

/// Highest central power the moments carry (`μ₂ … μ₆`).
const POWERS: usize = 5;

/// Per component, the central moments of `quantity(draw)` under the law an
/// `expectation` enumerates: `expectation(dim, f)` returns `E f` over every
/// draw of that law, `dim` components wide (as [`enumerate_masks`] and
/// [`super::site_expectation`] do).
pub fn central_moments_by<T: ?Sized>(
    dim: usize,
    mut quantity: impl FnMut(&T, &mut [f64]),
    mut expectation: impl FnMut(usize, &mut dyn FnMut(&T, &mut [f64])) -> Result<Oracle, Error>,
) -> Result<Vec<CentralMoments>, Error> {
    let means = expectation(dim, &mut |draw, out| quantity(draw, out))?.values;
    let mut value = vec![0.0; dim];
    let powers = expectation(POWERS * dim, &mut |draw, out| {
        quantity(draw, &mut value);
        for (k, (v, m)) in value.iter().zip(&means).enumerate() {
            let centred = v - m;
            let mut power = centred;
            for r in 0..POWERS {
                power *= centred;
                out[r * dim + k] = power;
            }
        }
    })?
    .values;
    Ok((0..dim)
        .map(|k| CentralMoments {
            m2: powers[k],
            m3: powers[dim + k],
            m4: powers[2 * dim + k],
            m5: powers[3 * dim + k],
            m6: powers[4 * dim + k],
        })
        .collect())
}

/// Per component, the central moments of `quantity(mask)` over every mask
/// of `d` units kept at `rate` ([`enumerate_masks`]).
pub fn mask_moments(
    d: usize,
    rate: Rate,
    dim: usize,
    quantity: impl FnMut(&[bool], &mut [f64]),
) -> Result<Vec<CentralMoments>, Error> {
    central_moments_by(dim, quantity, |dim, f| enumerate_masks(d, rate, dim, f))
}

/// The central moments of the per-draw gap `g(z) − g(x)` over every mask
/// of `x` (the law whose mean [`super::enumerated_gap`] gives).
pub fn gap_moments(
    x: &[f64],
    rate: Rate,
    g: impl Fn(&[f64]) -> f64,
) -> Result<CentralMoments, Error> {
    let per = mask_moments(x.len(), rate, 1, gap_per_mask(x, rate, g))?;
    Ok(per[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The closed form of a masked sum's moments
    /// ([`CentralMoments::of_masked_sum`]) against every mask of five
    /// unequal units, kept with probability 0.7.
    #[test]
    fn a_masked_sums_closed_form_moments_match_its_masks() {
        let rate = Rate::new(0.3).unwrap();
        let c = [1.5, -2.0, 0.25, 3.0, -0.5];
        let enumerated = mask_moments(c.len(), rate, 1, |m, out| {
            out[0] = c.iter().zip(m).filter(|(_, k)| **k).map(|(c, _)| c).sum();
        })
        .unwrap()[0];
        let closed = CentralMoments::of_masked_sum(&c, rate.q());
        let (closed, enumerated) = (closed.to_array(), enumerated.to_array());
        // Central sixth powers of |S − μ| ≤ 7.25 (Σ|c|) over 32 masks, and
        // the cumulant sums of as many terms: 10³ roundings of 7.25⁶ on
        // either side.
        let tol = 2.0 * crate::stats::tolerance::bound(1e3, 7.25f64.powi(6));
        for (c, e) in closed.iter().zip(enumerated) {
            assert!((c - e).abs() <= tol, "{closed:?} vs {enumerated:?}");
        }
    }

    /// One unit kept at `q = 0.7` carrying `x = 2`: `z = 2/0.7` or 0, a
    /// scaled Bernoulli whose central moments are `c^r E(B − q)^r` with
    /// `c = 2/0.7`, `E(B − q)^r = q p^r + p (−q)^r`.
    #[test]
    fn one_unit_gives_the_scaled_bernoulli_moments() {
        let rate = Rate::new(0.3).unwrap();
        let (p, q) = (rate.p(), rate.q());
        let c = 2.0 / q;
        let got = mask_moments(1, rate, 1, |m, out| out[0] = if m[0] { c } else { 0.0 }).unwrap();
        let central = |r: i32| c.powi(r) * (q * p.powi(r) + p * (-q).powi(r));
        let want = [central(2), central(3), central(4), central(5), central(6)];
        let have = got[0].to_array();
        for (h, w) in have.iter().zip(want) {
            // Two terms of at most c⁶ ≈ 540 each, a few roundings apiece.
            assert!(
                (h - w).abs() <= crate::stats::tolerance::bound(16.0, 540.0),
                "{have:?} {want:?}"
            );
        }
    }
}
