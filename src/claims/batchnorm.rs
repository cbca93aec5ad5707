//! The BatchNorm family: the training input's moments, the running buffers
//! after a finite number of batches, the fold, the variance shift `Δ = c²`
//! and Li et al. (2018)'s case, built from a configuration by [`at`] (the
//! registry's list is [`at`] [`Config::family`]). Derivations:
//! [`crate::formulas::batchnorm`].
//!
//! The buffer and eval claims state what one *replicate* shows — a fresh
//! BatchNorm trained on `steps` batches of dropped-out examples, then run
//! in eval mode on two clean examples ([`Replicate`]) — so the Python
//! binding runs them on the user's BatchNorm: it hands each replicate of
//! the user's layer to [`BnClaim::replicate_statistic`].
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

use super::fn_claim::{half_squared_difference, sample_means};
use super::listed;
use super::{Card, Claim, Draw, Estimator, Law, Shape};
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
    config: &Config,
) -> Result<BatchNorm, Error> {
    let k = config.mu.len();
    let mut bn = BatchNorm::new(k)?.with_momentum(config.momentum)?;
    let mut data = DMatrix::zeros(k, config.batch);
    for _ in 0..config.steps {
        for col in data.as_mut_slice().chunks_exact_mut(k) {
            draw_dropped(subject, rng, &config.mu, &config.sigma, config.p, col)?;
        }
        bn.forward_train(&data)?;
    }
    Ok(bn)
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
/// the family's channel 0 (`μ = 0`, `σ = 1`, `p = 0.3`) the pair form's is
/// 3.44, above the default 2√2.
fn train_input_skewness(config: &Config) -> Vec<f64> {
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

/// The configuration the claims are stated at: channels `N(μ_k, σ_k²)`
/// dropped at `p`, batches of `batch`, `steps` train-mode updates at
/// `momentum` (PyTorch's convention) from PyTorch's initial buffers
/// `(0, 1)`, the running variance fed the unbiased (PyTorch) or biased
/// batch variance.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub mu: Vec<f64>,
    pub sigma: Vec<f64>,
    pub p: f64,
    pub batch: usize,
    pub steps: u32,
    pub momentum: f64,
    /// Whether the running variance takes the unbiased batch variance.
    pub unbiased: bool,
    /// Whether the eval claim also runs the buffers folded
    /// ([`BatchNorm::fold_dropout`]): dropmc folds its own BatchNorm; a
    /// user's layer is run with the buffers it trained.
    pub folded_eval: bool,
}

impl Config {
    /// The family's configuration ([`MU`], [`SIGMA`], [`P`], [`BATCH`],
    /// [`STEPS`], [`MOMENTUM`]; the crate's BatchNorm keeps PyTorch's
    /// unbiased running variance, and is also run folded).
    pub fn family() -> Config {
        Config {
            mu: MU.to_vec(),
            sigma: SIGMA.to_vec(),
            p: P,
            batch: BATCH,
            steps: STEPS,
            momentum: MOMENTUM,
            unbiased: true,
            folded_eval: true,
        }
    }

    /// Channels `K`.
    pub fn channels(&self) -> usize {
        self.mu.len()
    }

    fn rate(&self) -> Result<Rate, Error> {
        Rate::new(self.p)
    }

    /// `κ = E[u_t] / v_k`: 1 for the unbiased batch variance, `(B − 1)/B`
    /// for the biased one.
    pub fn convention(&self) -> f64 {
        if self.unbiased {
            1.0
        } else {
            (self.batch as f64 - 1.0) / self.batch as f64
        }
    }

    /// `v_k = (σ_k² + p μ_k²)/q` per channel.
    pub fn train_variances(&self) -> Result<Vec<f64>, Error> {
        let rate = self.rate()?;
        Ok(self
            .mu
            .iter()
            .zip(&self.sigma)
            .map(|(&m, &s)| f::train_variance(m, s * s, rate))
            .collect())
    }

    /// `E[rm_t]` per channel, from PyTorch's initial 0.
    pub fn expected_running_mean(&self) -> Vec<f64> {
        self.mu
            .iter()
            .map(|&m| f::ema_expectation(self.steps, self.momentum, 0.0, m))
            .collect()
    }

    /// `E[rv_t]` per channel, from PyTorch's initial 1.
    pub fn expected_running_var(&self) -> Result<Vec<f64>, Error> {
        let kappa = self.convention();
        Ok(self
            .train_variances()?
            .iter()
            .map(|&v| f::ema_expectation(self.steps, self.momentum, 1.0, kappa * v))
            .collect())
    }

    /// `E[q rv_t − p rm_t²] = q E[rv_t] − p (E[rm_t]² + Var rm_t)` per
    /// channel (`Var rm_t` does not depend on the variance convention).
    pub fn expected_fold(&self) -> Result<Vec<f64>, Error> {
        let rate = self.rate()?;
        let (p, q) = (rate.p(), rate.q());
        let rm = self.expected_running_mean();
        let rv = self.expected_running_var()?;
        let v = self.train_variances()?;
        Ok((0..self.channels())
            .map(|k| {
                let var_rm = f::running_mean_variance(self.steps, self.momentum, v[k], self.batch);
                q * rv[k] - p * (rm[k] * rm[k] + var_rm)
            })
            .collect())
    }

    /// The buffers' training, for the skewness of their statistics.
    fn training(&self) -> BufferTraining<'_> {
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

    /// Buffer sets the eval claim runs: the trained one, and the folded one
    /// when [`Config::folded_eval`].
    fn buffer_sets(&self) -> usize {
        if self.folded_eval { 2 } else { 1 }
    }
}

/// One replicate: a BatchNorm's buffers after training on dropped-out
/// batches, channel `k` at index `k`, and its eval outputs on two clean
/// examples `x, x'` (empty where a claim reads the buffers only).
#[derive(Debug, Clone, Copy)]
pub struct Replicate<'a> {
    pub running_mean: &'a [f64],
    pub running_var: &'a [f64],
    /// The eval outputs of the two clean examples.
    pub y: [&'a [f64]; 2],
    /// The layer's `ε`.
    pub eps: f64,
}

impl<'a> Replicate<'a> {
    /// The buffers of `bn` (no eval outputs).
    fn buffers_of(bn: &'a BatchNorm) -> Replicate<'a> {
        Replicate {
            running_mean: bn.running_mean(),
            running_var: bn.running_var(),
            y: [&[], &[]],
            eps: bn.eps(),
        }
    }
}

/// What one BatchNorm claim states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantity {
    /// `E[z_k] = μ_k`, `Var z_k = (σ_k² + p μ_k²)/q`.
    TrainInput,
    /// The running buffers' expectations after `t` batches.
    RunningStats,
    /// The folded variance's expectation.
    FoldBuffers,
    /// Given the buffers, the eval output's variance ratio is 1.
    VarianceShift,
    /// Li et al. (2018)'s case at `x ~ N(0, 1)`, whatever the configuration.
    Li2018,
}

impl Quantity {
    /// Every quantity, in report order.
    pub const ALL: [Quantity; 5] = [
        Quantity::TrainInput,
        Quantity::RunningStats,
        Quantity::FoldBuffers,
        Quantity::VarianceShift,
        Quantity::Li2018,
    ];

    /// The claim's id.
    pub fn id(self) -> &'static str {
        match self {
            Quantity::TrainInput => "batchnorm.train_input",
            Quantity::RunningStats => "batchnorm.running_stats",
            Quantity::FoldBuffers => "batchnorm.fold_buffers",
            Quantity::VarianceShift => "batchnorm.variance_shift",
            Quantity::Li2018 => "batchnorm.li2018",
        }
    }

    /// The statement, true at every configuration.
    pub fn formula(self) -> &'static str {
        match self {
            Quantity::TrainInput => "E[z_k] = mu_k; Var z_k = (sigma_k^2 + p mu_k^2)/q",
            Quantity::RunningStats => {
                "E[rm_t], E[rv_t] = (1-m)^t (0, 1) + (1-(1-m)^t) (mu_k, kappa Var z_k), kappa = 1 unbiased, (B-1)/B biased"
            }
            Quantity::FoldBuffers => "E[q rv_t - p rm_t^2] = q E[rv_t] - p (E[rm_t]^2 + Var rm_t)",
            Quantity::VarianceShift => {
                "eval, given the buffers: E[(y_k - y'_k)^2/2 (rv_k + eps)/sigma_k^2] = 1 (Delta = c^2 at E[rv])"
            }
            Quantity::Li2018 => {
                "Li 2018, x~N(0,1): Var_train = 1/q, Var_eval = 1, Delta = q (q = .5, .9)"
            }
        }
    }

    /// Draws at the default budget, before the statistic's minimum: the
    /// replicate claims ([`REPLICATES`]) are far above the minimum budget
    /// their declared skewness gives; the single-example ones are cheap.
    fn base_samples(self) -> u64 {
        match self {
            Quantity::TrainInput | Quantity::Li2018 => 1_000_000,
            Quantity::RunningStats | Quantity::FoldBuffers | Quantity::VarianceShift => REPLICATES,
        }
    }

    /// Whether its statistic is one of a [`Replicate`]'s.
    pub fn reads_replicates(self) -> bool {
        matches!(
            self,
            Quantity::RunningStats | Quantity::FoldBuffers | Quantity::VarianceShift
        )
    }
}

