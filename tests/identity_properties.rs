//! Closed forms against full enumeration over random configurations
//! (proptest, random small d, random x, random p), and the identities of the
//! shrink factors and the BatchNorm fold that tests/norm_properties.rs does
//! not already cover (there: c ≤ 1, c(0, σ) = √q, c_damped at h = 0 equals
//! c, vanishing bypass). No sampling: every comparison is between two exact
//! computations, with the rounding bound derived above it.
//!
//! # The enumeration bound
//!
//! `enumerate_masks` / `site_expectation` bound their own summation error
//! (`Oracle::rounding`). The per-mask quantity adds its own rounding: a mean
//! over `d ≤ 8` units is within `(d + 2) ε mean_k |z_k|`, and the two-pass
//! variance and the mean square within `(2d + 8) ε mean_k z_k²` (sums of
//! `d` non-negative products, one division; the centring subtracts a mean
//! already bounded). The closed forms are a few dozen operations on
//! `σ²`, `μ²` and `mean x²` (each a `d`-term sum): within `(2d + 32) ε`
//! times their magnitude `(σ² + μ²)/q`. With `E[mean_k z_k²] = (σ² + μ²)/q`,
//! every comparison below allows
//! `Oracle::rounding + (4d + 40) ε · 2 (σ² + μ²)/q` (the factor 2 covers
//! `mean |z| ≤ sqrt(mean z²)` and the `μ²` of the centring), which is of
//! order 1e-13 relative: a closed form off by any term of order `1/d` or
//! `p` fails by many orders of magnitude.

use dropmc::exact::{enumerate_masks, site_expectation};
use dropmc::formulas::mean_and_variance;
use dropmc::formulas::{batchnorm as fbn, bypass as fb, layernorm as fl, rmsnorm as fr};
use dropmc::ops::{Rate, Site};
use proptest::prelude::*;

fn rate() -> impl Strategy<Value = f64> {
    prop_oneof![Just(0.0), 0.0..0.95f64]
}

/// Inputs whose variance is below this share of their squared scale are
/// left out: a domain restriction, not a tolerance. There `1/σ` amplifies
/// the rounding of the mean by more than 10³, so a property of the formulas
/// would be tested against the conditioning of the data.
const NEGLIGIBLE_SPREAD: f64 = 1e-6;

/// A non-constant vector of 2 to 8 units (full enumeration: 2^8 masks).
fn small_vector() -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(-5.0..5.0f64, 2..=8).prop_filter("spread not negligible", |x| {
        let (m, s2) = mean_and_variance(x);
        s2 > NEGLIGIBLE_SPREAD * (1.0 + m * m)
    })
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 128,
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::Direct(
                "proptest-regressions/identity_properties.txt",
            ),
        )),
        ..ProptestConfig::default()
    }
}

/// The allowance of the module docs for inputs with moments `(μ, σ²)`.
fn allowance(d: usize, mu: f64, s2: f64, rate: Rate) -> f64 {
    (4.0 * d as f64 + 40.0) * f64::EPSILON * 2.0 * (s2 + mu * mu) / rate.q()
}

