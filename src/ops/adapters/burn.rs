//! burn 0.22.1 (ndarray backend, autodiff) behind the conformance trait.
//!
//! # What burn's dropout computes (read from `burn_nn::Dropout::forward`)
//!
//! ```text
//! DropoutConfig::init: panics unless p is finite and 0 <= p < 1
//! forward: identity unless  training flag on  AND  device is autodiff  AND  p != 0
//! keep_k ~ Bernoulli(q) as a float tensor    (rand 0.9 `Bernoulli`: u64 < ⌊q·2^64⌋)
//! z_k    = (x_k · keep_k) · fl(1 / q),  q = 1 − p in f64, scalar cast to the dtype
//! ```
//!
//! The ndarray backend draws from one process-wide `StdRng` behind a mutex;
//! `Device::seed` replaces it. So the identity branch is taken on a plain
//! (non-autodiff) device even by a layer in training mode, and a survivor
//! is `x · fl(1/q)`, not `x / q`.
//!
//! # How the adapter runs it
//!
//! Every training pass takes one `u64` from the trait's generator, seeds
//! burn's generator with it and runs `Dropout::forward` on the autodiff
//! ndarray device, the two steps under one lock so that concurrent passes
//! cannot interleave: a run is reproducible from the trait's generator.
//! Tensors are `f64`. The mask is read off burn's output as in the candle
//! adapter (the shared `framework` module): a unit whose `x_k` is zero or
//! not finite is given to burn as `1.0` and its output is rebuilt as
//! `x_k · factor`, the factor read off burn's output (burn's output for such
//! a unit is `(x_k · keep) · s`, the same product up to association, which
//! is exact since `keep` is 0 or 1).
//!
//! `p` outside `[0, 1)` makes burn panic in `DropoutConfig::init`; the
//! adapter checks the same condition first and returns
//! [`Error::InvalidRate`].
//!
//! Evaluation uses burn's idiom for inference, `Module::valid()`, which
//! clears the training flag.
//!
//! # Backward
//!
//! As for candle: the adapter rebuilds burn's two forward steps from the
//! given mask (`x * mask`, then `* (1/q)`) on a tracked autodiff tensor and
//! differentiates `Σ g ⊙ z` with burn's autograd. The end-to-end check that
//! burn's own forward pass and its gradient use the same mask is in
//! `tests/frameworks_burn.rs`.

use std::sync::{Mutex, OnceLock};

use ::burn::module::Module;
use ::burn::nn::{BatchNorm, BatchNormConfig, DropoutConfig, LayerNormConfig};
use ::burn::tensor::{DType, Device, FloatDType, Tensor, TensorData};
use rand::Rng;

use super::framework::{backward_through, eval_through, rows_of, train_reading_mask};
use crate::error::Error;
use crate::ops::{BackwardPass, DropoutLayer, EvalPass, TrainPass};

/// The framework name used in errors and reports.
pub const FRAMEWORK: &str = "burn 0.22.1 (ndarray)";

/// Serializes "seed burn's generator, then draw" across threads.
static DRAW_LOCK: Mutex<()> = Mutex::new(());

fn framework(message: impl ToString) -> Error {
    Error::Framework {
        framework: FRAMEWORK,
        message: message.to_string(),
    }
}

/// Outcome of configuring both devices to default to `f64` (once).
static CONFIGURED: OnceLock<Result<(), String>> = OnceLock::new();

/// Makes `f64` the default float dtype of the ndarray device (plain and
/// autodiff), so that module parameters and running statistics are `f64`.
/// Burn allows this once, before the device creates its first tensor; every
/// helper here calls it first.
#[allow(deprecated)] // burn 0.22 deprecates `Device::ndarray` in favour of `flex`.
pub fn configure_f64() -> Result<(), Error> {
    CONFIGURED
        .get_or_init(|| {
            let mut plain = Device::ndarray();
            let first = plain.configure(FloatDType::F64);
            let mut ad = Device::ndarray().autodiff();
            let second = ad.configure(FloatDType::F64);
            for device in [&plain, &ad] {
                if device.settings().float_dtype != FloatDType::F64 {
                    return Err(format!(
                        "cannot make f64 the default float dtype ({first:?}, {second:?})"
                    ));
                }
            }
            Ok(())
        })
        .clone()
        .map_err(framework)
}

/// The ndarray CPU device without autodiff, defaulting to `f64`.
#[allow(deprecated)]
pub fn plain_device() -> Result<Device, Error> {
    configure_f64()?;
    Ok(Device::ndarray())
}

/// The ndarray CPU device with autodiff (what training needs), `f64`.
#[allow(deprecated)]
pub fn autodiff_device() -> Result<Device, Error> {
    configure_f64()?;
    Ok(Device::ndarray().autodiff())
}

/// An `f64` tensor of shape `shape` holding `x`.
pub fn tensor<const D: usize>(x: &[f64], shape: [usize; D], device: &Device) -> Tensor<D> {
    Tensor::from_data(TensorData::new(x.to_vec(), shape), (device, DType::F64))
}

/// The values of `t` as `f64`.
pub fn read<const D: usize>(t: Tensor<D>) -> Result<Vec<f64>, Error> {
    let data = t.try_into_data().map_err(|e| framework(format!("{e:?}")))?;
    if data.dtype() != DType::F64 {
        return Err(framework(format!("expected f64, got {:?}", data.dtype())));
    }
    data.try_to_vec::<f64>()
        .map_err(|e| framework(format!("{e:?}")))
}

