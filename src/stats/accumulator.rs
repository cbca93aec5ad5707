//! Streaming, mergeable moment accumulators.
//!
//! Both accumulators use Welford's update for one observation and Chan,
//! Golub and LeVeque's pairwise formula to merge two partial results:
//!
//! ```text
//! n   = n_a + n_b
//! δ   = mean_b − mean_a
//! mean = mean_a + δ · n_b / n
//! M2  = M2_a + M2_b + δ² · n_a n_b / n          (M2 = Σ (t − mean)²)
//! C   = C_a + C_b + δ_s δ_t · n_a n_b / n       (C = Σ (s − mean_s)(t − mean_t))
//! ```
//!
//! Merging in a fixed order gives a fixed result, which the engine relies on.

use serde::Serialize;

/// A mean with its standard error, from `n` independent draws.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Estimate {
    pub value: f64,
    pub stderr: f64,
    pub n: u64,
    /// Degrees of freedom of the variance behind `stderr`: `n − 1` for a
    /// per-draw sample variance ([`per_draw_dof`]), about one per batch for
    /// batch means, `∞` when the standard error is known rather than
    /// estimated (a null-hypothesis standard error). A test of the estimate
    /// against a target takes its critical value from Student-t with these
    /// degrees of freedom.
    pub dof: f64,
}

/// Degrees of freedom of a sample variance over `n` draws: `n − 1`.
pub fn per_draw_dof(n: u64) -> f64 {
    n.saturating_sub(1) as f64
}

impl Estimate {
    /// The estimate of `factor · E[t]`: value and standard error scale alike.
    pub fn scaled(self, factor: f64) -> Estimate {
        Estimate {
            value: self.value * factor,
            stderr: self.stderr * factor.abs(),
            n: self.n,
            dof: self.dof,
        }
    }
}

/// Per-component mean and variance of a vector statistic.
#[derive(Debug, Clone, PartialEq)]
pub struct MeanAccumulator {
    n: u64,
    mean: Vec<f64>,
    m2: Vec<f64>,
}

impl MeanAccumulator {
    /// An empty accumulator for vectors of `dim` components.
    pub fn new(dim: usize) -> Self {
        MeanAccumulator {
            n: 0,
            mean: vec![0.0; dim],
            m2: vec![0.0; dim],
        }
    }

    /// Number of components.
    pub fn dim(&self) -> usize {
        self.mean.len()
    }

    /// Number of observations so far.
    pub fn count(&self) -> u64 {
        self.n
    }

    /// Adds one observation (`t.len() == dim`).
    pub fn push(&mut self, t: &[f64]) {
        debug_assert_eq!(t.len(), self.dim());
        self.n += 1;
        let n = self.n as f64;
        for ((mean, m2), &v) in self.mean.iter_mut().zip(&mut self.m2).zip(t) {
            let delta = v - *mean;
            *mean += delta / n;
            *m2 += delta * (v - *mean);
        }
    }

    /// Folds another accumulator of the same dimension into this one.
    pub fn merge(&mut self, other: &MeanAccumulator) {
        debug_assert_eq!(other.dim(), self.dim());
        if merged_without_arithmetic(self.n, other.n, self, other) {
            return;
        }
        let (na, nb) = (self.n as f64, other.n as f64);
        let n = na + nb;
        for k in 0..self.dim() {
            let delta = other.mean[k] - self.mean[k];
            self.mean[k] += delta * nb / n;
            self.m2[k] += other.m2[k] + delta * delta * na * nb / n;
        }
        self.n += other.n;
    }

    /// Sample means.
    pub fn means(&self) -> &[f64] {
        &self.mean
    }

    /// Unbiased sample variances (`M2 / (n − 1)`); zero for fewer than two draws.
    pub fn variances(&self) -> Vec<f64> {
        if self.n < 2 {
            return vec![0.0; self.dim()];
        }
        let denom = (self.n - 1) as f64;
        self.m2.iter().map(|m2| (m2 / denom).max(0.0)).collect()
    }

