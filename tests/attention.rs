//! The seed's attention case by hand, and the attention and mask-shape closed
//! forms against an enumeration written here, independently of the crate's.

use dropmc::formulas::{attention, mask_shape};
use dropmc::ops::Rate;
use proptest::prelude::*;

/// Whether two row sums are the same value up to rounding: each is at most
/// `d ≤ 8` divisions and additions on terms whose absolute values sum to at
/// most `Σ a_i / q ≤ 1/q ≤ 20` (`p ≤ 0.95`), so within `γ_16 · 20` of its
/// exact value. Distinct row sums of the cases here differ by at least 0.01,
/// far beyond that, so the grouping is unambiguous.
fn same_row_sum(a: f64, b: f64) -> bool {
    (a - b).abs() <= 2.0 * dropmc::stats::tolerance::bound(16.0, 20.0)
}

/// `(E[R], Var R)` and the row-sum distribution over all masks of `a`.
fn enumerate_row(a: &[f64], p: f64) -> (f64, f64, Vec<(f64, f64)>) {
    let q = 1.0 - p;
    let d = a.len();
    let (mut m1, mut m2) = (0.0, 0.0);
    let mut pmf: Vec<(f64, f64)> = Vec::new();
    for bits in 0..(1u32 << d) {
        let mut w = 1.0;
        let mut r = 0.0;
        for (i, ai) in a.iter().enumerate() {
            if bits >> i & 1 == 1 {
                w *= q;
                r += ai / q;
            } else {
                w *= p;
            }
        }
        m1 += w * r;
        m2 += w * r * r;
        match pmf.iter_mut().find(|(v, _)| same_row_sum(*v, r)) {
            Some(entry) => entry.1 += w,
            None => pmf.push((r, w)),
        }
    }
    (m1, m2 - m1 * m1, pmf)
}

#[test]
fn the_seed_case_by_its_eight_masks() {
    let (mean, var, pmf) = enumerate_row(&[0.2, 0.3, 0.5], 0.5);
    // Same bound as the property below at d = 3: 4 (8 + 10) ε E[R²], E[R²] = 1.38.
    let bound = 72.0 * f64::EPSILON * 1.38;
    assert!((mean - 1.0).abs() <= bound);
    assert!((var - 0.38).abs() <= bound);
    let p_one: f64 = pmf
        .iter()
        .filter(|(r, _)| same_row_sum(*r, 1.0))
        .map(|(_, w)| w)
        .sum();
    assert_eq!(p_one, 0.25, "two of the eight masks sum to one");
    assert_eq!(pmf.len(), 7, "R takes 7 distinct values");
    // The crate's stated distribution agrees.
    for (support, want) in attention::SEED_ROW_SUMS
        .iter()
        .zip(attention::seed_row_sum_pmf())
    {
        let got: f64 = pmf
            .iter()
            .filter(|(r, _)| same_row_sum(*r, *support))
            .map(|(_, w)| w)
            .sum();
        assert_eq!(got, want, "P(R = {support})");
    }
    let rate = Rate::new(0.5).unwrap();
    // Three squares, a sum and one product: a few ε on 0.38.
    assert!(
        (attention::row_sum_variance(&[0.2, 0.3, 0.5], rate) - 0.38).abs() <= 8.0 * f64::EPSILON
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// `Var R = (p/q) Σ a²` on random rows: closed form against the
    /// enumeration above. Rounding bound: each of the `2^d` terms of `E[R²]`
    /// carries `d` multiplications and `d` additions, the running sum adds
    /// `2^d` more roundings, and `Var = E[R²] − E[R]²` adds the error of
    /// `E[R]²` (≤ 2× that of `E[R]`) on the scale `E[R²]`: in all at most
    /// `4 (2^d + 2d + 4) ε E[R²]`.
    #[test]
    fn row_sum_variance_matches_enumeration(
        raw in prop::collection::vec(0.01f64..1.0, 1..8),
        p in 0.0f64..0.9,
    ) {
        let total: f64 = raw.iter().sum();
        let a: Vec<f64> = raw.iter().map(|v| v / total).collect();
        let (mean, var, _) = enumerate_row(&a, p);
        let rate = Rate::new(p).unwrap();
        let second = var + mean * mean;
        let d = a.len() as f64;
        let bound = 4.0 * (2f64.powf(d) + 2.0 * d + 4.0) * f64::EPSILON * second;
        prop_assert!((mean - attention::row_sum_mean(&a)).abs() <= bound);
        prop_assert!((var - attention::row_sum_variance(&a, rate)).abs() <= bound);
    }
}

#[test]
fn shared_masks_are_noisier_when_a_column_keeps_its_sign() {
    // One column of T = 3 equal entries: shared Var = (p/q)·9, independent (p/q)·3.
    let rate = Rate::new(0.3).unwrap();
    let x = [1.0, 1.0, 1.0];
    let shared = mask_shape::shared_variance(&x, 1, rate)[0];
    let independent = mask_shape::independent_variance(&x, 1, rate)[0];
    // A handful of roundings on values below 4: bound 8 ε · 4.
    let bound = 32.0 * f64::EPSILON;
    assert!((shared - 9.0 * 0.3 / 0.7).abs() <= bound);
    assert!((independent - 3.0 * 0.3 / 0.7).abs() <= bound);
    assert_eq!(
        mask_shape::zero_column_probability(3, 1, true, rate),
        vec![0.3]
    );
    let p3 = mask_shape::zero_column_probability(3, 1, false, rate)[0];
    assert!((p3 - 0.027).abs() <= 4.0 * f64::EPSILON * 0.027);
}
