//! One random network and its passes: train-mode, re-estimation and
//! eval-mode batches through `[linear → ReLU → dropout(p) → BN]` blocks,
//! accumulating the per-layer, per-channel moments every statistic of the
//! experiment is computed from.

use nalgebra::{DMatrix, DVector};
use rand_distr::{Distribution, StandardNormal};

use super::config::StackConfig;
use crate::engine::Stream;
use crate::error::Error;
use crate::formulas::mean_and_variance;
use crate::ops::{BatchNorm, EvalPass, Linear, Subject, TrainPass, relu};

/// Where the dropout layers sit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// In every block, just before its normalization.
    BeforeEachNorm,
    /// Once, after the last normalization (before the readout).
    AfterLastNorm,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// BN uses and updates batch statistics; dropout active.
    Train,
    /// BN uses and updates batch statistics; dropout off.
    Reestimate,
    /// BN uses its buffers; dropout off.
    Eval,
}

/// Per-layer, per-channel sums of one pass type.
#[derive(Debug, Clone)]
pub(super) struct Moments {
    n: Vec<f64>,
    sum: Vec<Vec<f64>>,
    sumsq: Vec<Vec<f64>>,
    r_n: f64,
    r_sum: f64,
    r_sumsq: f64,
    /// Smallest biased batch variance a train-mode norm divided by.
    pub(super) min_batch_var: f64,
}

impl Moments {
    pub(super) fn new(depth: usize, width: usize) -> Self {
        Moments {
            n: vec![0.0; depth],
            sum: vec![vec![0.0; width]; depth],
            sumsq: vec![vec![0.0; width]; depth],
            r_n: 0.0,
            r_sum: 0.0,
            r_sumsq: 0.0,
            min_batch_var: f64::INFINITY,
        }
    }

    pub(super) fn layer(&mut self, l: usize, h: &DMatrix<f64>) {
        self.n[l] += h.ncols() as f64;
        for col in h.column_iter() {
            for (k, v) in col.iter().enumerate() {
                self.sum[l][k] += v;
                self.sumsq[l][k] += v * v;
            }
        }
    }

    fn readout(&mut self, r: &[f64]) {
        for v in r {
            self.r_n += 1.0;
            self.r_sum += v;
            self.r_sumsq += v * v;
        }
    }

    /// Unbiased variance of channel `k` of layer `l`.
    pub(super) fn channel_variance(&self, l: usize, k: usize) -> f64 {
        let (n, s, q) = (self.n[l], self.sum[l][k], self.sumsq[l][k]);
        (q - s * s / n) / (n - 1.0)
    }

    /// Channel-averaged unbiased variance of layer `l`.
    pub(super) fn variance(&self, l: usize) -> f64 {
        let w = self.sum[l].len();
        (0..w).map(|k| self.channel_variance(l, k)).sum::<f64>() / w as f64
    }

    /// Channel-averaged mean square of layer `l`.
    pub(super) fn mean_square(&self, l: usize) -> f64 {
        self.sumsq[l].iter().sum::<f64>() / (self.n[l] * self.sum[l].len() as f64)
    }

    /// Mean of channel `k` of layer `l`.
    pub(super) fn mean(&self, l: usize, k: usize) -> f64 {
        self.sum[l][k] / self.n[l]
    }

    pub(super) fn readout_mean(&self) -> f64 {
        self.r_sum / self.r_n
    }

    pub(super) fn readout_variance(&self) -> f64 {
        (self.r_sumsq - self.r_sum * self.r_sum / self.r_n) / (self.r_n - 1.0)
    }
}

/// One random network.
#[derive(Debug, Clone)]
pub(super) struct Net {
    pub(super) linears: Vec<Linear>,
    readout: DVector<f64>,
    /// `None`: LayerNorm in every block.
    pub(super) bns: Option<Vec<BatchNorm>>,
    eps: f64,
}

fn normal(rng: &mut Stream) -> f64 {
    StandardNormal.sample(rng)
}

pub(super) fn inputs(cfg: &StackConfig, n: usize, rng: &mut Stream) -> DMatrix<f64> {
    DMatrix::from_fn(cfg.width, n, |_, _| cfg.input_mean + normal(rng))
}

fn dropout_columns(
    subject: &Subject,
    h: &mut DMatrix<f64>,
    p: f64,
    train: bool,
    rng: &mut Stream,
) -> Result<(), Error> {
    let w = h.nrows();
    let mut out = vec![0.0; w];
    let mut mask = vec![false; w];
    for col in h.as_mut_slice().chunks_exact_mut(w) {
        if train {
            subject
                .dropout
                .forward_train(TrainPass::new(col, &mut out, &mut mask), p, rng)?;
        } else {
            subject
                .dropout
                .forward_eval(EvalPass::new(col, &mut out), p, rng)?;
        }
        col.copy_from_slice(&out);
    }
    Ok(())
}

/// LayerNorm over the channels of every column (no affine; the population
/// variance by two passes, as [`mean_and_variance`]).
fn layer_norm(a: &DMatrix<f64>, eps: f64) -> DMatrix<f64> {
    let mut y = a.clone();
    for col in y.as_mut_slice().chunks_exact_mut(a.nrows()) {
        let (mean, var) = mean_and_variance(col);
        let denom = (var + eps).sqrt();
        col.iter_mut().for_each(|v| *v = (*v - mean) / denom);
    }
    y
}

