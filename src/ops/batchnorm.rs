//! BatchNorm with PyTorch's conventions, and the two pieces of a dense block
//! (a linear layer and ReLU) that the deep-stack experiment needs.
//!
//! # Layout
//!
//! A batch is a `K × B` matrix: **one column per example**, one row per
//! channel (nalgebra stores columns contiguously, so an example is a slice,
//! which is what a [`DropoutLayer`](super::DropoutLayer) takes).
//!
//! # BatchNorm (PyTorch conventions)
//!
//! ```text
//! train:  b̄_k = mean_b z_kb,   s_k² = mean_b (z_kb − b̄_k)²       (biased)
//!         y_kb = γ_k (z_kb − b̄_k) / sqrt(s_k² + ε) + β_k
//!         running_mean_k ← (1 − m) running_mean_k + m b̄_k
//!         running_var_k  ← (1 − m) running_var_k  + m s_k² B/(B − 1)  (unbiased)
//! eval:   y_kb = γ_k (z_kb − running_mean_k) / sqrt(running_var_k + ε) + β_k
//! ```
//!
//! Defaults as in `torch.nn.BatchNorm1d`: `γ = 1`, `β = 0`, `ε = 1e-5`,
//! momentum `m = 0.1`, buffers `running_mean = 0`, `running_var = 1`.
//! Train mode needs `B ≥ 2` (the unbiased variance divides by `B − 1`).

use nalgebra::{DMatrix, DVector};
use rand::Rng;
use rand_distr::{Distribution, StandardNormal};

use crate::error::{Error, check_all_finite, check_eps, check_finite_vec, check_len};
use crate::formulas::batchnorm as f;

use crate::formulas::Rate;

/// Batch normalisation over the rows (channels) of a `K × B` batch.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchNorm {
    gamma: Vec<f64>,
    beta: Vec<f64>,
    eps: f64,
    momentum: f64,
    running_mean: Vec<f64>,
    running_var: Vec<f64>,
    batches_tracked: u64,
}

impl BatchNorm {
    /// PyTorch's defaults for `channels` channels.
    pub fn new(channels: usize) -> Result<Self, Error> {
        if channels == 0 {
            return Err(Error::Empty {
                what: "BatchNorm channels",
            });
        }
        Ok(BatchNorm {
            gamma: vec![1.0; channels],
            beta: vec![0.0; channels],
            eps: 1e-5,
            momentum: 0.1,
            running_mean: vec![0.0; channels],
            running_var: vec![1.0; channels],
            batches_tracked: 0,
        })
    }

    /// Sets the affine parameters `γ`, `β` (one per channel, finite).
    pub fn with_affine(mut self, gamma: &[f64], beta: &[f64]) -> Result<Self, Error> {
        check_finite_vec("gamma", gamma)?;
        check_finite_vec("beta", beta)?;
        check_len("gamma", gamma, self.channels())?;
        check_len("beta", beta, self.channels())?;
        self.gamma = gamma.to_vec();
        self.beta = beta.to_vec();
        Ok(self)
    }

    /// Sets `ε` (finite, `≥ 0`).
    pub fn with_eps(mut self, eps: f64) -> Result<Self, Error> {
        check_eps("BatchNorm eps", eps)?;
        self.eps = eps;
        Ok(self)
    }

    /// Sets the momentum `m` (`0 <= m <= 1`).
    pub fn with_momentum(mut self, momentum: f64) -> Result<Self, Error> {
        if !(momentum.is_finite() && (0.0..=1.0).contains(&momentum)) {
            return Err(Error::InvalidOption {
                what: format!("BatchNorm momentum = {momentum} must be in [0, 1]"),
            });
        }
        self.momentum = momentum;
        Ok(self)
    }

    /// Sets the buffers (finite; every running variance `> 0`).
    pub fn with_buffers(
        mut self,
        running_mean: &[f64],
        running_var: &[f64],
    ) -> Result<Self, Error> {
        check_finite_vec("running_mean", running_mean)?;
        check_finite_vec("running_var", running_var)?;
        check_len("running_mean", running_mean, self.channels())?;
        check_len("running_var", running_var, self.channels())?;
        if let Some(k) = running_var.iter().position(|&v| v <= 0.0) {
            return Err(Error::InvalidOption {
                what: format!("running_var[{k}] = {} must be > 0", running_var[k]),
            });
        }
        self.running_mean = running_mean.to_vec();
        self.running_var = running_var.to_vec();
        Ok(self)
    }

    /// Number of channels.
    pub fn channels(&self) -> usize {
        self.gamma.len()
    }
    /// `ε`.
    pub fn eps(&self) -> f64 {
        self.eps
    }
    /// The momentum.
    pub fn momentum(&self) -> f64 {
        self.momentum
    }
    /// The running means.
    pub fn running_mean(&self) -> &[f64] {
        &self.running_mean
    }
    /// The running (unbiased) variances.
    pub fn running_var(&self) -> &[f64] {
        &self.running_var
    }
    /// Train-mode batches seen since construction or the last reset.
    pub fn batches_tracked(&self) -> u64 {
        self.batches_tracked
    }

    /// Back to PyTorch's initial buffers (`0`, `1`), as before re-estimating.
    pub fn reset_running_stats(&mut self) {
        self.running_mean.fill(0.0);
        self.running_var.fill(1.0);
        self.batches_tracked = 0;
    }

    fn check_batch(&self, x: &DMatrix<f64>) -> Result<(), Error> {
        if x.nrows() != self.channels() {
            return Err(Error::LengthMismatch {
                what: "batch rows (channels)",
                expected: self.channels(),
                got: x.nrows(),
            });
        }
        if x.ncols() == 0 {
            return Err(Error::Empty { what: "batch" });
        }
        check_all_finite("batch", x.as_slice())
    }

