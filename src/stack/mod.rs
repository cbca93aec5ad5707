//! The deep-stack experiment: seed 000's claims about dropout before
//! BatchNorm, measured in a simulated network.
//!
//! # The network
//!
//! `L` blocks `[linear → ReLU → dropout(p) → BN]` of width `W`, He-random
//! weights `N(0, 2/W)` and zero biases, then a linear readout `r = u·h_L`
//! with `u ~ N(0, 1/W)`. Inputs are iid `N(input_mean, 1)` per channel. Nothing
//! is trained: the BatchNorm buffers are calibrated the way training would
//! set them, by running `calibration_batches` train-mode batches of `batch`
//! examples (PyTorch momentum 0.1, from the initial buffers `(0, 1)`).
//!
//! # What is measured (one replicate = one random network)
//!
//! For every layer `l`: the per-channel variance of the BN output, averaged
//! over channels, in train mode (pooled over the second half of the
//! calibration batches) and in eval mode (over `eval_examples` fresh
//! inputs); their ratio is the eval/train **variance ratio** (the squared
//! output scale; at the first layer it is the variance shift `Δ = c²` of
//! [`crate::formulas::batchnorm`]). Also the ratio of mean squares (which
//! counts the stale mean as well as the stale variance), and for the readout
//! the variance ratio and the shift of its mean in train-mode standard
//! deviations. Variants on the same weights:
//!
//! * `base`: dropout before every BN;
//! * `fold`: `base`'s buffers folded once (`rv ← q rv − p rm²` in every BN);
//! * `reestimate`: `base`'s buffers reset and re-estimated in train mode with
//!   dropout off;
//! * `after_last`: dropout only after the last BN (before the readout);
//! * `layer_norm`: LayerNorm (ε, no affine) in place of every BN: no buffers.
//!
//! The statistics across independent replicates (networks, inputs, masks)
//! come from the engine ([`crate::engine::estimate`]): each draw is one
//! replicate, so every standard error includes the randomness of the
//! weights and of the calibrated buffers. Paired contrasts (layer `l` minus
//! layer `l + 1`, one rate minus the next, `|1 − base| − |1 − fold|`) are
//! components of the same draw, so their standard errors are the paired ones.

use nalgebra::{DMatrix, DVector};
use rand_distr::{Distribution, StandardNormal};
use serde::Serialize;

use crate::engine::{Budget, Sampler, Stream, estimate_with_progress};
use crate::error::Error;
use crate::formulas::batchnorm as f;
use crate::ops::{BatchNorm, Linear, Rate, Subject, relu};
use crate::stats::Estimate;

/// The experiment's shape.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StackConfig {
    pub width: usize,
    pub depth: usize,
    pub batch: usize,
    pub calibration_batches: u32,
    pub eval_examples: usize,
    pub input_mean: f64,
    pub eps: f64,
}

impl Default for StackConfig {
    fn default() -> Self {
        StackConfig {
            width: 16,
            depth: 6,
            batch: 128,
            calibration_batches: 60,
            eval_examples: 1024,
            input_mean: 0.5,
            eps: 1e-5,
        }
    }
}

impl StackConfig {
    fn validate(&self) -> Result<(), Error> {
        if self.width == 0 || self.depth == 0 {
            return Err(Error::Empty {
                what: "stack width/depth",
            });
        }
        if self.depth > 64 || self.width > 1024 {
            return Err(Error::TooLarge {
                what: "stack depth (<= 64) or width (<= 1024)",
                limit: 1024,
                got: self.depth.max(self.width),
            });
        }
        if self.batch < 2 || self.eval_examples < 2 || self.calibration_batches < 2 {
            return Err(Error::Degenerate {
                what: "the stack needs batch, eval_examples and calibration_batches >= 2".into(),
            });
        }
        if !(self.input_mean.is_finite() && self.eps.is_finite() && self.eps >= 0.0) {
            return Err(Error::Degenerate {
                what: "input_mean and eps must be finite, eps >= 0".into(),
            });
        }
        Ok(())
    }
}

