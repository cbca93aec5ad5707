//! Per sampled query row: the sampled check's estimates, and the pooled check of their
//! means (the module docs of [`super`]).

use serde::Serialize;

use super::AttentionCapture;
use super::SAMPLED_COORDINATES;
use crate::engine::{Budget, derive_seed};
use crate::error::Error;
use crate::ops::fast::attention_row::row_sums;

/// A sampled mean next to its closed form.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SampledCheck {
    /// The closed form's mean over the sampled rows (and coordinates).
    pub closed_form: f64,
    /// The sampler's mean of the same.
    pub sampled: f64,
    /// Its standard error (the rows' independent errors in quadrature).
    pub se: f64,
    /// `(sampled − closed_form) / se`.
    pub z: f64,
}

impl SampledCheck {
    pub(super) fn new(closed_form: f64, sampled: f64, variance_sum: f64, count: usize) -> Self {
        let se = variance_sum.sqrt() / count as f64;
        SampledCheck {
            closed_form,
            sampled,
            se,
            z: (sampled - closed_form) / se,
        }
    }

    /// The check of the mean of `count` sampled cells, each an estimate
    /// and its squared standard error, against `closed_form`, their closed
    /// forms' mean.
    pub(super) fn pooled<'a>(
        closed_form: f64,
        cells: impl Iterator<Item = &'a (f64, f64)> + Clone,
        count: usize,
    ) -> Self {
        let sampled = cells.clone().map(|(v, _)| v).sum::<f64>() / count as f64;
        Self::new(closed_form, sampled, cells.map(|(_, s2)| s2).sum(), count)
    }
}

/// `SAMPLED_COORDINATES` coordinates evenly spaced over `0..embed`.
pub(super) fn coordinates(embed: usize) -> Vec<usize> {
    let n = SAMPLED_COORDINATES.min(embed);
    (0..n).map(|t| t * embed / n).collect()
}

/// The sampler's `(Var R per head, its SE²)` and `(Σ_h Var contribution_k,
/// Σ_h SE²)` per sampled coordinate, for query row `(b, i)`.
pub(super) type RowSamples = (Vec<(f64, f64)>, Vec<(f64, f64)>);

pub(super) fn row_samples(
    c: &AttentionCapture,
    columns: &[f64],
    b: usize,
    i: usize,
    ks: &[usize],
    samples: u64,
    seed: u64,
) -> Result<RowSamples, Error> {
    let s_n = c.keys;
    let mut row_sum = Vec::with_capacity(c.heads);
    let mut output = vec![(0.0, 0.0); ks.len()];
    for h in 0..c.heads {
        let a = c.row(b, h, i);
        for (slot, &k) in ks.iter().enumerate() {
            let at = (h * ks.len() + slot) * s_n;
            let column = &columns[at..at + s_n];
            let budget = Budget::new(samples, derive_seed(seed, &format!("{b}.{i}.{h}.{k}")))?;
            let e = row_sums(a, column, c.p, budget)?;
            if slot == 0 {
                let r = e.row_sum_variance;
                row_sum.push((r.value, r.stderr * r.stderr));
            }
            let o = e.output_variance;
            output[slot].0 += o.value;
            output[slot].1 += o.stderr * o.stderr;
        }
    }
    Ok((row_sum, output))
}
