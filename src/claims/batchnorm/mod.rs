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
//! Every estimator runs the crate's [`BatchNorm`](crate::ops::BatchNorm) op and the subject's
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

mod config;
mod draws;
mod laws;
mod skewness;

pub use config::Config;
pub use draws::{Replicate, independent_ratio, refresh_buffers};
pub use skewness::BufferTraining;

use super::fn_claim::sample_means;
use super::listed;
use super::{Card, Claim, Law, Shape};
use crate::engine::{Budget, Stream};
use crate::error::Error;
use crate::formulas::batchnorm as f;
use crate::ops::Subject;
use crate::stats::{DEFAULT_SKEWNESS, Estimate, Statistic};
use draws::{draw_clean, eval_one, li2018_draw, li2018_ratios, train_input_draw, variance_ratio};
use laws::li2018_law;
use skewness::{li2018_skewness, train_input_skewness};

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
    /// [`crate::stats::BatchCumulants`]).
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