/// Replicates of each claim on trained buffers at the default budget (at
/// least the mean test's minimum of 37 490 at the skewness 2√2).
pub const REPLICATES: u64 = 40_000;

/// The budget of a replicate claim declaring `statistic`: [`REPLICATES`],
/// or the statistic's minimum if higher.
pub fn replicate_budget(statistic: Statistic) -> u64 {
    REPLICATES.max(statistic.min_samples())
}

/// One BatchNorm claim at a configuration (it owns it).
#[derive(Debug, Clone)]
pub struct BnClaim {
    /// What it states.
    pub quantity: Quantity,
    /// The configuration it is stated at.
    pub config: Config,
}

/// The family's claims at `config`, in report order.
pub fn at(config: &Config) -> Vec<BnClaim> {
    Quantity::ALL
        .into_iter()
        .map(|quantity| BnClaim {
            quantity,
            config: config.clone(),
        })
        .collect()
}

impl BnClaim {
    /// Per claimed component, the skewness of the statistic its estimate
    /// averages, from the exact moments ([`crate::stats::CentralMoments`],
    /// [`BatchCumulants`]).
    pub fn skewness(&self) -> Vec<f64> {
        let c = &self.config;
        match self.quantity {
            Quantity::TrainInput => train_input_skewness(c),
            Quantity::RunningStats => c.training().running_stats_skewness(),
            Quantity::FoldBuffers => c.training().fold_skewness(),
            // Given the buffers, ½ (x − x′)²/σ_k² exactly: χ²₁ (see
            // `variance_ratio`), skewness 2√2 for every component.
            Quantity::VarianceShift => vec![DEFAULT_SKEWNESS; c.buffer_sets() * c.channels()],
            Quantity::Li2018 => li2018_skewness(),
        }
    }

