//! The skewness of an exponential moving average of batch statistics: what
//! BatchNorm's running buffers are after `t` train-mode batches.
//!
//! # Step by step
//!
//! 1. **One batch.** Of `n` i.i.d. copies of `X` (cumulants `κ₂ … κ₆`),
//!    the batch mean `k₁` and the unbiased batch variance `k₂` are Fisher's
//!    k-statistics, whose joint cumulants are classical (Kendall & Stuart,
//!    *The Advanced Theory of Statistics* I, §12.14–12.15; the products
//!    below are over the sampling distribution, not over `X`):
//!
//!    ```text
//!    κ(k₁, k₁) = κ₂ / n              κ(k₁, k₁, k₁) = κ₃ / n²
//!    κ(k₁, k₂) = κ₃ / n              κ(k₁, k₁, k₂) = κ₄ / n²
//!    κ(k₂, k₂) = κ₄ / n + 2 κ₂² / (n − 1)
//!    κ(k₁, k₂, k₂) = κ₅ / n² + 4 κ₂ κ₃ / (n (n − 1))
//!    κ(k₂, k₂, k₂) = κ₆ / n² + 12 κ₂ κ₄ / (n (n − 1))
//!                    + 4 (n − 2) κ₃² / (n (n − 1)²) + 8 κ₂³ / (n − 1)²
//!    ```
//!
//!    (checks: for a normal `X`, `k₂ ~ κ₂ χ²_{n−1}/(n − 1)` has third
//!    cumulant `8 κ₂³/(n − 1)²`; the unit tests enumerate every sample of a
//!    three-point law at `n = 3, 4` and recover all seven).
//! 2. **A linear combination** `L = α k₁ + β k₂` of one batch has
//!    `κ₂(L) = α² κ₁₁ + 2αβ κ₁₂ + β² κ₂₂` and
//!    `κ₃(L) = α³ κ₁₁₁ + 3α²β κ₁₁₂ + 3αβ² κ₁₂₂ + β³ κ₂₂₂` (multilinearity).
//! 3. **The moving average.** After `t` updates `b ← (1 − m) b + m L_s`
//!    from a constant, `b_t = const + Σ_s w_s L_s` with
//!    `w_s = m (1 − m)^{t − s}` over independent batches, so cumulants add:
//!    `κ_r(b_t) = κ_r(L) Σ_s w_s^r`, and
//!
//!    ```text
//!    γ(b_t) = γ(L) · Σ w_s³ / (Σ w_s²)^{3/2}
//!    ```
//!
//!    ([`ema_skewness`]; the factor is 1 for one batch and falls towards
//!    `0` as the average spreads over more batches).

use super::CentralMoments;

/// The joint cumulants of `(k₁, k₂)` of one batch (module docs, step 1):
/// `k11 = κ(k₁, k₁)`, `k112 = κ(k₁, k₁, k₂)` and so on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchCumulants {
    pub k11: f64,
    pub k12: f64,
    pub k22: f64,
    pub k111: f64,
    pub k112: f64,
    pub k122: f64,
    pub k222: f64,
}

impl BatchCumulants {
    /// For a batch of `n ≥ 2` i.i.d. copies of a quantity with central
    /// moments `x` (module docs, step 1); `None` below two copies, where
    /// the unbiased variance is undefined.
    pub fn of_batch(x: &CentralMoments, n: usize) -> Option<BatchCumulants> {
        if n < 2 {
            return None;
        }
        let [k2, k3, k4, k5, k6] = x.cumulants();
        let n = n as f64;
        let n1 = n - 1.0;
        Some(BatchCumulants {
            k11: k2 / n,
            k12: k3 / n,
            k22: k4 / n + 2.0 * k2 * k2 / n1,
            k111: k3 / (n * n),
            k112: k4 / (n * n),
            k122: k5 / (n * n) + 4.0 * k2 * k3 / (n * n1),
            k222: k6 / (n * n)
                + 12.0 * k2 * k4 / (n * n1)
                + 4.0 * (n - 2.0) * k3 * k3 / (n * n1 * n1)
                + 8.0 * k2 * k2 * k2 / (n1 * n1),
        })
    }

    /// `[k11, k12, k22, k111, k112, k122, k222]`.
    pub fn to_array(&self) -> [f64; 7] {
        [
            self.k11, self.k12, self.k22, self.k111, self.k112, self.k122, self.k222,
        ]
    }

