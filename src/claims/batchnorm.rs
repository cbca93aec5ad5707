//! The BatchNorm family: the training input's moments, the running buffers
//! after a finite number of batches, the fold, the variance shift `Δ = c²`
//! and Li et al. (2018)'s case. Derivations: [`crate::formulas::batchnorm`].
//!
//! Every estimator runs the crate's [`BatchNorm`] op and the subject's
//! dropout layer on Gaussian channels `x_k ~ N(μ_k, σ_k²)` (the formulas do
//! not depend on the shape of the data's distribution; Gaussian data is just
//! convenient to draw).
//!
//! # Why this family has no fast estimator
//!
//! The fast path ([`crate::ops::fast`]) serves quantities that are functions of
//! masked sums of a *fixed* vector: it tabulates `Σ_k m_k c_k` once and then
//! pays one look-up per 8 units per mask. Here the input is a fresh Gaussian
//! example on every draw, so there is no fixed column to tabulate: every
//! element needs its own normal draw anyway, and a bit mask would replace
//! only the cheap half of the per-element work (the keep decision). The
//! buffer claims are, in addition, nonlinear in the whole batch (an
//! unbiased batch variance per step, then 30 EMA updates), and the
//! variance-shift claim draws no mask at all. So every claim here keeps the
//! generic path, on the mathematics too.

use nalgebra::DMatrix;
use rand_distr::{Distribution, StandardNormal};

use super::fn_claim::{DrawFn, half_squared_difference, sample_means};
use super::listed;
use super::{Card, Claim, Shape};
use crate::engine::{Budget, Stream};
use crate::error::Error;
use crate::formulas::batchnorm as f;
use crate::ops::{BatchNorm, Rate, Subject, TrainPass};
use crate::stats::{
    BatchCumulants, CentralMoments, DEFAULT_SKEWNESS, Estimate, Statistic, dropped_raw_moments,
    ema_skewness, linearized_ratio_skewness, normal_raw_moments,
};

/// Channel means of the family's configuration (a zero, a positive and a
/// large negative mean, so `c` takes three different values).
pub const MU: [f64; 3] = [0.0, 1.0, -2.0];
/// Channel standard deviations.
pub const SIGMA: [f64; 3] = [1.0, 0.5, 1.5];
/// Drop rate of the family's configuration.
pub const P: f64 = 0.3;
/// Batch size of the buffer claims.
pub const BATCH: usize = 16;
/// Train-mode batches the buffer claims run from PyTorch's initial buffers.
pub const STEPS: u32 = 30;
/// PyTorch's default momentum.
pub const MOMENTUM: f64 = 0.1;

/// Draws the `K` channels of one clean example into `x`.
fn draw_clean(rng: &mut Stream, mu: &[f64], sigma: &[f64], x: &mut [f64]) {
    for ((v, m), s) in x.iter_mut().zip(mu).zip(sigma) {
        let n: f64 = StandardNormal.sample(rng);
        *v = m + s * n;
    }
}

/// One dropped-out example: clean draw, then the subject's training pass.
fn draw_dropped(
    subject: &Subject,
    rng: &mut Stream,
    mu: &[f64],
    sigma: &[f64],
    p: f64,
    out: &mut [f64],
) -> Result<(), Error> {
    let mut x = vec![0.0; mu.len()];
    let mut mask = vec![false; mu.len()];
    draw_clean(rng, mu, sigma, &mut x);
    subject
        .dropout
        .forward_train(TrainPass::new(&x, out, &mut mask), p, rng)
}

/// The buffer refresh: runs `steps` train-mode batches of dropped-out
/// examples through a fresh BatchNorm with PyTorch's defaults, which sets
/// its running statistics the way training would, and returns it.
pub fn refresh_buffers(
    subject: &Subject,
    rng: &mut Stream,
    mu: &[f64],
    sigma: &[f64],
    p: f64,
    batch: usize,
    steps: u32,
) -> Result<BatchNorm, Error> {
    let k = mu.len();
    let mut bn = BatchNorm::new(k)?.with_momentum(MOMENTUM)?;
    let mut data = DMatrix::zeros(k, batch);
    for _ in 0..steps {
        for col in data.as_mut_slice().chunks_exact_mut(k) {
            draw_dropped(subject, rng, mu, sigma, p, col)?;
        }
        bn.forward_train(&data)?;
    }
    Ok(bn)
}

