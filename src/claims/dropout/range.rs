//! The interval each claim's per-draw statistic lies in under the null, from
//! `x` and `q` alone ([`crate::claims::Claim::null_range`]): what lets the
//! distribution-free bound ([`crate::stats::bernstein_test`]) decide a claim
//! below its minimum budget.
//!
//! A correct inverted dropout outputs `z_k = m_k x_k / q` with
//! `m_k ∈ {0, 1}`, so step by step:
//!
//! 1. `z_k ∈ {0, x_k/q}`: an interval of width `|x_k|/q`, and its power
//!    `z_k^r ∈ {0, (x_k/q)^r}`, of width `|x_k/q|^r` ([`unit_power`]).
//! 2. The pair form of two independent passes, `(z_k − z'_k)²/2`, is 0 when
//!    both agree and `(x_k/q)²/2` when one keeps the unit: width
//!    `(x_k/q)²/2` ([`unit_pair_form`]).
//! 3. The original scheme's `m_k x_k ∈ {0, x_k}`: width `|x_k|`
//!    ([`original_units`]).
//! 4. The row sum `S = Σ_k m_k x_k / q` is smallest when only the negative
//!    units are kept and largest when only the positive ones are:
//!    `S ∈ [Σ_k min(0, x_k)/q, Σ_k max(0, x_k)/q]`, of width
//!    `W_S = Σ_k |x_k| / q` ([`sum_mean`]).
//! 5. Two sums in that interval differ by at most `W_S`, so their pair form
//!    `(S − S')²/2 ∈ [0, W_S²/2]` ([`sum_pair_form`]).
//! 6. The kept count's indicators lie in `[0, 1]` ([`indicators`]; its
//!    test is exact, so the width is never read).
//!
//! The attention and mask-shape families reuse steps 1, 4 and 5 on their
//! own terms (`a_i`, `a_i v_i`, a column of the block): each of their
//! statistics is an entry, an inverted-dropout sum or its pair form
//! (`crate::claims::attention`, `crate::claims::mask_shape`).
//!
//! A correct layer in a narrow dtype rounds `x_k/q`; the bound widens every
//! stated width by [`crate::stats::NULL_RANGE_SLACK`] for it.

use crate::ops::Rate;

/// Step 1: `|x_k/q|^r` per unit.
pub(crate) fn unit_power(x: &[f64], rate: Rate, r: i32) -> Vec<f64> {
    x.iter().map(|a| (a / rate.q()).abs().powi(r)).collect()
}

/// Step 2: `(x_k/q)²/2` per unit.
pub(super) fn unit_pair_form(x: &[f64], rate: Rate) -> Vec<f64> {
    unit_power(x, rate, 2)
        .into_iter()
        .map(|w| w / 2.0)
        .collect()
}

/// Step 3: `|x_k|` per unit.
pub(super) fn original_units(x: &[f64], _rate: Rate) -> Vec<f64> {
    x.iter().map(|a| a.abs()).collect()
}

/// Step 4: `W_S = Σ_k |x_k| / q`.
fn sum_width(x: &[f64], rate: Rate) -> f64 {
    x.iter().map(|a| a.abs()).sum::<f64>() / rate.q()
}

/// Step 4: the sum's width, one component (also the width of the Python
/// binding's one-row sums, `calls.one_row_sum_mean`).
pub fn sum_mean(x: &[f64], rate: Rate) -> Vec<f64> {
    vec![sum_width(x, rate)]
}

/// Step 5: `W_S²/2`, one component.
pub(crate) fn sum_pair_form(x: &[f64], rate: Rate) -> Vec<f64> {
    let w = sum_width(x, rate);
    vec![w * w / 2.0]
}

/// Step 6: width 1 for each of the `d + 1` count indicators.
pub(crate) fn indicators(x: &[f64], _rate: Rate) -> Vec<f64> {
    vec![1.0; x.len() + 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every value a correct layer can output lies in the stated width's
    /// interval: the extreme masks of a small row reach the ends exactly.
    #[test]
    fn the_extreme_masks_reach_the_stated_widths() {
        let x = [0.5, -1.2, 3.0, 0.0, 2.0];
        let rate = Rate::new(0.3).unwrap();
        let q = rate.q();
        // Hand-derived: only positives kept gives 5.5/q, only negatives −1.2/q.
        let w = sum_mean(&x, rate)[0];
        assert!((w - (5.5 + 1.2) / q).abs() < 1e-12);
        assert!((sum_pair_form(&x, rate)[0] - w * w / 2.0).abs() < 1e-9);
        assert_eq!(unit_power(&x, rate, 3)[2], (3.0 / q).powi(3));
        assert_eq!(unit_pair_form(&x, rate)[1], (1.2 / q) * (1.2 / q) / 2.0);
        assert_eq!(original_units(&x, rate)[1], 1.2);
        assert_eq!(indicators(&x, rate).len(), 6);
    }
}