    /// The statistic its test declares: every claim of this family tests a
    /// mean, with the largest skewness of its components.
    pub fn statistic(&self) -> Statistic {
        Statistic::Mean {
            skewness: self
                .skewness()
                .into_iter()
                .fold(0.0_f64, |m, g| m.max(g.abs())),
        }
    }

    /// The closed form at the configuration.
    pub fn closed_form(&self) -> Result<Vec<f64>, Error> {
        let c = &self.config;
        Ok(match self.quantity {
            Quantity::TrainInput => {
                let mut v = c.mu.clone();
                v.extend(c.train_variances()?);
                v
            }
            Quantity::RunningStats => {
                let mut v = c.expected_running_mean();
                v.extend(c.expected_running_var()?);
                v
            }
            Quantity::FoldBuffers => c.expected_fold()?,
            Quantity::VarianceShift => vec![1.0; c.buffer_sets() * c.channels()],
            Quantity::Li2018 => vec![2.0, 1.0, 0.5, 1.0 / 0.9, 0.9],
        })
    }

    /// The statistic of one replicate's buffer sets (`sets[0]` as trained,
    /// `sets[1]` folded where [`Config::folded_eval`]): the buffers
    /// `(rm, rv)` ([`Quantity::RunningStats`]), the fold `q rv − p rm²`
    /// ([`Quantity::FoldBuffers`]), or per set the variance ratio
    /// ([`Quantity::VarianceShift`]). The other claims do not read
    /// replicates and leave `out` as it is.
    pub fn replicate_statistic(&self, sets: &[Replicate], out: &mut [f64]) -> Result<(), Error> {
        let k = self.config.channels();
        let trained = &sets[0];
        match self.quantity {
            Quantity::RunningStats => {
                out[..k].copy_from_slice(trained.running_mean);
                out[k..].copy_from_slice(trained.running_var);
            }
            Quantity::FoldBuffers => {
                let rate = self.config.rate()?;
                for ((o, &rm), &rv) in out
                    .iter_mut()
                    .zip(trained.running_mean)
                    .zip(trained.running_var)
                {
                    *o = f::sigma2_from_buffers(rm, rv, rate);
                }
            }
            Quantity::VarianceShift => {
                for (set, out) in sets.iter().zip(out.chunks_exact_mut(k)) {
                    variance_ratio(set, &self.config.sigma, out);
                }
            }
            Quantity::TrainInput | Quantity::Li2018 => {}
        }
        Ok(())
    }