/// Where the dropout layers sit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// In every block, just before its normalization.
    BeforeEachNorm,
    /// Once, after the last normalization (before the readout).
    AfterLastNorm,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// BN uses and updates batch statistics; dropout active.
    Train,
    /// BN uses and updates batch statistics; dropout off.
    Reestimate,
    /// BN uses its buffers; dropout off.
    Eval,
}

/// Per-layer, per-channel sums of one pass type.
#[derive(Debug, Clone)]
struct Moments {
    n: Vec<f64>,
    sum: Vec<Vec<f64>>,
    sumsq: Vec<Vec<f64>>,
    r_n: f64,
    r_sum: f64,
    r_sumsq: f64,
    /// Smallest biased batch variance a train-mode norm divided by.
    min_batch_var: f64,
}

impl Moments {
    fn new(depth: usize, width: usize) -> Self {
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

    fn layer(&mut self, l: usize, h: &DMatrix<f64>) {
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

    /// Channel-averaged unbiased variance of layer `l`.
    fn variance(&self, l: usize) -> f64 {
        let n = self.n[l];
        let w = self.sum[l].len() as f64;
        self.sum[l]
            .iter()
            .zip(&self.sumsq[l])
            .map(|(s, q)| (q - s * s / n) / (n - 1.0))
            .sum::<f64>()
            / w
    }

    /// Channel-averaged mean square of layer `l`.
    fn mean_square(&self, l: usize) -> f64 {
        self.sumsq[l].iter().sum::<f64>() / (self.n[l] * self.sum[l].len() as f64)
    }

    /// Mean of channel `k` of layer `l`.
    fn mean(&self, l: usize, k: usize) -> f64 {
        self.sum[l][k] / self.n[l]
    }

    fn readout_mean(&self) -> f64 {
        self.r_sum / self.r_n
    }

    fn readout_variance(&self) -> f64 {
        (self.r_sumsq - self.r_sum * self.r_sum / self.r_n) / (self.r_n - 1.0)
    }
}

/// One random network.
#[derive(Debug, Clone)]
struct Net {
    linears: Vec<Linear>,
    readout: DVector<f64>,
    /// `None`: LayerNorm in every block.
    bns: Option<Vec<BatchNorm>>,
    eps: f64,
}

fn normal(rng: &mut Stream) -> f64 {
    StandardNormal.sample(rng)
}

fn inputs(cfg: &StackConfig, n: usize, rng: &mut Stream) -> DMatrix<f64> {
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
                .forward_train(col, p, rng, &mut out, &mut mask)?;
        } else {
            subject.dropout.forward_eval(col, p, rng, &mut out)?;
        }
        col.copy_from_slice(&out);
    }
    Ok(())
}

