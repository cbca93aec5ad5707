//! One replicate: one random network measured in every variant at one
//! rate.

use serde::Serialize;

use super::config::StackConfig;
use super::network::{
    Mode, Moments, Net, Passes, Placement, evaluate, inputs, random_net, refresh_buffers,
};
use crate::engine::Stream;
use crate::error::Error;
use crate::formulas::batchnorm as f;
use crate::ops::{Rate, Subject, relu};

/// One variant's per-layer figures in one replicate.
// Same shape as `ClaimResult`'s fields and `DropoutMoments` (series, then
// scalars), because each is a different record with no field in common.
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

/// [`run_replicate`] on the given fresh network (the sampler runs every
/// rate on the same one).
pub(super) fn replicate_on(
    fresh: &Net,
    cfg: &StackConfig,
    subject: &Subject,
    p: f64,
    rng: &mut Stream,
) -> Result<Replicate, Error> {
    let rate = Rate::new(p)?;
    let d = cfg.depth;
    let before = Passes {
        cfg,
        mode: Mode::Train,
        p,
        placement: Placement::BeforeEachNorm,
        subject,
    };

    let mut base = fresh.clone();
    let train = refresh_buffers(&mut base, before.in_mode(Mode::Train), rng)?;
    let eval = evaluate(&mut base, before.in_mode(Mode::Eval), rng)?;

    let mut folded = base.clone();
    for bn in folded.bns.iter_mut().flatten() {
        bn.fold_dropout(p)?;
    }
    let eval_fold = evaluate(&mut folded, before.in_mode(Mode::Eval), rng)?;

    let mut re = base.clone();
    for bn in re.bns.iter_mut().flatten() {
        bn.reset_running_stats();
    }
    refresh_buffers(&mut re, before.in_mode(Mode::Reestimate), rng)?;
    let eval_re = evaluate(&mut re, before.in_mode(Mode::Eval), rng)?;

    let after = Passes {
        placement: Placement::AfterLastNorm,
        ..before
    };
    let mut late = fresh.clone();
    let train_late = refresh_buffers(&mut late, after.in_mode(Mode::Train), rng)?;
    let eval_late = evaluate(&mut late, after.in_mode(Mode::Eval), rng)?;

    let mut ln = fresh.clone();
    ln.bns = None;
    let train_ln = evaluate(&mut ln, before.in_mode(Mode::Train), rng)?;
    let eval_ln = evaluate(&mut ln, before.in_mode(Mode::Eval), rng)?;

    // The first BN's clean inputs: relu(W1 x), measured on fresh inputs.
    let x = inputs(cfg, cfg.eval_examples, rng);
    let mut a = base.linears[0].forward(&x)?;
    relu(&mut a);
    let mut clean = Moments::new(1, cfg.width);
    clean.layer(0, &a);
    let mut predicted = 0.0;
    for k in 0..cfg.width {
        let sigma = clean.channel_variance(0, k).sqrt();
        predicted += f::c_squared(clean.mean(0, k), sigma, rate)?;
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
