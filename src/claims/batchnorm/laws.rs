//! The laws the claims declare per component ([`crate::claims::Claim::law`]).

use super::super::{Draw, Estimator, Law};
use super::Config;
use crate::formulas::batchnorm as f;

/// The laws the claims declare ([`Claim::law`]), per claimed component, from
/// which `tests/test_sizes.rs` derives each skewness again by Gaussian
/// quadratic forms rather than the k-statistic cumulants the claims use.
impl Config {
    /// The channels, `(μ_k, σ_k)`.
    pub(super) fn channel_pairs(&self) -> impl Iterator<Item = (f64, f64)> + '_ {
        self.mu.iter().copied().zip(self.sigma.iter().copied())
    }

    /// `batchnorm.train_input`'s law: per channel `z_k = m x_k / q` (the
    /// mean components), then `(z_k − z′_k)²/2` (the variance components).
    pub(super) fn train_input_law(&self) -> Law {
        let p = self.p;
        let means = self
            .channel_pairs()
            .map(|(mu, sigma)| Draw::DroppedNormal { mu, sigma, p });
        let pairs = self
            .channel_pairs()
            .map(|(mu, sigma)| Draw::DroppedNormalPair { mu, sigma, p });
        Law::Draws {
            components: means.chain(pairs).collect(),
            estimator: Estimator::Mean,
        }
    }

    /// The moving average of `α k₁ + β κ k₂` per batch of channel `(μ, σ)`
    /// in the buffer training (`κ`: [`Config::convention`]).
    pub(super) fn buffer(
        &self,
        mu: f64,
        sigma: f64,
        mean_weight: f64,
        variance_weight: f64,
    ) -> Draw {
        Draw::BatchAverage {
            mu,
            sigma,
            p: self.p,
            batch: self.batch,
            momentum: self.momentum,
            steps: self.steps,
            mean_weight,
            variance_weight: variance_weight * self.convention(),
        }
    }

    /// `batchnorm.running_stats`' law: per channel `rm_t` (the batch
    /// means' moving average), then `rv_t` (the batch variances').
    pub(super) fn running_stats_law(&self) -> Law {
        let means = self
            .channel_pairs()
            .map(|(mu, sigma)| self.buffer(mu, sigma, 1.0, 0.0));
        let variances = self
            .channel_pairs()
            .map(|(mu, sigma)| self.buffer(mu, sigma, 0.0, 1.0));
        Law::Draws {
            components: means.chain(variances).collect(),
            estimator: Estimator::Mean,
        }
    }

    /// `batchnorm.fold_buffers`' law: per channel `q rv_t − p rm_t²`
    /// linearized at `a = E rm_t`, the moving average of `q κ k₂ − 2 p a k₁`
    /// (leading order, as [`BufferTraining::fold_skewness`]).
    pub(super) fn fold_buffers_law(&self) -> Law {
        let p = self.p;
        let components = self
            .channel_pairs()
            .map(|(mu, sigma)| {
                let a = f::ema_expectation(self.steps, self.momentum, 0.0, mu);
                self.buffer(mu, sigma, -2.0 * p * a, 1.0 - p)
            })
            .collect();
        Law::Draws {
            components,
            estimator: Estimator::Mean,
        }
    }

    /// `batchnorm.variance_shift`'s law: every component a clean pair form
    /// `(x − x′)²/2`, `σ²` times a `χ²₁`.
    pub(super) fn variance_shift_law(&self) -> Law {
        Law::repeated(
            Draw::NormalPair,
            self.buffer_sets() * self.channels(),
            Estimator::Mean,
        )
    }
}

/// `batchnorm.li2018`'s law: the pair forms at `p = 0.5`, of the clean
/// input and at `p = 0.1`, and the two ratios clean / dropped, linearized.
pub(super) fn li2018_law() -> Law {
    let dropped = |p| Draw::DroppedNormalPair {
        mu: 0.0,
        sigma: 1.0,
        p,
    };
    let ratio = |p| Draw::LinearizedRatio {
        numerator: Box::new(Draw::NormalPair),
        denominator: Box::new(dropped(p)),
    };
    Law::Draws {
        components: vec![
            dropped(0.5),
            Draw::NormalPair,
            ratio(0.5),
            dropped(0.1),
            ratio(0.1),
        ],
        estimator: Estimator::Mean,
    }
}
