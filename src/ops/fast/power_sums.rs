//! A mean and a variance, each with its standard error, from the power sums
//! `Σt, Σt², Σt³, Σt⁴` of one statistic over `n` independent draws.
//!
//! The generic path estimates a variance from two independent draws per
//! sample, as the mean of `(t − t')²/2`. The fast kernels instead keep the
//! four power sums of `t` over single draws, which gives the unbiased sample
//! variance and, from the fourth central moment, its standard error.
//!
//! # The variance and its standard error
//!
//! ```text
//! t₁ … t_n iid, μ = E t, σ² = Var t, μ₄ = E (t − μ)⁴
//! s² = Σ (tᵢ − t̄)² / (n − 1)                            E s² = σ²  (unbiased)
//!
//! Var s² = μ₄/n − σ⁴ (n − 3)/(n (n − 1))                 (the classical
//!          result: expand Σ(tᵢ − t̄)² = Σ(tᵢ − μ)² − n(t̄ − μ)², take
//!          second moments; only terms with indices paired up survive)
//!
//! with the plug-in central moments of the sample
//!     m₂ = Σ (tᵢ − t̄)²/n,  m₄ = Σ (tᵢ − t̄)⁴/n
//! SE(s²) = √((m₄ − m₂² (n − 3)/(n − 1)) / n)
//! ```
//!
//! To leading order this is `√((μ₄ − σ⁴)/n)`, which is also the delta method
//! over `(Σt/n, Σt²/n)`: `g(a, b) = b − a²` has gradient `(−2μ, 1)` at
//! `(μ, E t²)`, and `∇gᵀ Cov(t, t²) ∇g = Var t² − 4μ Cov(t, t²) + 4μ² Var t
//! = E[((t − μ)² − σ²)²] = μ₄ − σ⁴`. The radicand is never negative:
//! `m₄ ≥ m₂²` (Jensen on the squares) and `(n − 3)/(n − 1) < 1`.
//!
//! The pair form spends two draws per term and has variance
//! `(μ₄ + σ⁴)/2` per pair, so per draw it is `(μ₄ + σ⁴)/(μ₄ − σ⁴)` times
//! less efficient than `s²` (2× for a normal `t`, where `μ₄ = 3σ⁴`).
//!
//! # Central moments from raw sums
//!
//! ```text
//! aᵣ = Σ tᵢʳ / n
//! m₂ = a₂ − a₁²
//! m₄ = a₄ − 4 a₁ a₃ + 6 a₁² a₂ − 3 a₁⁴
//! ```
//!
//! These lose about `ε (a₁²/m₂)²` of relative accuracy, so the kernels add
//! `t` shifted by a constant near its mean (a shift changes neither `s²`
//! nor its standard error; [`PowerSums::mean`] adds it back to the mean).

use super::run::estimate_from_sums;
use crate::stats::{Estimate, per_draw_dof};

/// The power sums `Σt, Σt², Σt³, Σt⁴` of a statistic shifted by `shift`
/// (`t = statistic − shift`) over `n` draws.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PowerSums {
    pub sums: [f64; 4],
    pub n: u64,
    pub shift: f64,
}

impl PowerSums {
    /// The power sums of `c·m` for an indicator `m` that was 1 on `count` of
    /// `n` draws: `Σ (c m)ʳ = cʳ · count`.
    pub fn of_scaled_indicator(c: f64, count: f64, n: u64) -> Self {
        PowerSums {
            sums: [
                c * count,
                c * c * count,
                c * c * c * count,
                c * c * c * c * count,
            ],
            n,
            shift: 0.0,
        }
    }

    /// The power sums at `sums[0..4]` (as a kernel writes them), with the
    /// shift the kernel subtracted.
    pub fn from_slice(sums: &[f64], n: u64, shift: f64) -> Self {
        PowerSums {
            sums: [sums[0], sums[1], sums[2], sums[3]],
            n,
            shift,
        }
    }

    /// `E[statistic]`: the sample mean with its standard error
    /// ([`estimate_from_sums`]), shift added back.
    pub fn mean(&self) -> Estimate {
        let mut e = estimate_from_sums(self.sums[0], self.sums[1], self.n);
        e.value += self.shift;
        e
    }

    /// `Var statistic`: the unbiased sample variance `s²` with the standard
    /// error of the module docs. Needs `n ≥ 2` (every [`crate::engine::Budget`]
    /// has it). Its `dof` is `n − 1`, as for a mean: the standard error is
    /// itself estimated from the sample's moments (here the fourth), and
    /// Student-t with `n − 1` degrees of freedom is the usual large-sample
    /// stand-in; the claims run it at `n ≥ 10⁵`, where t and normal agree.
    pub fn variance(&self) -> Estimate {
        let nf = self.n as f64;
        let [a1, a2, a3, a4] = self.sums.map(|s| s / nf);
        let m2 = (a2 - a1 * a1).max(0.0);
        let m4 = (a4 - 4.0 * a1 * a3 + 6.0 * a1 * a1 * a2 - 3.0 * a1.powi(4)).max(m2 * m2);
        let value = m2 * nf / (nf - 1.0);
        let radicand = (m4 - m2 * m2 * (nf - 3.0) / (nf - 1.0)) / nf;
        Estimate {
            value,
            stderr: radicand.max(0.0).sqrt(),
            n: self.n,
            dof: per_draw_dof(self.n),
        }
    }
}

/// Per component, the mean of an indicator that was 1 on `counts[i]` of
/// `n` draws (`Σt = Σt² = count`).
pub fn indicator_means(counts: &[f64], n: u64) -> Vec<Estimate> {
    counts
        .iter()
        .map(|&c| estimate_from_sums(c, c, n))
        .collect()
}

/// Per unit, the mean of `c_k m_k` for an indicator `m_k` that was 1 on
/// `counts[k]` of `n` draws.
pub fn scaled_indicator_means(c: &[f64], counts: &[f64], n: u64) -> Vec<Estimate> {
    c.iter()
        .zip(counts)
        .map(|(&c, &k)| PowerSums::of_scaled_indicator(c, k, n).mean())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sample {0, 1, 2, 3}: t̄ = 1.5, s² = 5/3, m₂ = 1.25,
    /// m₄ = (2·1.5⁴ + 2·0.5⁴)/4 = 2.5625, so
    /// SE² = (2.5625 − 1.5625 · 1/3)/4 = 0.5104166…
    #[test]
    fn variance_and_its_error_on_a_hand_worked_sample() {
        let t = [0.0f64, 1.0, 2.0, 3.0];
        let sums = [1, 2, 3, 4].map(|r| t.iter().map(|v| v.powi(r)).sum::<f64>());
        let e = PowerSums {
            sums,
            n: 4,
            shift: 0.0,
        }
        .variance();
        assert!((e.value - 5.0 / 3.0).abs() < 1e-14);
        assert!((e.stderr * e.stderr - (2.5625 - 1.5625 / 3.0) / 4.0).abs() < 1e-14);
        // A shift moves the mean only.
        let shifted = [1, 2, 3, 4].map(|r| t.iter().map(|v| (v - 1.0).powi(r)).sum::<f64>());
        let s = PowerSums {
            sums: shifted,
            n: 4,
            shift: 1.0,
        };
        assert!((s.variance().value - e.value).abs() < 1e-14);
        assert!((s.mean().value - 1.5).abs() < 1e-15);
    }

    #[test]
    fn a_constant_has_zero_variance_and_zero_error() {
        let e = PowerSums::of_scaled_indicator(2.0, 10.0, 10).variance();
        assert_eq!((e.value, e.stderr), (0.0, 0.0));
    }
}