/// LayerNorm over the channels of every column (no affine).
fn layer_norm(a: &DMatrix<f64>, eps: f64) -> DMatrix<f64> {
    let mut y = a.clone();
    let w = a.nrows() as f64;
    for mut col in y.column_iter_mut() {
        let mean = col.sum() / w;
        let var = col.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / w;
        let denom = (var + eps).sqrt();
        col.apply(|v| *v = (*v - mean) / denom);
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

#[allow(clippy::too_many_arguments)]
fn pass(
    net: &mut Net,
    mut h: DMatrix<f64>,
    mode: Mode,
    p: f64,
    placement: Placement,
    subject: &Subject,
    rng: &mut Stream,
    acc: Option<&mut Moments>,
) -> Result<(), Error> {
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
                    let w = a.nrows() as f64;
                    for col in a.column_iter() {
                        let mean = col.sum() / w;
                        let var = col.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / w;
                        acc.min_batch_var = acc.min_batch_var.min(var);
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

/// Runs train-mode (or re-estimation) batches; returns the moments of the
/// second half of them.
#[allow(clippy::too_many_arguments)]
fn calibrate(
    net: &mut Net,
    cfg: &StackConfig,
    mode: Mode,
    p: f64,
    placement: Placement,
    subject: &Subject,
    rng: &mut Stream,
) -> Result<Moments, Error> {
    let mut acc = Moments::new(cfg.depth, cfg.width);
    let half = cfg.calibration_batches / 2;
    for t in 0..cfg.calibration_batches {
        let x = inputs(cfg, cfg.batch, rng);
        let record = if t >= half { Some(&mut acc) } else { None };
        pass(net, x, mode, p, placement, subject, rng, record)?;
    }
    Ok(acc)
}

fn evaluate(
    net: &mut Net,
    cfg: &StackConfig,
    mode: Mode,
    p: f64,
    placement: Placement,
    subject: &Subject,
    rng: &mut Stream,
) -> Result<Moments, Error> {
    let mut acc = Moments::new(cfg.depth, cfg.width);
    let mut left = cfg.eval_examples;
    while left > 0 {
        let n = left.min(cfg.batch);
        // Train-mode LayerNorm passes need no batch of 2; BN passes here are eval.
        let x = inputs(cfg, n, rng);
        pass(net, x, mode, p, placement, subject, rng, Some(&mut acc))?;
        left -= n;
    }
    Ok(acc)
}

/// One variant's per-layer figures in one replicate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VariantResult {
    /// Eval/train variance ratio per layer.
    pub variance_ratio: Vec<f64>,
    /// Eval/train mean-square ratio per layer.
    pub mean_square_ratio: Vec<f64>,
    /// Train-mode channel-averaged variance per layer.
    pub train_variance: Vec<f64>,
    /// Readout eval/train variance ratio.
    pub readout_variance_ratio: f64,
    /// Readout `(E_eval r − E_train r) / sd_train r`.
    pub readout_mean_shift: f64,
    /// Smallest per-batch (BN) or per-example (LN) variance a train-mode
    /// normalization divided by: bounds the ε effect.
    pub min_train_norm_var: f64,
}

fn variant(train: &Moments, eval: &Moments, depth: usize) -> VariantResult {
    let rv = train.readout_variance();
    VariantResult {
        variance_ratio: (0..depth)
            .map(|l| eval.variance(l) / train.variance(l))
            .collect(),
        mean_square_ratio: (0..depth)
            .map(|l| eval.mean_square(l) / train.mean_square(l))
            .collect(),
        train_variance: (0..depth).map(|l| train.variance(l)).collect(),
        readout_variance_ratio: eval.readout_variance() / rv,
        readout_mean_shift: (eval.readout_mean() - train.readout_mean()) / rv.sqrt(),
        min_train_norm_var: train.min_batch_var,
    }
}

/// Everything one replicate measures at one rate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Replicate {
    pub p: f64,
    pub base: VariantResult,
    pub fold: VariantResult,
    pub reestimate: VariantResult,
    pub after_last: VariantResult,
    pub layer_norm: VariantResult,
    /// First layer: the shift the formula predicts from the clean inputs'
    /// per-channel moments, `mean_k c(μ_k, σ_k)²`.
    pub predicted_first_shift: f64,
}

fn random_net(cfg: &StackConfig, rng: &mut Stream) -> Result<Net, Error> {
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

/// Runs one replicate (one random network, all variants) at rate `p`,
/// drawing everything from `rng`.
pub fn run_replicate(
    cfg: &StackConfig,
    subject: &Subject,
    p: f64,
    rng: &mut Stream,
) -> Result<Replicate, Error> {
    cfg.validate()?;
    let net = random_net(cfg, rng)?;
    replicate_on(&net, cfg, subject, p, rng)
}

fn replicate_on(
    fresh: &Net,
    cfg: &StackConfig,
    subject: &Subject,
    p: f64,
    rng: &mut Stream,
) -> Result<Replicate, Error> {
    let rate = Rate::new(p)?;
    let d = cfg.depth;
    let before = Placement::BeforeEachNorm;

    let mut base = fresh.clone();
    let train = calibrate(&mut base, cfg, Mode::Train, p, before, subject, rng)?;
    let eval = evaluate(&mut base, cfg, Mode::Eval, p, before, subject, rng)?;

    let mut folded = base.clone();
    for bn in folded.bns.iter_mut().flatten() {
        bn.fold_dropout(p)?;
    }
    let eval_fold = evaluate(&mut folded, cfg, Mode::Eval, p, before, subject, rng)?;

    let mut re = base.clone();
    for bn in re.bns.iter_mut().flatten() {
        bn.reset_running_stats();
    }
    calibrate(&mut re, cfg, Mode::Reestimate, p, before, subject, rng)?;
    let eval_re = evaluate(&mut re, cfg, Mode::Eval, p, before, subject, rng)?;

    let after = Placement::AfterLastNorm;
    let mut late = fresh.clone();
    let train_late = calibrate(&mut late, cfg, Mode::Train, p, after, subject, rng)?;
    let eval_late = evaluate(&mut late, cfg, Mode::Eval, p, after, subject, rng)?;

    let mut ln = fresh.clone();
    ln.bns = None;
    let train_ln = evaluate(&mut ln, cfg, Mode::Train, p, before, subject, rng)?;
    let eval_ln = evaluate(&mut ln, cfg, Mode::Eval, p, before, subject, rng)?;

    // The first BN's clean inputs: relu(W1 x), measured on fresh inputs.
    let x = inputs(cfg, cfg.eval_examples, rng);
    let mut a = base.linears[0].forward(&x)?;
    relu(&mut a);
    let mut clean = Moments::new(1, cfg.width);
    clean.layer(0, &a);
    let n = clean.n[0];
    let mut predicted = 0.0;
    for k in 0..cfg.width {
        let mu = clean.mean(0, k);
        let var = (clean.sumsq[0][k] - clean.sum[0][k] * clean.sum[0][k] / n) / (n - 1.0);
        predicted += f::c_squared(mu, var.sqrt(), rate)?;
    }
    Ok(Replicate {
        p,
        base: variant(&train, &eval, d),
        fold: variant(&train, &eval_fold, d),
        reestimate: variant(&train, &eval_re, d),
        after_last: variant(&train_late, &eval_late, d),
        layer_norm: variant(&train_ln, &eval_ln, d),
        predicted_first_shift: predicted / cfg.width as f64,
    })
}

/// Statistics per layer and rate, in this order (variance ratios unless
/// said otherwise; `null` is the same network at `p = 0`).
pub const LAYER_FIELDS: [&str; 15] = [
    "base",
    "fold",
    "reestimate",
    "after_last",
    "layer_norm",
    "layer_norm_mean_square",
    "fold_gain",
    "layer_norm_gain",
    "depth_step",
    "rate_step",
    "fold_minus_null",
    "reestimate_minus_null",
    "after_last_minus_null",
    "fold_half_lo",
    "fold_half_hi",
];
/// Statistics per rate after the layers.
pub const RATE_FIELDS: [&str; 7] = [
    "readout_base",
    "readout_fold",
    "readout_reestimate",
    "readout_mean_shift",
    "first_shift_minus_formula",
    "first_minus_last",
    "readout_fold_gain",
];

struct StackSampler<'a> {
    cfg: StackConfig,
    rates: Vec<f64>,
    subject: &'a Subject<'a>,
}

fn per_rate(depth: usize) -> usize {
    depth * LAYER_FIELDS.len() + RATE_FIELDS.len()
}

impl Sampler for StackSampler<'_> {
    type Scratch = ();
    fn dim(&self) -> usize {
        self.rates.len() * per_rate(self.cfg.depth)
    }
    fn scratch(&self) {}
    fn draw(&self, rng: &mut Stream, _: &mut (), out: &mut [f64]) -> Result<(), Error> {
        use rand::Rng;
        use rayon::prelude::*;
        let d = self.cfg.depth;
        let net = random_net(&self.cfg, rng)?;
        // One sub-stream per rate, seeded from this draw's stream, so the
        // rates can run in parallel with a thread-independent result.
        let seeds: Vec<u64> = self.rates.iter().map(|_| rng.next_u64()).collect();
        let reps = self
            .rates
            .par_iter()
            .zip(&seeds)
            .map(|(&p, &seed)| {
                let mut sub = crate::engine::stream(seed, 0);
                replicate_on(&net, &self.cfg, self.subject, p, &mut sub)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let null = &reps[0];
        let width = per_rate(d);
        let nf = LAYER_FIELDS.len();
        for (i, rep) in reps.iter().enumerate() {
            let o = &mut out[i * width..(i + 1) * width];
            let base = &rep.base.variance_ratio;
            let gap = |v: f64| (1.0 - v).abs();
            for l in 0..d {
                let row = &mut o[l * nf..(l + 1) * nf];
                row[0] = base[l];
                row[1] = rep.fold.variance_ratio[l];
                row[2] = rep.reestimate.variance_ratio[l];
                row[3] = rep.after_last.variance_ratio[l];
                row[4] = rep.layer_norm.variance_ratio[l];
                row[5] = rep.layer_norm.mean_square_ratio[l];
                row[6] = gap(base[l]) - gap(row[1]);
                row[7] = gap(base[l]) - gap(row[4]);
                row[8] = if l + 1 < d {
                    base[l] - base[l + 1]
                } else {
                    0.0
                };
                row[9] = match i {
                    0 => 0.0,
                    _ => reps[i - 1].base.variance_ratio[l] - base[l],
                };
                row[10] = row[1] - null.base.variance_ratio[l];
                row[11] = row[2] - null.base.variance_ratio[l];
                row[12] = row[3] - null.base.variance_ratio[l];
                // The fold leaves less than half the shift iff both are > 0:
                // (fold − null) + ½(null − base) and ½(null − base) − (fold − null).
                let half_shift = 0.5 * (null.base.variance_ratio[l] - base[l]);
                row[13] = row[10] + half_shift;
                row[14] = half_shift - row[10];
            }
            let e = &mut o[d * nf..];
            e[0] = rep.base.readout_variance_ratio;
            e[1] = rep.fold.readout_variance_ratio;
            e[2] = rep.reestimate.readout_variance_ratio;
            e[3] = rep.base.readout_mean_shift;
            e[4] = base[0] - rep.predicted_first_shift;
            e[5] = base[0] - base[d - 1];
            e[6] = gap(e[0]) - gap(e[1]);
        }
        Ok(())
    }
}

/// One rate's results: `layers[l][j]` is [`LAYER_FIELDS`]`[j]` at layer
/// `l + 1`, `extra[j]` is [`RATE_FIELDS`]`[j]`; estimates over replicates.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RateTable {
    pub p: f64,
    pub layers: Vec<Vec<Estimate>>,
    pub extra: Vec<Estimate>,
}

impl RateTable {
    /// The estimate of `field` (one of [`LAYER_FIELDS`]) at layer `layer`
    /// (1-based); `None` for an unknown field or a layer out of range.
    pub fn at(&self, layer: usize, field: &str) -> Option<Estimate> {
        let j = LAYER_FIELDS.iter().position(|f| *f == field)?;
        self.layers.get(layer.checked_sub(1)?)?.get(j).copied()
    }

    /// The estimate of `field` (one of [`RATE_FIELDS`]); `None` for an
    /// unknown field.
    pub fn get(&self, field: &str) -> Option<Estimate> {
        let j = RATE_FIELDS.iter().position(|f| *f == field)?;
        self.extra.get(j).copied()
    }
}

/// The whole experiment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StackTable {
    pub config: StackConfig,
    pub replicates: u64,
    pub seed: u64,
    pub layer_fields: Vec<&'static str>,
    pub rate_fields: Vec<&'static str>,
    /// The first rate is always `p = 0` (the dropout-free null).
    pub rates: Vec<RateTable>,
}

impl StackTable {
    /// The table of rate `p` (exactly as given).
    pub fn rate(&self, p: f64) -> Option<&RateTable> {
        self.rates.iter().find(|r| r.p == p)
    }
}

/// Runs `budget.samples` replicates (random networks) at every rate in
/// `rates` (ascending, distinct, each in `[0, 1)`), all rates on the same
/// networks; `p = 0` is added in front when absent, as the null every
/// variant is compared with.
pub fn run(
    cfg: StackConfig,
    rates: &[f64],
    subject: &Subject,
    budget: Budget,
) -> Result<StackTable, Error> {
    run_with_progress(cfg, rates, subject, budget, &|_| {})
}

/// [`run`], calling `progress(1)` after each finished replicate.
pub fn run_with_progress(
    cfg: StackConfig,
    rates: &[f64],
    subject: &Subject,
    budget: Budget,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<StackTable, Error> {
    cfg.validate()?;
    for &p in rates {
        Rate::new(p)?;
    }
    if rates.windows(2).any(|w| w[0] >= w[1]) {
        return Err(Error::Degenerate {
            what: "rates must be distinct and ascending".into(),
        });
    }
    let mut all = rates.to_vec();
    if all.first() != Some(&0.0) {
        all.insert(0, 0.0);
    }
    let sampler = StackSampler {
        cfg,
        rates: all.clone(),
        subject,
    };
    let est = estimate_with_progress(&sampler, budget, progress)?.estimates();
    let width = per_rate(cfg.depth);
    let nf = LAYER_FIELDS.len();
    let tables = all
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            let o = &est[i * width..(i + 1) * width];
            RateTable {
                p,
                layers: (0..cfg.depth)
                    .map(|l| o[l * nf..(l + 1) * nf].to_vec())
                    .collect(),
                extra: o[cfg.depth * nf..].to_vec(),
            }
        })
        .collect();
    Ok(StackTable {
        config: cfg,
        replicates: budget.samples,
        seed: budget.seed,
        layer_fields: LAYER_FIELDS.to_vec(),
        rate_fields: RATE_FIELDS.to_vec(),
        rates: tables,
    })
}

