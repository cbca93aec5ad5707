//! candle (candle-core / candle-nn 0.11.1) behind the conformance trait.
//!
//! # What candle's dropout computes (read from `candle_nn::ops::dropout`)
//!
//! ```text
//! reject unless 0 <= p32 < 1              p32 = p rounded to f32 (argument type)
//! u_k   ~ U[0,1) as f32 on a 2^-23 grid   CPU: rand 0.9 thread rng, not seedable
//! keep  = u_k >= p32
//! z_k   = x_k · (keep_k · s),   s = fl(1 / (1 − p32))   (computed in f64)
//! ```
//!
//! so a survivor is `x · fl(1/(1 − p32))`, a multiplication by a rounded
//! reciprocal, not `x / q`; and the keep probability is
//! `1 − ⌈p32 · 2^23⌉ / 2^23`, not `1 − p`. `Dropout::forward(xs, false)`
//! returns `xs` unchanged and never validates `p`.
//!
//! # How the adapter derives the mask
//!
//! Candle returns only `z`. For a unit with finite `x_k ≠ 0`, `z_k ≠ 0` iff
//! the unit was kept. A unit with `x_k = 0` (or non-finite) would hide its
//! mask, so the adapter hands candle `1.0` there instead and reads the
//! unit's factor `keep · s` straight off candle's output; it then writes
//! `x_k · (keep · s)`, which is the product candle computes for that unit
//! (candle multiplies elementwise), so the output is unchanged bit for bit.
//! (The shared `framework` module does this for both adapters.)
//!
//! # Backward
//!
//! The trait's backward gets the mask, not candle's internal mask tensor.
//! The adapter rebuilds candle's mask tensor from it with candle's own
//! operations (`mask.to_dtype(F64) * s`), forms `x * mask` on a candle
//! [`Var`] and lets candle's autograd differentiate `Σ g ⊙ (x ⊙ mask)`. What
//! this tests through the trait: candle's autograd of the product and the
//! scale `s`. What it cannot test: that candle's own forward pass records
//! the same mask for its backward; `tests/frameworks_candle.rs` checks that
//! end to end (the gradient of `Σ dropout(x)` equals the forward factor).
//!
//! # Randomness
//!
//! The generator the trait passes in is not used: candle's CPU backend
//! draws from `rand::rng()` (the thread-local generator) and its `set_seed`
//! returns an error. Samples are independent draws, so the statistical
//! claims apply, but a run is not reproducible.

use candle_core::{DType, Device, Module, Tensor, Var};
use rand::Rng;

use super::framework::{backward_through, eval_through, rows_of, train_reading_mask};
use crate::error::Error;
use crate::ops::{BackwardPass, DropoutLayer, EvalPass, TrainPass};

/// The framework name used in errors and reports.
pub const FRAMEWORK: &str = "candle 0.11.1";

fn framework(e: candle_core::Error) -> Error {
    Error::Framework {
        framework: FRAMEWORK,
        message: e.to_string(),
    }
}

fn tensor(x: &[f64], rows: usize, d: usize) -> Result<Tensor, Error> {
    Tensor::from_slice(x, (rows, d), &Device::Cpu).map_err(framework)
}

fn read(t: &Tensor) -> Result<Vec<f64>, Error> {
    t.flatten_all()
        .and_then(|t| t.to_vec1::<f64>())
        .map_err(framework)
}

/// The factor candle multiplies a kept unit by at rate `p`:
/// `1 / (1 − p32)` with `p32 = p as f32`, exactly as `candle_nn::ops::dropout`
/// computes it.
pub fn survivor_scale(p: f64) -> f64 {
    1.0 / (1.0 - (p as f32) as f64)
}

/// Whether candle's dropout accepts `p`: `0 <= p as f32 < 1`.
pub fn accepts_rate(p: f64) -> bool {
    (0.0..1.0).contains(&(p as f32))
}

/// `candle_nn::ops::dropout` / `candle_nn::Dropout` on `f64` tensors.
#[derive(Debug, Clone, Copy, Default)]
pub struct CandleDropout;

impl CandleDropout {
    /// One training pass straight through candle: `candle_nn::ops::dropout`
    /// on `x` as a 1-row `f64` tensor, returning candle's output.
    pub fn raw_train(x: &[f64], p: f64) -> Result<Vec<f64>, Error> {
        let t = tensor(x, 1, x.len())?;
        let y = candle_nn::ops::dropout(&t, p as f32).map_err(framework)?;
        read(&y)
    }
}

