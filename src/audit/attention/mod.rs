//! Auditing a model's attention-dropout sites: `nn.MultiheadAttention`'s
//! dropout on the softmax weights, on the model's own softmax rows.
//!
//! # Setting
//!
//! One attention module with `H` heads of width `J`, `S` keys, `L` queries
//! (per batch element), the output projection `W_o` (`E × H·J`, bias `c`).
//! For query `i` the capture holds, per head `h`, the softmax row
//! `a_{h,i,·}` over the keys (after the key padding and attention masks: a
//! masked key has `a = 0`) and the projected values `v_{h,s,j}`. Dropout
//! keeps each weight with its own mask `m_{h,i,s} ~ Bernoulli(q)`,
//! independent over heads, queries and keys (`nn.MultiheadAttention` drops
//! the `(B, H, L, S)` weight tensor elementwise), and rescales by `1/q`:
//! `b_{h,i,s} = m_{h,i,s} a_{h,i,s} / q`.
//!
//! # Derivation (exact)
//!
//! The head output is `o_{h,i,j} = Σ_s b_{h,i,s} v_{h,s,j}` and the module's
//! output `out_{i,k} = c_k + Σ_h Σ_j W_o[k, (h,j)] o_{h,i,j}`. Exchanging the
//! two finite sums,
//!
//! ```text
//! out_{i,k} = c_k + Σ_h Σ_s b_{h,i,s} w_{h,s,k},   w_{h,s,k} = Σ_j W_o[k, (h,j)] v_{h,s,j}
//! ```
//!
//! a weighted sum of the independent `b`'s with fixed coefficients `w`
//! (the values projected through the head's block of `W_o`). Each `b` is an
//! inverted-dropout unit of value `a` ([`crate::formulas::attention`]):
//! `E[b] = a`, `Var b = q (a/q)² − a² = (p/q) a²`. Hence, by linearity and
//! by independence (the variance of a sum of independent terms is the sum of
//! their variances),
//!
//! ```text
//! E[out_{i,k}]   = c_k + Σ_h Σ_s a_{h,i,s} w_{h,s,k}        = the eval output
//! Var(out_{i,k}) = Σ_h Σ_s w_{h,s,k}² Var b_{h,i,s}        = (p/q) Σ_h Σ_s a_{h,i,s}² w_{h,s,k}²
//! Var R_{h,i}    = Var Σ_s b_{h,i,s}                        = (p/q) Σ_s a_{h,i,s}²
//! ```
//!
//! The mean is the evaluation output exactly (eval mode runs the same
//! softmax without the masks): attention dropout moves no expectation of
//! the module's own output, only its spread. (It does move the expectation
//! of whatever nonlinear layer reads the output; that is a norm site's
//! business.) The row sum `R` no longer sums to one: a softmax row with
//! `(p/q) Σ a² > 1` is nearly one-hot, and a fraction `p` of the masks
//! removes the whole attention of that query and head.
//!
//! # The sampled check
//!
//! Where it is cheap the fast attention-row sampler
//! ([`crate::ops::fast::attention_row::row_sums`]) estimates, per query and head
//! and for a few output coordinates `k ∈ K` (evenly spaced), `Var R` and the
//! variance of the head's contribution `Σ_s b_s w_{h,s,k}` from the masks
//! themselves; over the heads the contributions' variances add (independent
//! masks), and so do the estimates' squared standard errors. The means over
//! rows of these independent estimates are z-tested against the closed
//! forms over the same rows and coordinates.

mod capture;
mod closed;
mod rows;

use rayon::prelude::*;
use serde::Serialize;

use crate::audit::budget::Tokens;
use crate::audit::progress::{Progress, audit_in_turn};
use crate::engine::derive_seed;
use crate::error::Error;
use crate::ops::Rate;
use crate::stats::critical_z;
pub use capture::AttentionCapture;
use closed::{BatchForms, batch_forms};
pub use rows::SampledCheck;
use rows::{RowSamples, coordinates, row_samples};

/// Mask draws per query, head and sampled coordinate of the sampled check
/// by default (the closed forms need none): at 4096 the check of a 64-token,
/// 8-head site resolves the mean output variance to about 1 % while the
/// 6-layer d = 512 audit of docs/audit.md spends about a second on it.
pub const DEFAULT_ATTENTION_SAMPLES: u64 = 1 << 12;

/// Query rows per site the sampled check visits by default (a seeded
/// uniform sample; the closed forms cover every row): the check compares
/// the sampler with the closed forms on the same rows, so fewer rows lose
/// power, not validity, and on BERT-base at 1 × 128 tokens the check on
/// every row cost three times the norm sites (docs/performance.md).
pub const DEFAULT_ATTENTION_ROWS: usize = 8;