    /// `[κ₂, κ₃]` of `α k₁ + β k₂` (module docs, step 2).
    pub fn of_combination(&self, alpha: f64, beta: f64) -> [f64; 2] {
        let (a, b) = (alpha, beta);
        [
            a * a * self.k11 + 2.0 * a * b * self.k12 + b * b * self.k22,
            a * a * a * self.k111
                + 3.0 * a * a * b * self.k112
                + 3.0 * a * b * b * self.k122
                + b * b * b * self.k222,
        ]
    }

    /// The skewness of `α k₁ + β k₂` (0 for a constant combination).
    pub fn combination_skewness(&self, alpha: f64, beta: f64) -> f64 {
        let [var, third] = self.of_combination(alpha, beta);
        if var > 0.0 {
            third / var.powf(1.5)
        } else {
            0.0
        }
    }
}

/// The skewness of `Σ_s w_s L_s` over `t` independent copies of a quantity
/// with skewness `skewness`, `w_s = m (1 − m)^{t − s}` (module docs, step
/// 3).
pub fn ema_skewness(skewness: f64, momentum: f64, steps: u32) -> f64 {
    let (mut s2, mut s3) = (0.0, 0.0);
    let mut w = momentum;
    for _ in 0..steps {
        s2 += w * w;
        s3 += w * w * w;
        w *= 1.0 - momentum;
    }
    if s2 > 0.0 {
        skewness * s3 / s2.powf(1.5)
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A three-point law, skewed, so every cumulant enters.
    const VALUES: [f64; 3] = [0.0, 1.0, 3.0];
    const WEIGHTS: [f64; 3] = [0.5, 0.3, 0.2];

    /// The joint central moments of `(k₁, k₂)` over every sample of `n`
    /// draws of the law (the third-order ones are the third cumulants).
    fn enumerated(n: usize) -> BatchCumulants {
        let samples = 3usize.pow(n as u32);
        let mut law = Vec::with_capacity(samples);
        for index in 0..samples {
            let (mut w, mut sum, mut squares, mut rest) = (1.0, 0.0, 0.0, index);
            for _ in 0..n {
                let j = rest % 3;
                rest /= 3;
                w *= WEIGHTS[j];
                sum += VALUES[j];
                squares += VALUES[j] * VALUES[j];
            }
            let k1 = sum / n as f64;
            let k2 = (squares - n as f64 * k1 * k1) / (n as f64 - 1.0);
            law.push((w, k1, k2));
        }
        let mean = |f: &dyn Fn(f64, f64) -> f64| law.iter().map(|&(w, a, b)| w * f(a, b)).sum();
        let m1: f64 = mean(&|a, _| a);
        let m2: f64 = mean(&|_, b| b);
        let c = |i: i32, j: i32| mean(&|a, b| (a - m1).powi(i) * (b - m2).powi(j));
        BatchCumulants {
            k11: c(2, 0),
            k12: c(1, 1),
            k22: c(0, 2),
            k111: c(3, 0),
            k112: c(2, 1),
            k122: c(1, 2),
            k222: c(0, 3),
        }
    }

    #[test]
    fn the_k_statistic_cumulants_match_every_sample_enumerated() {
        let x = CentralMoments::of_law(VALUES.iter().zip(&WEIGHTS).map(|(&v, &w)| (w, v)));
        for n in [3, 4] {
            let formula = BatchCumulants::of_batch(&x, n).unwrap();
            let exact = enumerated(n);
            for (f, e) in formula.to_array().iter().zip(exact.to_array()) {
                // Both sides are sums of at most 81 terms of at most
                // 3⁶ = 729 each, every term a few roundings: 10⁴ roundings
                // of 729 bounds either side's error.
                let tol = 2.0 * crate::stats::tolerance::bound(1e4, 729.0);
                assert!((f - e).abs() <= tol, "n = {n}: {formula:?} vs {exact:?}");
            }
        }
    }

    #[test]
    fn one_batch_keeps_the_skewness_and_a_long_average_shrinks_it() {
        assert_eq!(ema_skewness(2.0, 1.0, 1), 2.0);
        let spread = ema_skewness(2.0, 0.1, 30);
        assert!(spread > 0.0 && spread < 1.0, "{spread}");
    }
}
