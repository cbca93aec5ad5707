//! Identities of the normalization shrink factors, over random
//! configurations (proptest). Each bound is the rounding of the two
//! computations compared, derived in the comment above it.

use dropmc::formulas::{bypass as fb, layernorm as fl, rmsnorm as fr};
use dropmc::ops::{Rate, Site};
use proptest::prelude::*;

fn rate() -> impl Strategy<Value = f64> {
    prop_oneof![Just(0.0), 0.0..0.99f64]
}

/// Inputs whose variance is below this share of their squared scale are
/// left out: a domain restriction, not a tolerance. There `1/σ` amplifies
/// the rounding of the mean by more than 10³, so a property of the formulas
/// would be tested against the conditioning of the data.
const NEGLIGIBLE_SPREAD: f64 = 1e-6;

/// A non-constant vector of 2 to 32 moderate values.
fn spread_vector() -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(-10.0..10.0f64, 2..32)
        .prop_filter("non-constant", |x| x.iter().any(|&v| v != x[0]))
        .prop_filter("spread not negligible", |x| {
            let (m, s2) = dropmc::formulas::mean_and_variance(x);
            s2 > NEGLIGIBLE_SPREAD * (1.0 + m * m)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// c(0, σ) = √q: with μ = 0 the formula is sqrt(q / 1), one square root
    /// and a division by 1 (exact): at most one rounding apart from √q.
    #[test]
    fn zero_mean_gives_root_q(p in rate(), sigma in 1e-3..1e3f64) {
        let rate = Rate::new(p).unwrap();
        let c = fl::shrink(0.0, sigma, rate).unwrap();
        prop_assert!((c - rate.q().sqrt()).abs() <= 2.0 * f64::EPSILON);
        // And the RMSNorm factor at ε = 0 is √q for every input.
        prop_assert!((fr::shrink(sigma, 0.0, rate) - rate.q().sqrt()).abs() <= 4.0 * f64::EPSILON);
    }

    /// c ≤ √q ≤ 1: the denominator 1 + p (μ/σ)² is at least 1. Three
    /// roundings (square, product, sum) can push the computed value at most
    /// 4 ε above √q.
    #[test]
    fn c_never_exceeds_one(p in rate(), mu in -1e3..1e3f64, sigma in 1e-3..1e3f64) {
        let rate = Rate::new(p).unwrap();
        let c = fl::shrink(mu, sigma, rate).unwrap();
        prop_assert!(c <= rate.q().sqrt() * (1.0 + 4.0 * f64::EPSILON));
        prop_assert!(c <= 1.0);
        prop_assert!(c > 0.0);
    }

    /// h = 0: c_damped equals c(μ, σ). Both are sqrt of σ² over a sum of
    /// non-negative terms computed by sums over d units (mean_k x_k² in one,
    /// σ² and μ² in the other), each within (d + 4) ε relative, so the
    /// squares differ by at most (4d + 16) ε relative, and the roots by half.
    #[test]
    fn damped_with_no_bypass_is_c(p in rate(), x in spread_vector()) {
        let rate = Rate::new(p).unwrap();
        let site = Site::plain(&x, p).unwrap();
        let damped = fb::damped(&site, 0.0).unwrap();
        let (mu, s2) = fl::input_moments(&x).unwrap();
        let c = fl::shrink(mu, s2.sqrt(), rate).unwrap();
        let bound = (4.0 * x.len() as f64 + 16.0) * f64::EPSILON * c;
        prop_assert!((damped - c).abs() <= bound, "damped {} c {}", damped, c);
        // The ε form at ε = 0 is the same factor.
        prop_assert!((fl::shrink_eps(mu, s2, 0.0, rate) - c).abs() <= bound);
        // c_damped from ρ² alone.
        let from_rho = fb::damped_from_rho2(fb::rho2(&site).unwrap(), rate);
        prop_assert!((from_rho - c).abs() <= bound);
    }

    /// v → 0 gives c_damped → 1: with noise N = (p/q) mean v², the formula
    /// gives 1 − c ≤ 1 − c² = N/(σ² + N) ≤ N/σ², which shrinks like t² for
    /// v = t v0 (plus a few roundings of c near 1).
    #[test]
    fn vanishing_bypass_term_gives_one(
        p in rate(),
        h in spread_vector(),
        seed in prop::collection::vec(-1.0..1.0f64, 32),
        t in prop_oneof![Just(0.0), 1e-8..1.0f64],
    ) {
        let rate = Rate::new(p).unwrap();
        let v: Vec<f64> = seed[..h.len()].iter().map(|a| t * a).collect();
        let site = Site::new(h.clone(), vec![(v.clone(), p)]).unwrap();
        let Ok((_, s2)) = fl::input_moments(&site.clean()) else { return Ok(()) };
        let c = fb::damped(&site, 0.0).unwrap();
        let noise = rate.odds() * v.iter().map(|a| a * a).sum::<f64>() / v.len() as f64;
        prop_assert!(c <= 1.0);
        prop_assert!(1.0 - c <= noise / s2 + 4.0 * f64::EPSILON, "1 - c = {} bound {}", 1.0 - c, noise / s2);
        if t == 0.0 {
            prop_assert_eq!(c, 1.0);
        }
    }
}