fn biased_row_var_min(a: &DMatrix<f64>) -> f64 {
    let b = a.ncols() as f64;
    a.row_iter()
        .map(|row| {
            let mean = row.sum() / b;
            row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / b
        })
        .fold(f64::INFINITY, f64::min)
}

/// How the passes of one measurement run: the experiment's
/// configuration, the mode, the drop rate `p`, where the dropout layers sit
/// and the layer under test they run.
#[derive(Clone, Copy)]
pub(super) struct Passes<'a> {
    pub(super) cfg: &'a StackConfig,
    pub(super) mode: Mode,
    pub(super) p: f64,
    pub(super) placement: Placement,
    pub(super) subject: &'a Subject<'a>,
}

impl Passes<'_> {
    /// The same passes in `mode`.
    pub(super) fn in_mode(self, mode: Mode) -> Self {
        Passes { mode, ..self }
    }
}

fn pass(
    net: &mut Net,
    mut h: DMatrix<f64>,
    run: Passes<'_>,
    rng: &mut Stream,
    acc: Option<&mut Moments>,
) -> Result<(), Error> {
    let (mode, p, placement, subject) = (run.mode, run.p, run.placement, run.subject);
    let mut acc = acc;
    let train_dropout = mode == Mode::Train;
    for l in 0..net.linears.len() {
        let mut a = net.linears[l].forward(&h)?;
        relu(&mut a);
        if placement == Placement::BeforeEachNorm {
            dropout_columns(subject, &mut a, p, train_dropout, rng)?;
        }
        h = match net.bns.as_mut() {
            None => {
                if let Some(acc) = acc.as_deref_mut() {
                    // LayerNorm's per-example variance, for its ε bound.
                    for col in a.as_slice().chunks_exact(a.nrows()) {
                        acc.min_batch_var = acc.min_batch_var.min(mean_and_variance(col).1);
                    }
                }
                layer_norm(&a, net.eps)
            }
            Some(bns) => {
                if mode == Mode::Eval {
                    bns[l].forward_eval(&a)?
                } else {
                    if let Some(acc) = acc.as_deref_mut() {
                        acc.min_batch_var = acc.min_batch_var.min(biased_row_var_min(&a));
                    }
                    bns[l].forward_train(&a)?
                }
            }
        };
        if let Some(acc) = acc.as_deref_mut() {
            acc.layer(l, &h);
        }
    }
    if placement == Placement::AfterLastNorm {
        dropout_columns(subject, &mut h, p, train_dropout, rng)?;
    }
    if let Some(acc) = acc {
        let r = net.readout.transpose() * &h;
        acc.readout(r.as_slice());
    }
    Ok(())
}

/// The buffer refresh: runs `refresh_batches` train-mode (or
/// re-estimation) batches, which set every BatchNorm's running statistics
/// the way training would (momentum 0.1 from the buffers `(0, 1)`), and
/// returns the moments of the second half of them.
pub(super) fn refresh_buffers(
    net: &mut Net,
    run: Passes<'_>,
    rng: &mut Stream,
) -> Result<Moments, Error> {
    let cfg = run.cfg;
    let mut acc = Moments::new(cfg.depth, cfg.width);
    let half = cfg.refresh_batches / 2;
    for t in 0..cfg.refresh_batches {
        let x = inputs(cfg, cfg.batch, rng);
        let record = if t >= half { Some(&mut acc) } else { None };
        pass(net, x, run, rng, record)?;
    }
    Ok(acc)
}

/// Runs `eval_examples` fresh inputs through the network in `run.mode` and
/// returns their moments.
pub(super) fn evaluate(net: &mut Net, run: Passes<'_>, rng: &mut Stream) -> Result<Moments, Error> {
    let cfg = run.cfg;
    let mut acc = Moments::new(cfg.depth, cfg.width);
    let mut left = cfg.eval_examples;
    while left > 0 {
        let n = left.min(cfg.batch);
        // Train-mode LayerNorm passes need no batch of 2; BN passes here are eval.
        let x = inputs(cfg, n, rng);
        pass(net, x, run, rng, Some(&mut acc))?;
        left -= n;
    }
    Ok(acc)
}

/// A random network: He-random linears `N(0, 2/W)`, zero biases, a readout
/// `u ~ N(0, 1/W)`, fresh BatchNorms.
pub(super) fn random_net(cfg: &StackConfig, rng: &mut Stream) -> Result<Net, Error> {
    let linears = (0..cfg.depth)
        .map(|_| Linear::random_he(cfg.width, cfg.width, rng))
        .collect::<Result<Vec<_>, _>>()?;
    let scale = (1.0 / cfg.width as f64).sqrt();
    let readout = DVector::from_fn(cfg.width, |_, _| scale * normal(rng));
    let bn = BatchNorm::new(cfg.width)?.with_eps(cfg.eps)?;
    Ok(Net {
        linears,
        readout,
        bns: Some(vec![bn; cfg.depth]),
        eps: cfg.eps,
    })
}
