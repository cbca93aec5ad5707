//! The deep-stack experiment: the dropout-before-BatchNorm note's claims about dropout before
//! BatchNorm, measured in a simulated network.
//!
//! # The network
//!
//! `L` blocks `[linear → ReLU → dropout(p) → BN]` of width `W`, He-random
//! weights `N(0, 2/W)` and zero biases, then a linear readout `r = u·h_L`
//! with `u ~ N(0, 1/W)`. Inputs are iid `N(input_mean, 1)` per channel. Nothing
//! is trained: the BatchNorm buffers are set the way training would set
//! them (the buffer refresh), by running `refresh_batches` train-mode
//! batches of `batch` examples (PyTorch momentum 0.1, from the initial
//! buffers `(0, 1)`).
//!
//! # What is measured (one replicate = one random network)
//!
//! For every layer `l`: the per-channel variance of the BN output, averaged
//! over channels, in train mode (pooled over the second half of the
//! buffer-refresh batches) and in eval mode (over `eval_examples` fresh
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
//! weights and of the refreshed buffers. Paired contrasts (layer `l` minus
//! layer `l + 1`, one rate minus the next, `|1 − base| − |1 − fold|`) are
//! components of the same draw, so their standard errors are the paired ones.
//!
//! # The code
//!
//! * `config`: [`StackConfig`], the experiment's shape;
//! * `network`: one random network and its passes, the buffer refresh;
//! * `replicate`: one network measured in every variant ([`Replicate`]);
//! * `rows`: the table's rows as data ([`LayerRow`], [`RateRow`]: field
//!   order is column order, for the sampler, the JSON and the readers);
//! * `sampler`: the experiment as an engine sampler;
//! * `table`: the text `dropmc stack` prints.

mod config;
mod network;
mod replicate;
mod rows;
mod sampler;
mod table;

pub use config::StackConfig;
pub use network::Placement;
pub use replicate::{Replicate, VariantResult, run_replicate};
pub use rows::{LayerRow, RateRow};
pub use table::table;

use serde::Serialize;

use crate::engine::{Budget, estimate_with_progress};
use crate::error::Error;
use crate::ops::{Rate, Subject};
use crate::stats::Estimate;
use sampler::{StackSampler, per_rate};

/// One rate's results, estimates over replicates: `layers[l]` is layer
/// `l + 1`, `extra` the statistics beyond the layers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RateTable {
    pub p: f64,
    pub layers: Vec<LayerRow<Estimate>>,
    pub extra: RateRow<Estimate>,
}

impl RateTable {
    /// Layer `layer` (1-based); `None` out of range.
    pub fn layer(&self, layer: usize) -> Option<&LayerRow<Estimate>> {
        self.layers.get(layer.checked_sub(1)?)
    }

    /// The estimate of the [`LayerRow`] column named `field` at layer
    /// `layer` (1-based); `None` for an unknown field or a layer out of
    /// range.
    pub fn at(&self, layer: usize, field: &str) -> Option<Estimate> {
        self.layer(layer)?.get(field)
    }

    /// The estimate of the [`RateRow`] column named `field`; `None` for an
    /// unknown field.
    pub fn get(&self, field: &str) -> Option<Estimate> {
        self.extra.get(field)
    }
}

/// The whole experiment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StackTable {
    pub config: StackConfig,
    pub replicates: u64,
    pub seed: u64,
    /// [`LayerRow`]'s column names, in the order of every layer's values.
    pub layer_fields: Vec<&'static str>,
    /// [`RateRow`]'s column names, in the order of every `extra`'s values.
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
        return Err(Error::InvalidOption {
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
    let expected = all.len() * per_rate(cfg.depth);
    let short = Error::LengthMismatch {
        what: "stack estimates (rates × row values)",
        expected,
        got: est.len(),
    };
    let mut values = est.into_iter();
    let tables = all
        .iter()
        .map(|&p| {
            let layers = (0..cfg.depth)
                .map(|_| LayerRow::from_values(&mut values))
                .collect::<Option<Vec<_>>>()?;
            let extra = RateRow::from_values(&mut values)?;
            Some(RateTable { p, layers, extra })
        })
        .collect::<Option<Vec<_>>>()
        .ok_or(short)?;
    Ok(StackTable {
        config: cfg,
        replicates: budget.samples,
        seed: budget.seed,
        layer_fields: LayerRow::<Estimate>::FIELDS.to_vec(),
        rate_fields: RateRow::<Estimate>::FIELDS.to_vec(),
        rates: tables,
    })
}