impl DropoutLayer for CandleDropout {
    fn name(&self) -> &str {
        "candle-nn 0.11.1 dropout"
    }

    fn forward_train(&self, pass: TrainPass<'_>, p: f64, _rng: &mut dyn Rng) -> Result<(), Error> {
        train_reading_mask(pass, |probe| Self::raw_train(probe, p))
    }

    fn forward_eval(&self, pass: EvalPass<'_>, p: f64, _rng: &mut dyn Rng) -> Result<(), Error> {
        eval_through(pass, |x| {
            let y = candle_nn::Dropout::new(p as f32)
                .forward(&tensor(x, 1, x.len())?, false)
                .map_err(framework)?;
            read(&y)
        })
    }

    fn backward(&self, pass: BackwardPass<'_>, p: f64) -> Result<(), Error> {
        backward_through(pass, p, accepts_rate(p), |grad_out, mask| {
            autograd_of_product(grad_out, mask, p).map_err(framework)
        })
    }
}

/// `∂/∂x Σ g ⊙ (x ⊙ mask)` by candle's autograd, the mask built with
/// candle-nn's own two steps (the 0/1 mask in the input's dtype, times the
/// scale).
fn autograd_of_product(g: &[f64], mask: &[bool], p: f64) -> candle_core::Result<Vec<f64>> {
    let d = g.len();
    let dev = Device::Cpu;
    let bits: Vec<u8> = mask.iter().map(|&m| u8::from(m)).collect();
    let m = (Tensor::from_vec(bits, d, &dev)?.to_dtype(DType::F64)? * survivor_scale(p))?;
    let x = Var::from_tensor(&Tensor::ones(d, DType::F64, &dev)?)?;
    let z = (x.as_tensor() * m)?;
    let grads = (z * Tensor::from_slice(g, d, &dev)?)?
        .sum_all()?
        .backward()?;
    match grads.get(x.as_tensor()) {
        Some(t) => t.to_vec1::<f64>(),
        None => candle_core::bail!("no gradient for the input"),
    }
}

/// Which of candle's normalization layers to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Norm {
    /// `candle_nn::LayerNorm::new(1, 0, eps)`: with a bias on a contiguous
    /// input candle calls its fused kernel `candle_nn::ops::layer_norm`,
    /// which rejects `f64` tensors, so the helper runs it on `f32` (input
    /// rounded to `f32`, output widened back). The kernel accumulates in
    /// `f32` and takes the variance as `E[x²] − mean²`; `eps` is rounded to
    /// `f32`.
    LayerNorm,
    /// `candle_nn::LayerNorm::new_no_bias(1, eps)`: the unfused path, in
    /// the tensor's dtype (`f64` here), two-pass variance, `eps` in `f64`.
    LayerNormNoBias,
    /// `candle_nn::RmsNorm::new(1, eps)`: the fused kernel
    /// `candle_nn::ops::rms_norm`, which rejects `f64` tensors too, so it
    /// runs on `f32`: mean square accumulated in `f32`, `eps` rounded to
    /// `f32`.
    RmsNorm,
}

/// Candle's normalization of each of the `rows` rows of length `d` in `x`
/// (row-major), with unit weight and zero bias; `ε` is added to the
/// variance (mean square) inside the square root in all three layers.
pub fn normalize(norm: Norm, x: &[f64], d: usize, eps: f64) -> Result<Vec<f64>, Error> {
    let rows = rows_of(x, d)?;
    let dev = Device::Cpu;
    let t = tensor(x, rows, d)?;
    let ones = Tensor::ones(d, DType::F64, &dev).map_err(framework)?;
    let zeros = Tensor::zeros(d, DType::F64, &dev).map_err(framework)?;
    let f32_run = |layer: &dyn Module, t: &Tensor| -> candle_core::Result<Tensor> {
        layer
            .forward(&t.to_dtype(DType::F32)?)?
            .to_dtype(DType::F64)
    };
    let y = match norm {
        Norm::LayerNorm => {
            let layer = candle_nn::LayerNorm::new(
                ones.to_dtype(DType::F32).map_err(framework)?,
                zeros.to_dtype(DType::F32).map_err(framework)?,
                eps,
            );
            f32_run(&layer, &t)
        }
        Norm::LayerNormNoBias => candle_nn::LayerNorm::new_no_bias(ones, eps).forward(&t),
        Norm::RmsNorm => {
            let layer = candle_nn::RmsNorm::new(ones.to_dtype(DType::F32).map_err(framework)?, eps);
            f32_run(&layer, &t)
        }
    }
    .map_err(framework)?;
    read(&y)
}
