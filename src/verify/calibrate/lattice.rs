//! Randomized p-values for components whose estimate is a scaled count.
//!
//! # Which components
//!
//! Many per-draw statistics take two values, `0` and some `a ≠ 0`: an
//! indicator (`a = 1`: the kept count's `P(K = k)`, a zero column), or a
//! unit's output and its powers (`z_k ∈ {0, x_k/q}`, so `z_k^r ∈ {0,
//! (x_k/q)^r}`; `(z − z')²/2 ∈ {0, x_k²/(2q²)}`). Their mean over `n` draws
//! is `m = a·C/n` with a count `C ~ Binomial(n, θ)`, `θ = E[statistic]/a`.
//! The z-test's p-value is then a function of `C` alone: it takes a few
//! thousand values at most, ties across seeds, and is not continuous-uniform
//! (for a rare outcome, `n θ` small, it is far from it), which is why the KS
//! test cannot be applied to it as it stands.
//!
//! # Recognising one from its estimate
//!
//! The estimate carries `m`, its standard error `s = √(S²/n)` with the
//! unbiased sample variance `S² = a² C (n − C) / (n (n − 1))`, and `n`.
//! Eliminating `a`:
//!
//! ```text
//! s² / m² = (n − C) / (C (n − 1))      ⇒      C = n / (1 + (n − 1) s²/m²),   a = m n / C.
//! ```
//!
//! A component is treated as a scaled count when, under every seed with
//! spread (`s > 0`; at least two such seeds), this `C` is an integer in
//! `[1, n − 1]` to within [`COUNT_SLACK`] and the implied `a` is the same to
//! [`SCALE_SLACK`] relative (`a` is a property of the claim, not of the
//! seed); seeds without spread must have `m = 0` (`C = 0`) or `m = a`
//! (`C = n`). The slacks are recognition thresholds, not statistical ones:
//! the accumulators give `C` to about `10⁻⁹` (measured: within `4·10⁻¹⁰` at
//! `n = 10⁶`), while for a many-valued statistic `C` is an arbitrary real
//! and `a` varies between seeds by about `1/√n` relative, so a continuous
//! statistic passes both with probability far below anything the
//! calibration could notice.
//!
//! # The randomized p-value
//!
//! With `X ~ Binomial(n, θ₀)`, `θ₀ = target / a`, and a uniform `V`
//! independent of the count,
//!
//! ```text
//! W = P(X < C) + V · P(X = C)               (randomized probability integral transform)
//! p = 2 · min(W, 1 − W),   1 − W = P(X > C) + (1 − V) · P(X = C)
//! ```
//!
//! Under H0 (`C ~ Binomial(n, θ₀)`) `W` is exactly `U(0, 1)`: for `t` in
//! the step of `c`, `P(W ≤ t) = P(C < c) + P(C = c) · P(V ≤ (t − F(c−1))/f(c))
//! = F(c−1) + (t − F(c−1)) = t`. Folding preserves it (`P(2 min(W, 1−W) ≤ t) =
//! P(W ≤ t/2) + P(W ≥ 1 − t/2) = t`), so `p ~ U(0, 1)` exactly, not
//! approximately, and the KS test applies. Both tails are computed directly
//! (`cdf` and `sf` of statrs' `Binomial`, regularised incomplete beta
//! functions), so neither side loses its small values to cancellation.
//! A claim whose analytic value is wrong moves `θ₀` away from the true `θ`
//! and piles the p-values up near 0.
//!
//! `V` is deterministic, so a calibration is reproducible bit for bit: it is
//! the first `f64` of a ChaCha8 stream seeded with
//! `derive_seed(derive_seed(run seed, claim id), "calibrate.randomize/<k>")`,
//! a stream no claim reads (claims read `derive_seed(run seed, claim id)`
//! and its chunk streams), hence independent of the count in the same sense
//! as the claims' streams are of each other.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use statrs::distribution::{Binomial, Discrete, DiscreteCDF};

use crate::engine::derive_seed;

/// Largest distance of the recovered count `C` from an integer.
pub const COUNT_SLACK: f64 = 1e-3;
/// Largest relative spread of the recovered scale `a` across seeds.
pub const SCALE_SLACK: f64 = 1e-7;

/// One seed's estimate of one component.
#[derive(Debug, Clone, Copy)]
pub struct Observation {
    pub value: f64,
    pub stderr: f64,
    pub n: u64,
}

