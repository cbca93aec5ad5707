//! Exact Clopper–Pearson intervals for a detection rate over seeds.

use statrs::distribution::DiscreteCDF;

/// Exact one-sided lower Clopper–Pearson bound for `k` successes in `n`
/// trials at tail probability `tail`: the `θ` with `P(X ≥ k | θ) = tail`,
/// `X ~ Binomial(n, θ)` (0 for `k = 0`; `tail^(1/n)` for `k = n`).
pub fn clopper_pearson_lower(k: u64, n: u64, tail: f64) -> f64 {
    if k == 0 || n == 0 {
        return 0.0;
    }
    if k >= n {
        return tail.powf(1.0 / n as f64);
    }
    // P(X ≥ k | θ) increases with θ: bisect on it. 100 halvings of [0, 1]
    // end below the spacing of f64 near any θ in (0, 1).
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        let Ok(binomial) = statrs::distribution::Binomial::new(mid, n) else {
            return lo;
        };
        if binomial.sf(k - 1) < tail {
            lo = mid
        } else {
            hi = mid
        }
    }
    lo
}

/// Exact two-sided Clopper–Pearson interval for `k` successes in `n` trials
/// at confidence `level`: each end leaves `(1 − level)/2` in its tail. The
/// upper end is the lower end of the failures, `1 − lower(n − k)`.
pub fn clopper_pearson(k: u64, n: u64, level: f64) -> (f64, f64) {
    let tail = (1.0 - level) / 2.0;
    let k = k.min(n);
    (
        clopper_pearson_lower(k, n, tail),
        1.0 - clopper_pearson_lower(n - k, n, tail),
    )
}