    /// The card, with the budget of its quantity (or its statistic's
    /// minimum, if higher).
    fn card_of(&self) -> Card {
        let statistic = self.statistic();
        let samples = self.quantity.base_samples().max(statistic.min_samples());
        Card::new(
            self.quantity.id(),
            "batchnorm",
            self.quantity.formula(),
            Shape::Vector,
            samples,
        )
        .with_statistic(statistic)
    }

    /// One draw of the statistic on the crate's BatchNorm and the subject's
    /// dropout.
    fn draw(&self, subject: &Subject, rng: &mut Stream, out: &mut [f64]) -> Result<(), Error> {
        let c = &self.config;
        match self.quantity {
            Quantity::TrainInput => train_input_draw(subject, rng, c, out),
            Quantity::RunningStats | Quantity::FoldBuffers => {
                let bn = refresh_buffers(subject, rng, c)?;
                self.replicate_statistic(&[Replicate::buffers_of(&bn)], out)
            }
            Quantity::VarianceShift => self.variance_shift_draw(subject, rng, out),
            Quantity::Li2018 => li2018_draw(subject, rng, out),
        }
    }

    /// Buffers trained through the subject's own dropout, as in
    /// `batchnorm.running_stats`, folded too where the configuration says
    /// so; then the eval-mode op of each on two clean examples.
    fn variance_shift_draw(
        &self,
        subject: &Subject,
        rng: &mut Stream,
        out: &mut [f64],
    ) -> Result<(), Error> {
        let c = &self.config;
        let k = c.channels();
        let mut layers = vec![refresh_buffers(subject, rng, c)?];
        if c.folded_eval {
            let mut folded = layers[0].clone();
            folded.fold_dropout(c.p)?;
            layers.push(folded);
        }
        let (mut x, mut x_alt) = (vec![0.0; k], vec![0.0; k]);
        draw_clean(rng, &c.mu, &c.sigma, &mut x);
        draw_clean(rng, &c.mu, &c.sigma, &mut x_alt);
        let outputs = layers
            .iter()
            .map(|layer| Ok([eval_one(layer, &x)?, eval_one(layer, &x_alt)?]))
            .collect::<Result<Vec<_>, Error>>()?;
        let sets: Vec<Replicate> = layers
            .iter()
            .zip(&outputs)
            .map(|(layer, [y, y_alt])| Replicate {
                y: [y.as_slice(), y_alt.as_slice()],
                ..Replicate::buffers_of(layer)
            })
            .collect();
        self.replicate_statistic(&sets, out)
    }

    /// Raw statistics per draw (before [`li2018_ratios`]).
    fn raw_dim(&self) -> usize {
        let k = self.config.channels();
        match self.quantity {
            Quantity::TrainInput | Quantity::RunningStats => 2 * k,
            Quantity::FoldBuffers => k,
            Quantity::VarianceShift => self.config.buffer_sets() * k,
            Quantity::Li2018 => 3,
        }
    }
}

/// Per channel, given the buffers: eval BN is affine,
/// `y_k = (x_k − rm_k) / √(rv_k + ε)`, so `½ (y_k − y'_k)² (rv_k + ε)/σ_k²`
/// has mean 1 exactly, whatever the buffers (trained or folded). At the
/// stationary `rv = (σ² + p μ²)/q` the unscaled variance is the shift
/// `Δ = c²` of [`f::c_squared`].
fn variance_ratio(set: &Replicate, sigma: &[f64], out: &mut [f64]) {
    for (j, o) in out.iter_mut().enumerate() {
        let d = set.y[0][j] - set.y[1][j];
        let scale = (set.running_var[j] + set.eps) / (sigma[j] * sigma[j]);
        *o = 0.5 * d * d * scale;
    }
}