    /// Each component's mean with its standard error `s / sqrt(n)`.
    pub fn estimates(&self) -> Vec<Estimate> {
        let n = self.n;
        self.mean
            .iter()
            .zip(self.variances())
            .map(|(&value, var)| Estimate {
                value,
                stderr: (var / n as f64).sqrt(),
                n,
                dof: per_draw_dof(n),
            })
            .collect()
    }
}

/// Mean vector and full covariance matrix of a (small) vector statistic,
/// for estimates that are smooth functions of several means (delta method).
#[derive(Debug, Clone, PartialEq)]
pub struct CovarianceAccumulator {
    n: u64,
    mean: Vec<f64>,
    /// Row-major `dim × dim` co-moment matrix `Σ (s − mean_s)(t − mean_t)`.
    comoment: Vec<f64>,
}

impl CovarianceAccumulator {
    /// An empty accumulator for vectors of `dim` components.
    pub fn new(dim: usize) -> Self {
        CovarianceAccumulator {
            n: 0,
            mean: vec![0.0; dim],
            comoment: vec![0.0; dim * dim],
        }
    }

    /// Number of components.
    pub fn dim(&self) -> usize {
        self.mean.len()
    }

    /// Number of observations so far.
    pub fn count(&self) -> u64 {
        self.n
    }

    /// Adds one observation.
    pub fn push(&mut self, t: &[f64]) {
        let d = self.dim();
        debug_assert_eq!(t.len(), d);
        self.n += 1;
        let n = self.n as f64;
        let before: Vec<f64> = t.iter().zip(&self.mean).map(|(v, m)| v - m).collect();
        for (mean, delta) in self.mean.iter_mut().zip(&before) {
            *mean += delta / n;
        }
        for (i, row) in self.comoment.chunks_exact_mut(d).enumerate() {
            let after_i = t[i] - self.mean[i];
            for (c, b) in row.iter_mut().zip(&before) {
                *c += after_i * b;
            }
        }
    }

    /// Folds another accumulator of the same dimension into this one.
    pub fn merge(&mut self, other: &CovarianceAccumulator) {
        debug_assert_eq!(other.dim(), self.dim());
        if merged_without_arithmetic(self.n, other.n, self, other) {
            return;
        }
        let d = self.dim();
        let (na, nb) = (self.n as f64, other.n as f64);
        let n = na + nb;
        let delta: Vec<f64> = other
            .mean
            .iter()
            .zip(&self.mean)
            .map(|(b, a)| b - a)
            .collect();
        for i in 0..d {
            for j in 0..d {
                self.comoment[i * d + j] +=
                    other.comoment[i * d + j] + delta[i] * delta[j] * na * nb / n;
            }
        }
        for (mean, dl) in self.mean.iter_mut().zip(&delta) {
            *mean += dl * nb / n;
        }
        self.n += other.n;
    }

    /// Sample means.
    pub fn means(&self) -> &[f64] {
        &self.mean
    }

    /// Unbiased sample covariance of components `i` and `j`.
    pub fn covariance(&self, i: usize, j: usize) -> f64 {
        if self.n < 2 {
            return 0.0;
        }
        self.comoment[i * self.dim() + j] / (self.n - 1) as f64
    }

    /// The estimate of `g(E[t])` with its delta-method standard error
    /// `sqrt(∇gᵀ Σ ∇g / n)`, given `g`'s value and gradient at the sample means.
    pub fn delta_method(&self, value: f64, gradient: &[f64]) -> Estimate {
        let d = self.dim();
        let mut var = 0.0;
        for i in 0..d {
            for j in 0..d {
                var += gradient[i] * gradient[j] * self.covariance(i, j);
            }
        }
        Estimate {
            value,
            stderr: (var.max(0.0) / self.n as f64).sqrt(),
            n: self.n,
            dof: per_draw_dof(self.n),
        }
    }
}