/// The scale `a` when `observations` (one per seed) are means of a
/// `{0, a}`-valued statistic (module docs), else `None`.
pub fn scale(observations: &[Observation]) -> Option<f64> {
    let mut scales = Vec::new();
    for o in observations.iter().filter(|o| o.stderr > 0.0) {
        let n = o.n as f64;
        if o.value == 0.0 || o.n < 2 {
            return None;
        }
        let ratio = (o.stderr / o.value).powi(2);
        let c = n / (1.0 + (n - 1.0) * ratio);
        let whole = c.round();
        if (c - whole).abs() > COUNT_SLACK || whole < 1.0 || whole > n - 1.0 {
            return None;
        }
        scales.push(o.value * n / whole);
    }
    let a = *scales.first()?;
    let consistent = scales.len() >= 2
        && scales
            .iter()
            .all(|s| (s - a).abs() <= SCALE_SLACK * a.abs());
    let flat_ok = observations
        .iter()
        .filter(|o| o.stderr == 0.0)
        .all(|o| o.value == 0.0 || (o.value - a).abs() <= SCALE_SLACK * a.abs());
    (consistent && flat_ok).then_some(a)
}

/// The count `C = round(m n / a)` behind one observation.
fn count(o: &Observation, a: f64) -> u64 {
    (o.value * o.n as f64 / a).round().clamp(0.0, o.n as f64) as u64
}

/// The uniform `V` of seed `seed`, claim `id`, component `k`.
pub fn uniform(seed: u64, id: &str, k: usize) -> f64 {
    let stream = derive_seed(derive_seed(seed, id), &format!("calibrate.randomize/{k}"));
    ChaCha8Rng::seed_from_u64(stream).random::<f64>()
}

/// The randomized two-sided p-value of `o` against `target` for a
/// `{0, a}`-valued statistic (module docs); `None` when `θ₀ = target/a` is
/// not a probability (the claim's target cannot be the mean of such a
/// statistic, so the component is not treated as a count).
pub fn p_value(o: &Observation, a: f64, target: f64, v: f64) -> Option<f64> {
    let theta = target / a;
    if !(0.0..=1.0).contains(&theta) {
        return None;
    }
    let binomial = Binomial::new(theta, o.n).ok()?;
    let c = count(o, a);
    let at = binomial.pmf(c);
    let below = if c == 0 { 0.0 } else { binomial.cdf(c - 1) };
    let above = binomial.sf(c);
    let lower = below + v * at;
    let upper = above + (1.0 - v) * at;
    Some((2.0 * lower.min(upper)).min(1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_randomized_p_value_is_exactly_uniform_under_the_null() {
        // Exact, not sampled: for X ~ Binomial(5, 0.3) and p(c, v) as
        // above, P(p ≤ t) = Σ_c f(c) · |{v ∈ [0, 1): p(c, v) ≤ t}| = t,
        // the measure of the v-set computed on a fine grid of v.
        let o = |c: u64| Observation {
            value: c as f64 / 5.0,
            stderr: 0.1,
            n: 5,
        };
        let b = Binomial::new(0.3, 5).unwrap();
        let grid = 20_000;
        for t in [0.01, 0.05, 0.2, 0.5, 0.9] {
            let mass: f64 = (0..=5)
                .map(|c| {
                    let hits = (0..grid)
                        .filter(|i| {
                            let v = (*i as f64 + 0.5) / grid as f64;
                            p_value(&o(c), 1.0, 0.3, v).unwrap() <= t
                        })
                        .count();
                    b.pmf(c) * hits as f64 / grid as f64
                })
                .sum();
            // The grid resolves each v-set to 1/grid per endpoint.
            assert!((mass - t).abs() < 4.0 / grid as f64, "t = {t}: {mass}");
        }
    }

    #[test]
    fn a_scaled_count_is_recognised_and_a_continuous_mean_is_not() {
        // a = 2, n = 10: C = 3 gives m = 0.6, S² = 4·3·7/(10·9), s² = S²/10.
        let s = (4.0 * 3.0 * 7.0 / 90.0 / 10.0f64).sqrt();
        let count3 = Observation {
            value: 0.6,
            stderr: s,
            n: 10,
        };
        let c = 5.0;
        let s5 = (4.0 * c * (10.0 - c) / 90.0 / 10.0f64).sqrt();
        let count5 = Observation {
            value: 1.0,
            stderr: s5,
            n: 10,
        };
        let zero = Observation {
            value: 0.0,
            stderr: 0.0,
            n: 10,
        };
        let a = scale(&[count3, count5, zero]).unwrap();
        assert!((a - 2.0).abs() < 1e-12, "{a}");
        // One seed alone is not enough evidence.
        assert_eq!(scale(&[count3, zero]), None);
        // A mean whose implied count is not whole.
        let other = Observation {
            value: 0.61,
            ..count3
        };
        assert_eq!(scale(&[count3, other]), None);
        // A target that is not a·θ for a probability θ.
        assert_eq!(p_value(&count3, 2.0, 2.5, 0.5), None);
    }
}