/// `batchnorm.train_input`: two dropped-out examples, the first's channels
/// then their pair forms.
fn train_input_draw(
    subject: &Subject,
    rng: &mut Stream,
    c: &Config,
    out: &mut [f64],
) -> Result<(), Error> {
    let k = c.channels();
    let (mut z, mut z_alt) = (vec![0.0; k], vec![0.0; k]);
    draw_dropped(subject, rng, &c.mu, &c.sigma, c.p, &mut z)?;
    draw_dropped(subject, rng, &c.mu, &c.sigma, c.p, &mut z_alt)?;
    for j in 0..k {
        out[j] = z[j];
        out[k + j] = 0.5 * (z[j] - z_alt[j]) * (z[j] - z_alt[j]);
    }
    Ok(())
}

/// `batchnorm.li2018`: the pair forms at `p = 0.5`, of the clean input and
/// at `p = 0.1`, on `N(0, 1)`.
fn li2018_draw(subject: &Subject, rng: &mut Stream, out: &mut [f64]) -> Result<(), Error> {
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
}

/// `Δ` = eval variance / train variance; numerator and denominator come
/// from disjoint random numbers, so each ratio's error is the independent
/// one.
fn li2018_ratios(raw: Vec<Estimate>) -> Vec<Estimate> {
    vec![
        raw[0],
        raw[1],
        independent_ratio(raw[1], raw[0]),
        raw[2],
        independent_ratio(raw[1], raw[2]),
    ]
}

/// The laws the claims declare ([`Claim::law`]), per claimed component, from
/// which `tests/test_sizes.rs` derives each skewness again by Gaussian
/// quadratic forms rather than the k-statistic cumulants the claims use.
impl Config {
    /// The channels, `(μ_k, σ_k)`.
    fn channel_pairs(&self) -> impl Iterator<Item = (f64, f64)> + '_ {
        self.mu.iter().copied().zip(self.sigma.iter().copied())
    }

    /// `batchnorm.train_input`'s law: per channel `z_k = m x_k / q` (the
    /// mean components), then `(z_k − z′_k)²/2` (the variance components).
    fn train_input_law(&self) -> Law {
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
    fn buffer(&self, mu: f64, sigma: f64, mean_weight: f64, variance_weight: f64) -> Draw {
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
    fn running_stats_law(&self) -> Law {
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
    fn fold_buffers_law(&self) -> Law {
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
    fn variance_shift_law(&self) -> Law {
        Law::repeated(
            Draw::NormalPair,
            self.buffer_sets() * self.channels(),
            Estimator::Mean,
        )
    }
}

/// `batchnorm.li2018`'s law: the pair forms at `p = 0.5`, of the clean
/// input and at `p = 0.1`, and the two ratios clean / dropped, linearized.
fn li2018_law() -> Law {
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

impl Claim for BnClaim {
    /// Every claim of this family is per channel (or per component of its
    /// post-processed vector) and tests a mean, with the largest skewness
    /// of its components.
    fn card(&self) -> Card {
        self.card_of()
    }
    fn analytic(&self) -> Result<Vec<f64>, Error> {
        self.closed_form()
    }
    fn law(&self) -> Law {
        let c = &self.config;
        match self.quantity {
            Quantity::TrainInput => c.train_input_law(),
            Quantity::RunningStats => c.running_stats_law(),
            Quantity::FoldBuffers => c.fold_buffers_law(),
            Quantity::VarianceShift => c.variance_shift_law(),
            Quantity::Li2018 => li2018_law(),
        }
    }
    fn estimate(&self, subject: &Subject, budget: Budget) -> Result<Vec<Estimate>, Error> {
        if self.quantity.reads_replicates() && !self.config.unbiased {
            return Err(Error::InvalidOption {
                what: "the crate's BatchNorm keeps the unbiased running variance".into(),
            });
        }
        let raw = sample_means(subject, budget, self.raw_dim(), |s, rng, out| {
            self.draw(s, rng, out)
        })?;
        Ok(match self.quantity {
            Quantity::Li2018 => li2018_ratios(raw),
            _ => raw,
        })
    }
}

static AT_FAMILY: std::sync::LazyLock<Vec<BnClaim>> =
    std::sync::LazyLock::new(|| at(&Config::family()));

/// The family's claims in report order (named and described in
/// [`super::families`]): [`at`] the family's configuration.
pub fn claims() -> Vec<&'static dyn Claim> {
    listed(&AT_FAMILY)
}