proptest! {
    #![proptest_config(config())]

    /// E[M] = μ, Var M = p(σ² + μ²)/(q d), E[V] exact, E[R²] = mean x²/q:
    /// all four against the enumeration of every mask.
    #[test]
    fn layernorm_and_rmsnorm_moments_equal_enumeration(x in small_vector(), p in rate()) {
        let rate = Rate::new(p).unwrap();
        let d = x.len();
        let (mu, s2) = fl::input_moments(&x).unwrap();
        let mut z = vec![0.0; d];
        let oracle = enumerate_masks(d, rate, 4, |mask, out| {
            for ((zk, &m), &xk) in z.iter_mut().zip(mask).zip(&x) {
                *zk = if m { xk / rate.q() } else { 0.0 };
            }
            let (m, v) = mean_and_variance(&z);
            out[0] = m;
            out[1] = (m - mu) * (m - mu);
            out[2] = v;
            out[3] = z.iter().map(|a| a * a).sum::<f64>() / d as f64;
        })
        .unwrap();
        let closed = [
            fl::mean_of_m(&x).unwrap(),
            fl::variance_of_m(&x, rate).unwrap(),
            fl::mean_of_v(&x, rate).unwrap(),
            fr::mean_of_r2(&x, rate).unwrap(),
        ];
        let slack = allowance(d, mu, s2, rate);
        for (k, ((value, rounding), closed)) in oracle.values.iter().zip(&oracle.rounding).zip(closed).enumerate() {
            let gap = (value - closed).abs();
            prop_assert!(gap <= rounding + slack,
                "quantity {}: enumeration {} closed form {} gap {:e}", k, value, closed, gap);
        }
    }

    /// Bypass y = h + dropout(v): E[V_y] = σ² + (1 − 1/d)(p/q) mean v², the
    /// σ² of the clean input h + v, against the enumeration of every mask.
    /// The magnitude in the allowance is that of y: `E[mean y²] ≤
    /// 2 mean h² + 2 mean v²/q`.
    #[test]
    fn bypass_mean_of_v_equals_enumeration(
        h in small_vector(), seed in prop::collection::vec(-3.0..3.0f64, 8), p in rate()
    ) {
        let rate = Rate::new(p).unwrap();
        let d = h.len();
        let v = seed[..d].to_vec();
        let site = Site::new(h.clone(), vec![(v.clone(), p)]).unwrap();
        let Ok(closed) = fb::mean_of_v(&site) else { return Ok(()) }; // constant h + v
        let oracle = site_expectation(&site, 1, |y, out| out[0] = mean_and_variance(y).1).unwrap();
        let mean_sq = |a: &[f64]| a.iter().map(|t| t * t).sum::<f64>() / d as f64;
        let magnitude = 2.0 * mean_sq(&h) + 2.0 * mean_sq(&v) / rate.q();
        let slack = (4.0 * d as f64 + 40.0) * f64::EPSILON * 2.0 * magnitude;
        let gap = (oracle.values[0] - closed).abs();
        prop_assert!(gap <= oracle.rounding[0] + slack, "enumeration {} closed {} gap {:e}", oracle.values[0], closed, gap);
    }

    /// c(μ, σ) is non-increasing in p: q falls and p (μ/σ)² rises. Each
    /// value is within 4 ε relative of the true one (square, product, sum,
    /// quotient, root), so the larger p may exceed by at most 8 ε relative.
    #[test]
    fn c_is_non_increasing_in_p(p1 in rate(), p2 in rate(), mu in -1e3..1e3f64, sigma in 1e-3..1e3f64) {
        let (lo, hi) = if p1 <= p2 { (p1, p2) } else { (p2, p1) };
        let c_lo = fl::shrink(mu, sigma, Rate::new(lo).unwrap()).unwrap();
        let c_hi = fl::shrink(mu, sigma, Rate::new(hi).unwrap()).unwrap();
        prop_assert!(c_hi <= c_lo * (1.0 + 8.0 * f64::EPSILON), "c({}) = {} > c({}) = {}", hi, c_hi, lo, c_lo);
        // The BatchNorm form of the same factor agrees: c² within 4 ε relative.
        let c2 = fbn::c_squared(mu, sigma, Rate::new(hi).unwrap()).unwrap();
        prop_assert!((c2 - c_hi * c_hi).abs() <= 8.0 * f64::EPSILON * c2);
    }

    /// The BatchNorm fold inverts the inflation: the expected buffers under
    /// dropout are `rm = μ`, `rv = (σ² + p μ²)/q`; the fold `q rv − p rm²`
    /// gives σ² back, and `c²` from the buffers equals `c(μ, σ)²`. The
    /// inflation and the fold are each about 4 roundings of terms no larger
    /// than `σ² + 2 p μ²/q` in magnitude, hence the bound `16 ε (σ² + 2 p μ²/q)`
    /// (absolute; the fold cancels `p μ²`).
    #[test]
    fn the_fold_inverts_the_inflation(p in rate(), mu in -100.0..100.0f64, sigma in 1e-2..1e2f64) {
        let rate = Rate::new(p).unwrap();
        let s2 = sigma * sigma;
        let rv = fbn::train_variance(mu, s2, rate);
        let folded = fbn::fold_running_var(&[mu], &[rv], rate).unwrap()[0];
        let scale = s2 + 2.0 * rate.p() * mu * mu / rate.q();
        prop_assert!((folded - s2).abs() <= 16.0 * f64::EPSILON * scale, "fold {} σ² {}", folded, s2);
        prop_assert_eq!(fbn::sigma2_from_buffers(mu, rv, rate), folded);
        let from_buffers = fbn::c_squared_from_buffers(mu, rv, rate);
        let direct = fbn::c_squared(mu, sigma, rate).unwrap();
        prop_assert!((from_buffers - direct).abs() <= 16.0 * f64::EPSILON * scale / rv + 8.0 * f64::EPSILON,
            "from buffers {} direct {}", from_buffers, direct);
    }

    /// The RMSNorm factor is √q at ε = 0 and rises towards 1 as ε grows:
    /// `c_rms(ε) = sqrt((r² + ε)/(r²/q + ε))` is non-decreasing in ε.
    #[test]
    fn rms_factor_rises_with_eps(p in rate(), r2 in 1e-3..1e3f64, e1 in 0.0..1e3f64, e2 in 0.0..1e3f64) {
        let rate = Rate::new(p).unwrap();
        let (lo, hi) = if e1 <= e2 { (e1, e2) } else { (e2, e1) };
        let (c_lo, c_hi) = (fr::shrink(r2, lo, rate), fr::shrink(r2, hi, rate));
        prop_assert!(c_hi >= c_lo * (1.0 - 8.0 * f64::EPSILON));
        prop_assert!(c_hi <= 1.0 + 4.0 * f64::EPSILON);
    }
}
