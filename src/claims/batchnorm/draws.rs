//! The family's draws: clean and dropped-out Gaussian examples, the
//! buffer refresh, one replicate's eval outputs, and the per-draw statistics
//! of the single-example claims.

use nalgebra::DMatrix;
use rand_distr::{Distribution, StandardNormal};

use super::super::fn_claim::half_squared_difference;
use super::Config;
use crate::engine::Stream;
use crate::error::Error;
use crate::ops::{BatchNorm, Subject, TrainPass};
use crate::stats::Estimate;

/// Draws the `K` channels of one clean example into `x`.
pub(super) fn draw_clean(rng: &mut Stream, mu: &[f64], sigma: &[f64], x: &mut [f64]) {
    for ((v, m), s) in x.iter_mut().zip(mu).zip(sigma) {
        let n: f64 = StandardNormal.sample(rng);
        *v = m + s * n;
    }
}

/// One dropped-out example: clean draw, then the subject's training pass.
pub(super) fn draw_dropped(
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

pub(super) fn eval_one(bn: &BatchNorm, x: &[f64]) -> Result<Vec<f64>, Error> {
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
    pub(super) fn buffers_of(bn: &'a BatchNorm) -> Replicate<'a> {
        Replicate {
            running_mean: bn.running_mean(),
            running_var: bn.running_var(),
            y: [&[], &[]],
            eps: bn.eps(),
        }
    }
}

/// Per channel, given the buffers: eval BN is affine,
/// `y_k = (x_k − rm_k) / √(rv_k + ε)`, so `½ (y_k − y'_k)² (rv_k + ε)/σ_k²`
/// has mean 1 exactly, whatever the buffers (trained or folded). At the
/// stationary `rv = (σ² + p μ²)/q` the unscaled variance is the shift
/// `Δ = c²` of [`f::c_squared`].
pub(super) fn variance_ratio(set: &Replicate, sigma: &[f64], out: &mut [f64]) {
    for (j, o) in out.iter_mut().enumerate() {
        let d = set.y[0][j] - set.y[1][j];
        let scale = (set.running_var[j] + set.eps) / (sigma[j] * sigma[j]);
        *o = 0.5 * d * d * scale;
    }
}

/// `batchnorm.train_input`: two dropped-out examples, the first's channels
/// then their pair forms.
pub(super) fn train_input_draw(
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
pub(super) fn li2018_draw(
    subject: &Subject,
    rng: &mut Stream,
    out: &mut [f64],
) -> Result<(), Error> {
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
pub(super) fn li2018_ratios(raw: Vec<Estimate>) -> Vec<Estimate> {
    vec![
        raw[0],
        raw[1],
        independent_ratio(raw[1], raw[0]),
        raw[2],
        independent_ratio(raw[1], raw[2]),
    ]
}
