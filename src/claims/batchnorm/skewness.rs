//! The skewness each claim declares, per component, from the exact
//! moments of its statistic (dropped-out Gaussian channels, one batch's
//! cumulants, their moving averages).

use super::Config;
use crate::formulas::batchnorm as f;
use crate::stats::{
    BatchCumulants, CentralMoments, dropped_raw_moments, ema_skewness, linearized_ratio_skewness,
    normal_raw_moments,
};

/// The central moments of one dropped-out example's channel
/// `z = m x / q`, `x ~ N(μ, σ²)`, `m ~ Bernoulli(q)` (closed form:
/// [`dropped_raw_moments`] of [`normal_raw_moments`]).
pub(super) fn dropped_channel(mu: f64, sigma: f64, p: f64) -> CentralMoments {
    let raw = normal_raw_moments(mu, sigma * sigma);
    CentralMoments::from_raw(dropped_raw_moments(raw, 1.0 - p))
}

/// `batchnorm.train_input`: per channel the skewness of `z_k` (the mean
/// components), then of `(z_k − z′_k)²/2` (the variance components). At
/// the family's channel 0 (`μ = 0`, `σ = 1`, `p = 0.3`) the pair form's is
/// 3.44, above the default 2√2.
pub(super) fn train_input_skewness(config: &Config) -> Vec<f64> {
    let channels: Vec<_> = config
        .mu
        .iter()
        .zip(&config.sigma)
        .map(|(&m, &s)| dropped_channel(m, s, config.p))
        .collect();
    let means = channels.iter().map(|c| c.skewness());
    means
        .chain(channels.iter().map(|c| c.pair_form_skewness()))
        .collect()
}

/// `batchnorm.li2018`, per component: the pair forms at `p = 0.5` (3.97),
/// of the clean input (`χ²₁`, 2√2) and at `p = 0.1` (3.02), and the two
/// ratios' linearizations ([`linearized_ratio_skewness`], leading order).
pub(super) fn li2018_skewness() -> Vec<f64> {
    let half = dropped_channel(0.0, 1.0, 0.5).pair_form_cumulants();
    let clean = CentralMoments::from_raw(normal_raw_moments(0.0, 1.0)).pair_form_cumulants();
    let tenth = dropped_channel(0.0, 1.0, 0.1).pair_form_cumulants();
    let skew = |c: [f64; 3]| c[2] / c[1].powf(1.5);
    vec![
        skew(half),
        skew(clean),
        linearized_ratio_skewness(clean, half),
        skew(tenth),
        linearized_ratio_skewness(clean, tenth),
    ]
}

/// The buffers' training configuration: channels `N(μ_k, σ_k²)` dropped at
/// `p`, batches of `batch`, `steps` updates at `momentum` from PyTorch's
/// initial buffers (`rm = 0`), the running variance fed `variance_scale`
/// times the unbiased batch variance (1 unbiased, `(B − 1)/B` biased).
#[derive(Debug, Clone, Copy)]
pub struct BufferTraining<'a> {
    pub mu: &'a [f64],
    pub sigma: &'a [f64],
    pub p: f64,
    pub batch: usize,
    pub steps: u32,
    pub momentum: f64,
    pub variance_scale: f64,
}

impl BufferTraining<'_> {
    /// Per channel, the joint cumulants of one batch's mean and unbiased
    /// variance of dropped-out examples ([`BatchCumulants::of_batch`]);
    /// `None` for a batch of one.
    pub(super) fn batch_cumulants(&self) -> Option<Vec<BatchCumulants>> {
        self.mu
            .iter()
            .zip(self.sigma)
            .map(|(&m, &s)| BatchCumulants::of_batch(&dropped_channel(m, s, self.p), self.batch))
            .collect()
    }

    /// The skewness of a moving average of `α k₁ + β k₂` per batch.
    pub(super) fn averaged(&self, one_batch: &BatchCumulants, alpha: f64, beta: f64) -> f64 {
        ema_skewness(
            one_batch.combination_skewness(alpha, beta),
            self.momentum,
            self.steps,
        )
    }

    /// `rm_t` then `rv_t` per channel: moving averages of the batch means
    /// and (scaled) unbiased batch variances ([`ema_skewness`] of the
    /// one-batch skewness), exact. At the family's channel 0 the variance
    /// buffer's is 0.27 (one batch's 0.87, times `Σ w³/(Σ w²)^{3/2} = 0.31`
    /// over 30 batches). Empty for a batch of one.
    pub fn running_stats_skewness(&self) -> Vec<f64> {
        let Some(one_batch) = self.batch_cumulants() else {
            return Vec::new();
        };
        let means = one_batch.iter().map(|c| self.averaged(c, 1.0, 0.0));
        let variances = one_batch.iter().map(|c| self.averaged(c, 0.0, 1.0));
        means.chain(variances).collect()
    }

    /// Per channel, the folded variance `q rv_t − p rm_t²` linearized at
    /// `a = E rm_t`: `q rv_t − 2 p a rm_t + const`, a moving average of
    /// `q s k₂ − 2 p a k₁` per batch (`s` the variance scale). Leading order:
    /// the curvature `−p (rm_t − a)²`, whose standard deviation is 1.9–2.9 %
    /// of the linear part's over the family's three channels, is left out
    /// (as the ratios of `li2018` are linearized). Empty for a batch of one.
    pub fn fold_skewness(&self) -> Vec<f64> {
        let Some(one_batch) = self.batch_cumulants() else {
            return Vec::new();
        };
        let q = 1.0 - self.p;
        one_batch
            .iter()
            .zip(self.mu)
            .map(|(c, &mu)| {
                let a = f::ema_expectation(self.steps, self.momentum, 0.0, mu);
                self.averaged(c, -2.0 * self.p * a, q * self.variance_scale)
            })
            .collect()
    }
}

impl Config {
    /// The buffers' training, for the skewness of their statistics.
    pub(super) fn training(&self) -> BufferTraining<'_> {
        BufferTraining {
            mu: &self.mu,
            sigma: &self.sigma,
            p: self.p,
            batch: self.batch,
            steps: self.steps,
            momentum: self.momentum,
            variance_scale: self.convention(),
        }
    }
}