/// Output coordinates the sampled check visits (evenly spaced over `E`).
pub const SAMPLED_COORDINATES: usize = 4;

/// Above this largest `(p/q) Σ a²` a softmax row is nearly one-hot: the
/// spread of its row sum exceeds the sum itself.
pub const ONE_HOT_ROW_SUM_VARIANCE: f64 = 1.0;

/// The audit of one attention site.
#[derive(Debug, Clone, Serialize)]
pub struct AttentionAudit {
    pub name: String,
    pub p: f64,
    pub heads: usize,
    pub keys: usize,
    /// Query rows over the batch (`B · L`).
    pub queries: usize,
    /// Query rows the sampled check visited (all, or a seeded sample).
    pub sampled_queries: usize,
    pub embed: usize,
    /// Mean over heads and query rows of `Var R = (p/q) Σ a²`.
    pub mean_row_sum_variance: f64,
    /// The largest `(p/q) Σ a²`.
    pub max_row_sum_variance: f64,
    /// Mean over query rows and coordinates of `Var(out_k)`.
    pub mean_output_variance: f64,
    /// Mask draws per query, head and coordinate of the sampled check.
    pub samples: u64,
    /// The coordinates the sampled check visited.
    pub sampled_coordinates: Vec<usize>,
    /// The sampled `Var R` over every head and query row.
    pub row_sum_check: SampledCheck,
    /// The sampled `Var(out_k)` over every query row and the sampled `k`.
    pub output_check: SampledCheck,
    pub warnings: Vec<String>,
    /// `E[out]`, `B·L × E`: the eval output.
    #[serde(skip)]
    pub mean: Vec<f64>,
    /// `Var(out)`, `B·L × E`.
    #[serde(skip)]
    pub variance: Vec<f64>,
}

/// Audits one attention site: the closed forms on every query row, and the
/// sampled check at `samples` draws on the query rows `rows` picks (every
/// row, or a seeded uniform sample of them: [`crate::audit::budget`]; the
/// check compares the sampler with the closed forms on the same rows, so the
/// row sample adds no error to it), each row from its own derived seed, so
/// the bits do not depend on the thread count. The cancellation hook is
/// asked (and the progress told) between chunks of [`QUERY_CHUNK`] rows
/// of the closed forms and batches of [`crate::audit::TOKEN_BATCH`]
/// sampled rows. (The tests' entry: the audit's is
/// [`audit_attention_sites_rows`], one progress over every site.)
#[cfg(test)]
pub fn audit_attention_site(
    c: &AttentionCapture,
    samples: u64,
    rows_sampled: Tokens,
    seed: u64,
) -> Result<AttentionAudit, Error> {
    let work = site_work(c, samples, rows_sampled);
    audit_site_progress(c, samples, rows_sampled, seed, &mut Progress::new(1, work))
}

/// Query rows of one batch element per call of the closed forms: a
/// checkpoint of the cancellation hook and a step of the progress after
/// each (at BERT-base's shape about a tenth of a second of products).
pub const QUERY_CHUNK: usize = 512;

/// The closed forms' work on `rows` query rows, in the progress's units
/// (mask-units of the sampler, [`crate::audit::progress`]): the variance's
/// `rows · H · S · E` multiply-adds, counted as one unit each (a GEMM
/// multiply-add costs about what a sampled key of one mask does, within a
/// small factor: only the time-left estimate depends on it).
fn closed_form_work(c: &AttentionCapture, rows: usize) -> f64 {
    (rows * c.heads * c.keys * c.embed) as f64
}

/// The sampled check's work on `rows` rows: `rows · H · |K| · S · samples`.
fn sampled_work(c: &AttentionCapture, rows: usize, samples: u64) -> f64 {
    (rows * c.heads * coordinates(c.embed).len() * c.keys) as f64 * samples as f64
}

/// A site's planned work: the closed forms on every row, the check on the
/// rows `rows` picks.
pub(crate) fn site_work(c: &AttentionCapture, samples: u64, rows: Tokens) -> f64 {
    let all = c.batch * c.queries;
    closed_form_work(c, all) + sampled_work(c, rows.count(all), samples)
}