fn cell(e: Option<Estimate>) -> String {
    e.map_or("-".into(), |e| {
        crate::report::format_estimate(e.value, e.stderr)
    })
}

/// The table `dropmc stack` prints: per rate and layer, the eval/train
/// variance ratio (the squared output scale) of every variant.
pub fn table(t: &StackTable, width: usize) -> String {
    use crate::table::{Table, wrap_text};
    let c = &t.config;
    let intro = format!(
        "deep stack: {} blocks [linear -> ReLU -> dropout(p) -> BN], width {}, batch {}, \
         {} calibration batches, {} eval examples, input N({}, 1); {} random networks (seed {})",
        c.depth,
        c.width,
        c.batch,
        c.calibration_batches,
        c.eval_examples,
        c.input_mean,
        t.replicates,
        t.seed
    );
    let cells = "cells: eval/train variance ratio per layer (1 = no shift; the first layer's \
                 is Delta = c^2), mean ± SE over networks";
    let mut out = String::new();
    for line in wrap_text(&intro, width)
        .into_iter()
        .chain(wrap_text(cells, width))
    {
        out.push_str(&line);
        out.push('\n');
    }
    out.push('\n');
    let mut rows = Table::new([
        "p",
        "layer",
        "dropout->BN",
        "folded",
        "re-estimated",
        "dropout after last BN",
        "LayerNorm",
    ])
    .wrap(5);
    for r in &t.rates {
        for l in 1..=c.depth {
            rows.row([
                format!("{}", r.p),
                format!("{l}"),
                cell(r.at(l, "base")),
                cell(r.at(l, "fold")),
                cell(r.at(l, "reestimate")),
                cell(r.at(l, "after_last")),
                cell(r.at(l, "layer_norm")),
            ]);
        }
        rows.row([
            format!("{}", r.p),
            "readout".into(),
            cell(r.get("readout_base")),
            cell(r.get("readout_fold")),
            cell(r.get("readout_reestimate")),
            "-".into(),
            "-".into(),
        ]);
    }
    out.push_str(&rows.render(width));
    out.push('\n');
    for r in &t.rates {
        let line = format!(
            "p = {}: readout mean shift (eval - train) = {} train sd; first layer minus formula \
             mean_k c_k^2 = {}",
            r.p,
            cell(r.get("readout_mean_shift")),
            cell(r.get("first_shift_minus_formula"))
        );
        for part in wrap_text(&line, width) {
            out.push_str(&part);
            out.push('\n');
        }
    }
    out
}