/// A claim of this family.
pub struct BnClaim {
    pub id: &'static str,
    pub formula: &'static str,
    pub samples: u64,
    pub analytic: fn() -> Result<Vec<f64>, Error>,
    pub draw: DrawFn,
    /// Turns the raw means into the claimed quantities (identity for most).
    pub post: Option<fn(Vec<Estimate>) -> Vec<Estimate>>,
    /// Raw statistics per draw (before `post`).
    pub raw_dim: usize,
    /// Per claimed component, the skewness of the statistic its estimate
    /// averages, from the exact moments ([`crate::stats::CentralMoments`],
    /// [`BatchCumulants`]); the claim's mean test declares the largest.
    pub skewness: fn() -> Vec<f64>,
}

impl Claim for BnClaim {
    /// Every claim of this family is per channel (or per component of its
    /// post-processed vector) and tests a mean, with the largest skewness
    /// of its components.
    fn card(&self) -> Card {
        let card = Card::new(
            self.id,
            "batchnorm",
            self.formula,
            Shape::Vector,
            self.samples,
        );
        card.with_statistic(Statistic::Mean {
            skewness: (self.skewness)()
                .into_iter()
                .fold(0.0_f64, |m, g| m.max(g.abs())),
        })
    }
    fn analytic(&self) -> Result<Vec<f64>, Error> {
        (self.analytic)()
    }
    fn estimate(&self, subject: &Subject, budget: Budget) -> Result<Vec<Estimate>, Error> {
        let raw = sample_means(subject, budget, self.raw_dim, self.draw)?;
        Ok(match self.post {
            Some(post) => post(raw),
            None => raw,
        })
    }
}

fn rate() -> Result<Rate, Error> {
    Rate::new(P)
}

fn per_channel(g: impl Fn(f64, f64) -> Result<f64, Error>) -> Result<Vec<f64>, Error> {
    MU.iter().zip(&SIGMA).map(|(&m, &s)| g(m, s)).collect()
}

fn eval_one(bn: &BatchNorm, x: &[f64]) -> Result<Vec<f64>, Error> {
    let y = bn.forward_eval(&DMatrix::from_column_slice(x.len(), 1, x))?;
    Ok(y.as_slice().to_vec())
}

/// The ratio `a / b` of two estimates made from independent random numbers,
/// with the delta-method standard error
/// `sqrt((se_a / b)² + (a se_b / b²)²)` (their covariance is zero).
pub fn independent_ratio(a: Estimate, b: Estimate) -> Estimate {
    let value = a.value / b.value;
    let (ra, rb) = (a.stderr / b.value, value * b.stderr / b.value);
    let stderr = (ra * ra + rb * rb).sqrt();
    Estimate {
        value,
        stderr,
        n: a.n.min(b.n),
        dof: a.dof.min(b.dof),
    }
}

/// The central moments of one dropped-out example's channel
/// `z = m x / q`, `x ~ N(μ, σ²)`, `m ~ Bernoulli(q)` (closed form:
/// [`dropped_raw_moments`] of [`normal_raw_moments`]).
fn dropped_channel(mu: f64, sigma: f64, p: f64) -> CentralMoments {
    let raw = normal_raw_moments(mu, sigma * sigma);
    CentralMoments::from_raw(dropped_raw_moments(raw, 1.0 - p))
}

/// `batchnorm.train_input`: per channel the skewness of `z_k` (the mean
/// components), then of `(z_k − z′_k)²/2` (the variance components). At
/// channel 0 (`μ = 0`, `σ = 1`, `p = 0.3`) the pair form's is 3.44, above
/// the default 2√2.
fn train_input_skewness() -> Vec<f64> {
    let channels: Vec<_> = MU
        .iter()
        .zip(&SIGMA)
        .map(|(&m, &s)| dropped_channel(m, s, P))
        .collect();
    let means = channels.iter().map(|c| c.skewness());
    means
        .chain(channels.iter().map(|c| c.pair_form_skewness()))
        .collect()
}