    /// Train mode: normalises with the batch's own (biased) statistics and
    /// updates the buffers with the unbiased variance.
    pub fn forward_train(&mut self, x: &DMatrix<f64>) -> Result<DMatrix<f64>, Error> {
        self.check_batch(x)?;
        let b = x.ncols();
        if b < 2 {
            return Err(Error::Degenerate {
                what: format!(
                    "train-mode BatchNorm needs a batch of at least 2 examples (got {b}): \
                     the unbiased running variance divides by B - 1"
                ),
            });
        }
        let bf = b as f64;
        let mut y = x.clone();
        let m = self.momentum;
        let saved = (self.running_mean.clone(), self.running_var.clone());
        for k in 0..self.channels() {
            let row = x.row(k);
            let mean = row.iter().sum::<f64>() / bf;
            let biased = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / bf;
            let denom = (biased + self.eps).sqrt();
            if denom == 0.0 {
                return Err(Error::Degenerate {
                    what: format!("channel {k} is constant over the batch and eps = 0"),
                });
            }
            for v in y.row_mut(k).iter_mut() {
                *v = self.gamma[k] * (*v - mean) / denom + self.beta[k];
            }
            self.running_mean[k] = (1.0 - m) * self.running_mean[k] + m * mean;
            self.running_var[k] = (1.0 - m) * self.running_var[k] + m * biased * bf / (bf - 1.0);
        }
        let buffers = self.running_mean.iter().chain(&self.running_var);
        if let Err(e) = overflow_check("train-mode BatchNorm", y.iter().chain(buffers)) {
            (self.running_mean, self.running_var) = saved;
            return Err(e);
        }
        self.batches_tracked += 1;
        Ok(y)
    }

    /// Eval mode: normalises with the buffers; changes nothing.
    pub fn forward_eval(&self, x: &DMatrix<f64>) -> Result<DMatrix<f64>, Error> {
        self.check_batch(x)?;
        let mut y = x.clone();
        for k in 0..self.channels() {
            let denom = (self.running_var[k] + self.eps).sqrt();
            if denom.is_nan() || denom <= 0.0 {
                return Err(Error::Degenerate {
                    what: format!("channel {k}: running_var + eps = 0"),
                });
            }
            let (mean, g, b) = (self.running_mean[k], self.gamma[k], self.beta[k]);
            for v in y.row_mut(k).iter_mut() {
                *v = g * (*v - mean) / denom + b;
            }
        }
        overflow_check("eval-mode BatchNorm", y.iter())?;
        Ok(y)
    }

    /// Folds the dropout correction into the buffers, once, after training:
    /// `running_var ← q · running_var − p · running_mean²`
    /// ([`f::fold_running_var`]). Nothing changes on error.
    pub fn fold_dropout(&mut self, p: f64) -> Result<(), Error> {
        let rate = Rate::new(p)?;
        self.running_var = f::fold_running_var(&self.running_mean, &self.running_var, rate)?;
        Ok(())
    }
}

/// A dense layer `y = W x + b` applied to every column of a batch.
#[derive(Debug, Clone, PartialEq)]
pub struct Linear {
    weight: DMatrix<f64>,
    bias: DVector<f64>,
}

impl Linear {
    /// A layer from its `out × in` weight and `out` bias (finite).
    pub fn new(weight: DMatrix<f64>, bias: DVector<f64>) -> Result<Self, Error> {
        if weight.is_empty() {
            return Err(Error::Empty { what: "weight" });
        }
        check_all_finite("weight", weight.as_slice())?;
        check_all_finite("bias", bias.as_slice())?;
        check_len("bias", bias.as_slice(), weight.nrows())?;
        Ok(Linear { weight, bias })
    }

    /// He-initialised weights `N(0, 2/in)` and zero bias, from `rng`.
    pub fn random_he<R: Rng + ?Sized>(
        inputs: usize,
        outputs: usize,
        rng: &mut R,
    ) -> Result<Self, Error> {
        if inputs == 0 || outputs == 0 {
            return Err(Error::Empty {
                what: "linear layer shape",
            });
        }
        let scale = (2.0 / inputs as f64).sqrt();
        let weight = DMatrix::from_fn(outputs, inputs, |_, _| {
            scale * <StandardNormal as Distribution<f64>>::sample(&StandardNormal, rng)
        });
        Linear::new(weight, DVector::zeros(outputs))
    }

    /// Input width.
    pub fn inputs(&self) -> usize {
        self.weight.ncols()
    }
    /// Output width.
    pub fn outputs(&self) -> usize {
        self.weight.nrows()
    }

    /// `W X + b 1ᵀ` for a batch `X` of `in × B`.
    pub fn forward(&self, x: &DMatrix<f64>) -> Result<DMatrix<f64>, Error> {
        if x.nrows() != self.inputs() {
            return Err(Error::LengthMismatch {
                what: "linear input rows",
                expected: self.inputs(),
                got: x.nrows(),
            });
        }
        let mut y = &self.weight * x;
        for mut col in y.column_iter_mut() {
            col += &self.bias;
        }
        overflow_check("Linear", y.iter())?;
        Ok(y)
    }
}

/// A finite input whose output overflows `f64` is a typed error, not a
/// silent infinity or NaN.
fn overflow_check<'a>(what: &str, mut values: impl Iterator<Item = &'a f64>) -> Result<(), Error> {
    if values.all(|v| v.is_finite()) {
        Ok(())
    } else {
        Err(Error::Overflow {
            what: format!("{what} output"),
        })
    }
}

/// `max(0, ·)` in place.
pub fn relu(x: &mut DMatrix<f64>) {
    x.apply(|v| *v = v.max(0.0));
}
