//! When a masked sum is too rounded to trust: the floor on a mask's
//! `V + ε` below which the fast site and compound kernels count the mask as
//! ill-conditioned, and the a-priori bound `κ` on the rounding of its `V`.
//! The derivation is in [`super::site`] ("Why the shift").

use crate::stats::tolerance;

/// Relative rounding allowed in `V + ε` and in a channel's term: `2^-26`.
pub(crate) const RESOLUTION: f64 = 1.0 / (1u64 << 26) as f64;

/// The floor on `V + ε` below which a mask of the site `h + Σ_j m_j ⊙ w_j`
/// (`w_j = v_j/q_j`), shifted by `c`, is ill-conditioned, and `κ`, the bound
/// on the rounding of its `V` (see the module docs); an infinite floor when
/// the sums would overflow.
pub(crate) fn site_floor(h: &[f64], scaled: &[&[f64]], c: f64) -> (f64, f64) {
    let d = h.len();
    let centred: Vec<f64> = h.iter().map(|h| h - c).collect();
    let mut a1: Vec<f64> = centred.iter().map(|h| h.abs()).collect();
    let mut a2: Vec<f64> = centred.iter().map(|h| h * h).collect();
    for w in scaled {
        for k in 0..d {
            a1[k] += w[k].abs();
            a2[k] += (2.0 * centred[k] * w[k]).abs() + w[k] * w[k];
        }
    }
    for (i, wi) in scaled.iter().enumerate() {
        for wj in &scaled[i + 1..] {
            for k in 0..d {
                a2[k] += (2.0 * wi[k] * wj[k]).abs();
            }
        }
    }
    let (df, j) = (d as f64, scaled.len() as f64);
    let u = tolerance::UNIT_ROUNDOFF;
    let n_terms = df * (1.0 + j + j * (j - 1.0) / 2.0);
    let (sum_a1, sum_a2): (f64, f64) = (a1.iter().sum(), a2.iter().sum());
    let kappa = (n_terms + 8.0) * u * (sum_a2 + 2.0 * sum_a1 * sum_a1 / df) / df;
    let b = a1.iter().fold(0.0f64, |m, &a| m.max(a)) + sum_a1 / df;
    let channel = 80.0 * u * b / RESOLUTION;
    let floor = (kappa / RESOLUTION).max(channel * channel);
    if sum_a2 <= 1e300 && floor.is_finite() {
        (floor, kappa)
    } else {
        (f64::INFINITY, kappa)
    }
}

/// Whether a mask's `V + ε` (or `R² + ε`, `V2 + ε2`) is below its floor, or
/// not a number.
#[inline(always)]
pub(crate) fn ill_conditioned(value: f64, floor: f64) -> bool {
    value.is_nan() || value < floor
}