fn audit_site_progress(
    c: &AttentionCapture,
    samples: u64,
    rows_sampled: Tokens,
    seed: u64,
    progress: &mut Progress,
) -> Result<AttentionAudit, Error> {
    let odds = Rate::new(c.p)?.odds();
    let site_seed = derive_seed(seed, &c.name);
    let rows: Vec<(usize, usize)> = (0..c.batch)
        .flat_map(|b| (0..c.queries).map(move |i| (b, i)))
        .collect();
    let ks = coordinates(c.embed);
    let (mut mean, mut variance, mut row_sums) = (Vec::new(), Vec::new(), Vec::new());
    let mut columns: Vec<Vec<f64>> = Vec::with_capacity(c.batch);
    for b in 0..c.batch {
        for i0 in (0..c.queries).step_by(QUERY_CHUNK) {
            crate::engine::cancel::checkpoint()?;
            let end = c.queries.min(i0 + QUERY_CHUNK);
            let f: BatchForms = batch_forms(c, b, i0..end, odds, &ks);
            mean.extend(f.mean);
            variance.extend(f.variance);
            row_sums.extend(f.row_sum_variance);
            if i0 == 0 {
                columns.push(f.columns);
            }
            progress.advance(closed_form_work(c, end - i0), false);
        }
    }
    let chosen = rows_sampled.indices(rows.len(), derive_seed(site_seed, "row sample"));
    let mut sampled: Vec<RowSamples> = Vec::with_capacity(chosen.len());
    for batch in chosen.chunks(crate::audit::TOKEN_BATCH) {
        crate::engine::cancel::checkpoint()?;
        let carry = crate::engine::cancel::carry();
        let batch: Vec<RowSamples> = batch
            .par_iter()
            .map(|&r| {
                let (b, i) = rows[r];
                carry.run(|| row_samples(c, &columns[b], b, i, &ks, samples, site_seed))
            })
            .collect::<Result<_, Error>>()?;
        progress.advance(sampled_work(c, batch.len(), samples), false);
        sampled.extend(batch);
    }
    let n_rows = rows.len();
    let head_rows = n_rows * c.heads;
    let all_row_sums = row_sums.iter();
    let mean_row_sum_variance = all_row_sums.clone().sum::<f64>() / head_rows as f64;
    let max_row_sum_variance = all_row_sums.fold(0.0f64, |m, x| m.max(*x));
    let mean_output_variance = variance.iter().sum::<f64>() / (n_rows * c.embed) as f64;
    // The checks: the sampled rows' estimates against their own closed forms.
    let sampled_heads = chosen.len() * c.heads;
    let closed_row_sums = chosen
        .iter()
        .flat_map(|&r| &row_sums[r * c.heads..(r + 1) * c.heads])
        .sum::<f64>()
        / sampled_heads as f64;
    let row_sum_check = SampledCheck::pooled(
        closed_row_sums,
        sampled.iter().flat_map(|(r, _)| r.iter()),
        sampled_heads,
    );
    let cells = chosen.len() * ks.len();
    let closed_on_ks = chosen
        .iter()
        .flat_map(|&r| {
            let variance = &variance[r * c.embed..(r + 1) * c.embed];
            ks.iter().map(move |&k| variance[k])
        })
        .sum::<f64>()
        / cells as f64;
    let sampled_out = sampled.iter().flat_map(|(_, o)| o.iter());
    let output_check = SampledCheck::pooled(closed_on_ks, sampled_out, cells);
    let mut audit = AttentionAudit {
        name: c.name.clone(),
        p: c.p,
        heads: c.heads,
        keys: c.keys,
        queries: n_rows,
        sampled_queries: chosen.len(),
        embed: c.embed,
        mean_row_sum_variance,
        max_row_sum_variance,
        mean_output_variance,
        samples,
        sampled_coordinates: ks,
        row_sum_check,
        output_check,
        warnings: Vec::new(),
        mean,
        variance,
    };
    audit.warnings = warnings(&audit);
    Ok(audit)
}

fn warnings(a: &AttentionAudit) -> Vec<String> {
    let mut w = Vec::new();
    if a.max_row_sum_variance > ONE_HOT_ROW_SUM_VARIANCE {
        w.push(format!(
            "largest (p/q) sum a^2 = {:.3} > {ONE_HOT_ROW_SUM_VARIANCE}: a softmax row is nearly \
             one-hot and dropout removes its whole attention in a fraction p = {} of the masks",
            a.max_row_sum_variance, a.p
        ));
    }
    for (what, check) in [("row-sum", &a.row_sum_check), ("output", &a.output_check)] {
        if check.z.abs() > critical_z() {
            w.push(format!(
                "the sampled {what} variance is {:.1} standard errors from the closed form",
                check.z
            ));
        }
    }
    w
}

/// Audits every attention site (in order), the sampled check on the query
/// rows `rows` picks, the progress observer ([`crate::audit::progress`])
/// told each chunk of rows and each site.
pub fn audit_attention_sites_rows(
    captures: &[AttentionCapture],
    samples: u64,
    rows: Tokens,
    seed: u64,
) -> Result<Vec<AttentionAudit>, Error> {
    audit_in_turn(
        captures,
        |c| site_work(c, samples, rows),
        None,
        |c, _, progress| Ok((audit_site_progress(c, samples, rows, seed, progress)?, None)),
    )
}

#[cfg(test)]
mod tests;