/// The merges that need no arithmetic: `other` empty (nothing to add) or
/// `this` empty (it becomes `other`). True when the merge is done.
fn merged_without_arithmetic<A: Clone>(this_n: u64, other_n: u64, this: &mut A, other: &A) -> bool {
    if other_n == 0 {
        return true;
    }
    if this_n == 0 {
        *this = other.clone();
        return true;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data() -> Vec<[f64; 2]> {
        (0..1000)
            .map(|i| [(i % 17) as f64 * 0.25 - 1.0, ((i * 7) % 11) as f64])
            .collect()
    }

    /// Two-pass mean and unbiased (co)variance, the textbook definition.
    fn two_pass(rows: &[[f64; 2]]) -> ([f64; 2], [[f64; 2]; 2]) {
        let n = rows.len() as f64;
        let mean = [0, 1].map(|j| rows.iter().map(|r| r[j]).sum::<f64>() / n);
        let cov = [0, 1].map(|i| {
            [0, 1].map(|j| {
                rows.iter()
                    .map(|r| (r[i] - mean[i]) * (r[j] - mean[j]))
                    .sum::<f64>()
                    / (n - 1.0)
            })
        });
        (mean, cov)
    }

    /// Rounding allowance for comparing two summation orders of 1000 terms
    /// of magnitude ≤ 100: 1000 · ε · 100 ≈ 2e-11.
    const ROUNDING: f64 = 1e-10;

    #[test]
    fn welford_matches_two_pass_and_merging_matches_one_pass() {
        let rows = data();
        let (mean, cov) = two_pass(&rows);
        let mut whole = MeanAccumulator::new(2);
        let mut cwhole = CovarianceAccumulator::new(2);
        let (mut left, mut right) = (MeanAccumulator::new(2), MeanAccumulator::new(2));
        let (mut cleft, mut cright) =
            (CovarianceAccumulator::new(2), CovarianceAccumulator::new(2));
        for (i, r) in rows.iter().enumerate() {
            whole.push(r);
            cwhole.push(r);
            if i < 377 {
                left.push(r);
                cleft.push(r)
            } else {
                right.push(r);
                cright.push(r)
            }
        }
        left.merge(&right);
        cleft.merge(&cright);
        for acc in [&whole, &left] {
            assert_eq!(acc.count(), 1000);
            for j in 0..2 {
                assert!((acc.means()[j] - mean[j]).abs() < ROUNDING);
                assert!((acc.variances()[j] - cov[j][j]).abs() < ROUNDING);
            }
        }
        for acc in [&cwhole, &cleft] {
            for i in 0..2 {
                assert!((acc.means()[i] - mean[i]).abs() < ROUNDING);
                for (j, c) in cov[i].iter().enumerate() {
                    assert!((acc.covariance(i, j) - c).abs() < ROUNDING, "{i}{j}");
                }
            }
        }
        let e = whole.estimates();
        assert!((e[1].stderr - (cov[1][1] / 1000.0).sqrt()).abs() < ROUNDING);
    }

    #[test]
    fn merging_an_empty_accumulator_changes_nothing() {
        let mut a = MeanAccumulator::new(1);
        a.push(&[3.0]);
        a.push(&[5.0]);
        let before = a.clone();
        a.merge(&MeanAccumulator::new(1));
        assert_eq!(a, before);
        let mut empty = MeanAccumulator::new(1);
        empty.merge(&before);
        assert_eq!(empty, before);
    }

    #[test]
    fn delta_method_of_a_difference_adds_variances_and_subtracts_covariance() {
        let mut acc = CovarianceAccumulator::new(2);
        for r in data() {
            acc.push(&r);
        }
        let e = acc.delta_method(acc.means()[0] - acc.means()[1], &[1.0, -1.0]);
        let var = acc.covariance(0, 0) + acc.covariance(1, 1) - 2.0 * acc.covariance(0, 1);
        assert!((e.stderr - (var / 1000.0).sqrt()).abs() < ROUNDING);
    }
}
