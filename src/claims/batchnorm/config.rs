//! The configuration a BatchNorm claim is stated at, and its closed forms.

use super::{BATCH, MOMENTUM, MU, P, SIGMA, STEPS};
use crate::error::Error;
use crate::formulas::batchnorm as f;
use crate::ops::Rate;

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
    /// ([`crate::ops::BatchNorm::fold_dropout`]): dropmc folds its own BatchNorm; a
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

    pub(super) fn rate(&self) -> Result<Rate, Error> {
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

    /// Buffer sets the eval claim runs: the trained one, and the folded one
    /// when [`Config::folded_eval`].
    pub(super) fn buffer_sets(&self) -> usize {
        if self.folded_eval { 2 } else { 1 }
    }
}