/// `batchnorm.li2018`, per component: the pair forms at `p = 0.5` (3.97),
/// of the clean input (`χ²₁`, 2√2) and at `p = 0.1` (3.02), and the two
/// ratios' linearizations ([`linearized_ratio_skewness`], leading order).
fn li2018_skewness() -> Vec<f64> {
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
    fn batch_cumulants(&self) -> Option<Vec<BatchCumulants>> {
        self.mu
            .iter()
            .zip(self.sigma)
            .map(|(&m, &s)| BatchCumulants::of_batch(&dropped_channel(m, s, self.p), self.batch))
            .collect()
    }

    /// The skewness of a moving average of `α k₁ + β k₂` per batch.
    fn averaged(&self, one_batch: &BatchCumulants, alpha: f64, beta: f64) -> f64 {
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

/// The family's own buffer training (PyTorch's unbiased running variance).
fn family_training() -> BufferTraining<'static> {
    BufferTraining {
        mu: &MU,
        sigma: &SIGMA,
        p: P,
        batch: BATCH,
        steps: STEPS,
        momentum: MOMENTUM,
        variance_scale: 1.0,
    }
}

static CLAIMS: std::sync::LazyLock<Vec<BnClaim>> = std::sync::LazyLock::new(|| {
    let k = MU.len();
    vec![
        BnClaim {
            id: "batchnorm.train_input",
            formula: "E[z_k] = mu_k; Var z_k = (sigma_k^2 + p mu_k^2)/q",
            samples: 1_000_000,
            analytic: || {
                let r = rate()?;
                let mut v = MU.to_vec();
                v.extend(per_channel(|m, s| Ok(f::train_variance(m, s * s, r)))?);
                Ok(v)
            },
            draw: |subject, rng, out| {
                let k = MU.len();
                let (mut z, mut z_alt) = (vec![0.0; k], vec![0.0; k]);
                draw_dropped(subject, rng, &MU, &SIGMA, P, &mut z)?;
                draw_dropped(subject, rng, &MU, &SIGMA, P, &mut z_alt)?;
                for j in 0..k {
                    out[j] = z[j];
                    out[k + j] = 0.5 * (z[j] - z_alt[j]) * (z[j] - z_alt[j]);
                }
                Ok(())
            },
            post: None,
            raw_dim: 2 * k,
            skewness: train_input_skewness,
        },
        BnClaim {
            id: "batchnorm.running_stats",
            formula: "E[rm_t], E[rv_t] = (1-m)^t (0, 1) + (1-(1-m)^t) (mu_k, Var z_k)",
            // Far above the minimum budget its declared skewness gives.
            samples: 40_000,
            analytic: || {
                let r = rate()?;
                let mut v = per_channel(|m, _| Ok(f::ema_expectation(STEPS, MOMENTUM, 0.0, m)))?;
                v.extend(per_channel(|m, s| {
                    Ok(f::ema_expectation(
                        STEPS,
                        MOMENTUM,
                        1.0,
                        f::train_variance(m, s * s, r),
                    ))
                })?);
                Ok(v)
            },
            draw: |subject, rng, out| {
                let bn = refresh_buffers(subject, rng, &MU, &SIGMA, P, BATCH, STEPS)?;
                let k = MU.len();
                out[..k].copy_from_slice(bn.running_mean());
                out[k..].copy_from_slice(bn.running_var());
                Ok(())
            },
            post: None,
            raw_dim: 2 * k,
            skewness: || family_training().running_stats_skewness(),
        },
        BnClaim {
            id: "batchnorm.fold_buffers",
            formula: "E[q rv_t - p rm_t^2] = q E[rv_t] - p (E[rm_t]^2 + Var rm_t)",
            // Far above the minimum budget its declared skewness gives.
            samples: 40_000,
            analytic: || {
                let r = rate()?;
                per_channel(|m, s| {
                    Ok(f::expected_folded_var(
                        STEPS,
                        MOMENTUM,
                        m,
                        s * s,
                        r,
                        BATCH,
                        (0.0, 1.0),
                    ))
                })
            },
            draw: |subject, rng, out| {
                let mut bn = refresh_buffers(subject, rng, &MU, &SIGMA, P, BATCH, STEPS)?;
                bn.fold_dropout(P)?;
                out.copy_from_slice(bn.running_var());
                Ok(())
            },
            post: None,
            raw_dim: k,
            skewness: || family_training().fold_skewness(),
        },
        BnClaim {
            id: "batchnorm.variance_shift",
            formula: "eval, buffers trained after dropout: Var[BN(x)_k|rv] (rv_k+eps)/sigma_k^2 = 1; folded 1",
            // At least the mean test's minimum budget (37 490); the
            // statistic is exactly chi-square(1), skewness 2√2 (declared).
            samples: 40_000,
            analytic: || Ok(vec![1.0; 2 * MU.len()]),
            draw: |subject, rng, out| {
                // Buffers trained through the subject's own dropout, as in
                // `batchnorm.running_stats`; then the eval-mode op on two
                // clean examples. Given the buffers, eval BN is affine,
                // y_k = (x_k − rm_k) / √(rv_k + ε), so ½ (y_k − y'_k)² has
                // mean σ_k² / (rv_k + ε) exactly, whatever the buffers: the
                // ratio below has mean 1 for the unfolded and the folded
                // buffers alike. At the stationary rv = (σ² + p μ²)/q it is
                // the shift Δ = c² of `formulas::batchnorm::c_squared`.
                let k = MU.len();
                let bn = refresh_buffers(subject, rng, &MU, &SIGMA, P, BATCH, STEPS)?;
                let mut folded = bn.clone();
                folded.fold_dropout(P)?;
                let (mut x, mut x_alt) = (vec![0.0; k], vec![0.0; k]);
                draw_clean(rng, &MU, &SIGMA, &mut x);
                draw_clean(rng, &MU, &SIGMA, &mut x_alt);
                for (offset, layer) in [(0, &bn), (k, &folded)] {
                    let (y, y_alt) = (eval_one(layer, &x)?, eval_one(layer, &x_alt)?);
                    for j in 0..k {
                        let d = y[j] - y_alt[j];
                        let scale = (layer.running_var()[j] + layer.eps()) / (SIGMA[j] * SIGMA[j]);
                        out[offset + j] = 0.5 * d * d * scale;
                    }
                }
                Ok(())
            },
            post: None,
            raw_dim: 2 * k,
            // Given the buffers, ½ (x − x′)²/σ_k² exactly: χ²₁ (comment in
            // `draw`), skewness 2√2 for every component.
            skewness: || vec![DEFAULT_SKEWNESS; 2 * MU.len()],
        },
        BnClaim {
            id: "batchnorm.li2018",
            formula: "Li 2018, x~N(0,1): Var_train = 1/q, Var_eval = 1, Delta = q (q = .5, .9)",
            samples: 1_000_000,
            analytic: || Ok(vec![2.0, 1.0, 0.5, 1.0 / 0.9, 0.9]),
            draw: |subject, rng, out| {
                let mut v = [[0.0]; 6];
                for (i, p) in [0.5, 0.5, 0.1, 0.1].into_iter().enumerate() {
                    draw_dropped(subject, rng, &[0.0], &[1.0], p, &mut v[i])?;
                }
                draw_clean(rng, &[0.0], &[1.0], &mut v[4]);
                draw_clean(rng, &[0.0], &[1.0], &mut v[5]);
                out[0] = half_squared_difference(v[0][0], v[1][0]);
                out[1] = half_squared_difference(v[4][0], v[5][0]);
                out[2] = half_squared_difference(v[2][0], v[3][0]);
                Ok(())
            },
            // Δ = eval variance / train variance; numerator and denominator
            // come from disjoint random numbers, so each ratio's error is
            // the independent one.
            post: Some(|raw| {
                vec![
                    raw[0],
                    raw[1],
                    independent_ratio(raw[1], raw[0]),
                    raw[2],
                    independent_ratio(raw[1], raw[2]),
                ]
            }),
            raw_dim: 3,
            skewness: li2018_skewness,
        },
    ]
});

/// The family's claims in report order (named and described in
/// [`super::families`]).
pub fn claims() -> Vec<&'static dyn Claim> {
    listed(&CLAIMS)
}