/// Whether burn's `DropoutConfig::init` accepts `p` (it panics otherwise).
pub fn accepts_rate(p: f64) -> bool {
    p.is_finite() && (0.0..1.0).contains(&p)
}

/// `burn::nn::Dropout` on the ndarray backend.
#[derive(Debug, Clone, Copy, Default)]
pub struct BurnDropout;

impl BurnDropout {
    /// One pass of `Dropout::forward` on `device` after seeding burn's
    /// generator with `seed` (seeding and drawing under one lock).
    pub fn raw_forward(x: &[f64], p: f64, seed: u64, device: &Device) -> Result<Vec<f64>, Error> {
        if !accepts_rate(p) {
            return Err(Error::InvalidRate { p });
        }
        let layer = DropoutConfig::new(p).init();
        let _guard = DRAW_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        device.seed(seed);
        read(layer.forward(tensor(x, [x.len()], device)))
    }
}

impl DropoutLayer for BurnDropout {
    fn name(&self) -> &str {
        "burn 0.22.1 nn::Dropout (ndarray, autodiff)"
    }

    fn forward_train(&self, pass: TrainPass<'_>, p: f64, rng: &mut dyn Rng) -> Result<(), Error> {
        train_reading_mask(pass, |probe| {
            Self::raw_forward(probe, p, rng.next_u64(), &autodiff_device()?)
        })
    }

    fn forward_eval(&self, pass: EvalPass<'_>, p: f64, _rng: &mut dyn Rng) -> Result<(), Error> {
        eval_through(pass, |x| {
            if !accepts_rate(p) {
                return Err(Error::InvalidRate { p });
            }
            let layer = DropoutConfig::new(p).init().valid();
            read(layer.forward(tensor(x, [x.len()], &autodiff_device()?)))
        })
    }

    fn backward(&self, pass: BackwardPass<'_>, p: f64) -> Result<(), Error> {
        backward_through(pass, p, accepts_rate(p), |grad_out, mask| {
            let d = grad_out.len();
            let device = autodiff_device()?;
            let bits: Vec<f64> = mask.iter().map(|&m| f64::from(u8::from(m))).collect();
            let x = tensor(&vec![1.0; d], [d], &device).require_grad();
            // burn-nn's two steps: `input * random`, then `* (1 / prob_keep)`.
            let z = (x.clone() * tensor(&bits, [d], &device)) * (1.0 / (1.0 - p));
            let grads = (z * tensor(grad_out, [d], &device)).sum().backward();
            let g = x.grad(&grads);
            read(g.ok_or_else(|| framework("no gradient for the input"))?)
        })
    }
}

/// `burn::nn::LayerNorm` (unit weight, zero bias, `eps` added to the biased
/// variance under the square root, in the tensor's dtype) on each of the
/// rows of length `d` in `x` (row-major), on the plain ndarray device.
pub fn layer_norm(x: &[f64], d: usize, eps: f64) -> Result<Vec<f64>, Error> {
    let rows = rows_of(x, d)?;
    let device = plain_device()?;
    let layer = LayerNormConfig::new(d).with_epsilon(eps).init(&device);
    read(layer.forward(tensor(x, [rows, d], &device)))
}

/// `burn::nn::BatchNorm` over `c` channels, with its running statistics,
/// fed batches of shape `[n, c]` (row-major `f64`).
pub struct BurnBatchNorm {
    module: BatchNorm,
    channels: usize,
}

impl BurnBatchNorm {
    /// A fresh layer (running mean 0, running variance 1) with burn's
    /// `momentum` and `epsilon`.
    pub fn new(channels: usize, momentum: f64, epsilon: f64) -> Result<Self, Error> {
        if channels == 0 {
            return Err(Error::Empty { what: "channels" });
        }
        let valid = momentum.is_finite()
            && (0.0..=1.0).contains(&momentum)
            && epsilon.is_finite()
            && epsilon > 0.0;
        if !valid {
            return Err(framework(format!(
                "BatchNormConfig rejects momentum {momentum} / epsilon {epsilon} (it panics)"
            )));
        }
        let module = BatchNormConfig::new(channels)
            .with_momentum(momentum)
            .with_epsilon(epsilon)
            .init(&autodiff_device()?);
        Ok(BurnBatchNorm { module, channels })
    }

    /// One training-mode forward pass on the autodiff device: returns the
    /// normalized batch and updates the running statistics.
    pub fn train_step(&self, batch: &[f64]) -> Result<Vec<f64>, Error> {
        let n = rows_of(batch, self.channels)?;
        read(
            self.module
                .forward(tensor(batch, [n, self.channels], &autodiff_device()?)),
        )
    }

    /// A forward pass of the same (training-mode) layer on the plain
    /// device: burn takes its inference branch there.
    pub fn forward_plain_device(&self, batch: &[f64]) -> Result<Vec<f64>, Error> {
        let n = rows_of(batch, self.channels)?;
        let module = self.module.clone();
        read(module.forward(tensor(batch, [n, self.channels], &plain_device()?)))
    }

    /// The running mean.
    pub fn running_mean(&self) -> Result<Vec<f64>, Error> {
        read(self.module.running_mean.value_sync())
    }

    /// The running variance.
    pub fn running_var(&self) -> Result<Vec<f64>, Error> {
        read(self.module.running_var.value_sync())
    }
}
