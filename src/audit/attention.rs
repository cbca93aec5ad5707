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

use rayon::prelude::*;
use serde::Serialize;

use crate::engine::{Budget, derive_seed};
use crate::error::{Error, check_finite_vec, check_len};
use crate::ops::Rate;
use crate::ops::fast::attention_row::row_sums;
use crate::stats::critical_z;

/// Mask draws per query, head and sampled coordinate of the sampled check
/// by default (the closed forms need none): at 4096 the check of a 64-token,
/// 8-head site resolves the mean output variance to about 1 % while the
/// 6-layer d = 512 audit of docs/audit.md spends about a second on it.
pub const DEFAULT_ATTENTION_SAMPLES: u64 = 1 << 12;

/// Output coordinates the sampled check visits (evenly spaced over `E`).
pub const SAMPLED_COORDINATES: usize = 4;

/// Above this largest `(p/q) Σ a²` a softmax row is nearly one-hot: the
/// spread of its row sum exceeds the sum itself.
pub const ONE_HOT_ROW_SUM_VARIANCE: f64 = 1.0;

/// One attention site's capture (row-major, batch outermost).
#[derive(Debug, Clone)]
pub struct AttentionCapture {
    /// The `nn.MultiheadAttention`'s module name.
    pub name: String,
    pub p: f64,
    pub batch: usize,
    pub heads: usize,
    /// Queries per batch element (`L`).
    pub queries: usize,
    /// Keys (`S`).
    pub keys: usize,
    /// Head width (`J`).
    pub head_dim: usize,
    /// Output width (`E`).
    pub embed: usize,
    /// The softmax weights, `B × H × L × S`.
    pub weights: Vec<f64>,
    /// The projected values, `B × H × S × J`.
    pub values: Vec<f64>,
    /// `W_o`, `E × H·J` (torch's `out_proj.weight`).
    pub out_weight: Vec<f64>,
    /// `c`, `E` (zeros when the projection has no bias).
    pub out_bias: Vec<f64>,
}

/// The shape of a capture: `(batch, heads, queries, keys, head_dim, embed)`.
pub type AttentionShape = (usize, usize, usize, usize, usize, usize);

impl AttentionCapture {
    /// A capture from its parts, checked for shape, finiteness and weights
    /// `≥ 0`.
    pub fn new(
        name: String,
        p: f64,
        shape: AttentionShape,
        weights: Vec<f64>,
        values: Vec<f64>,
        out_weight: Vec<f64>,
        out_bias: Vec<f64>,
    ) -> Result<Self, Error> {
        Rate::new(p)?;
        let (batch, heads, queries, keys, head_dim, embed) = shape;
        if [batch, heads, queries, keys, head_dim, embed].contains(&0) {
            return Err(Error::InvalidOption {
                what: format!(
                    "attention site {name}: every dimension must be positive, got {shape:?}"
                ),
            });
        }
        check_len("weights", &weights, batch * heads * queries * keys)?;
        check_len("values", &values, batch * heads * keys * head_dim)?;
        check_len("out_weight", &out_weight, embed * heads * head_dim)?;
        check_len("out_bias", &out_bias, embed)?;
        for (what, x) in [
            ("weights", &weights),
            ("values", &values),
            ("out_weight", &out_weight),
            ("out_bias", &out_bias),
        ] {
            check_finite_vec(what, x)?;
        }
        if weights.iter().any(|a| *a < 0.0) {
            return Err(Error::InvalidOption {
                what: format!("attention site {name}: a softmax weight is negative"),
            });
        }
        Ok(AttentionCapture {
            name,
            p,
            batch,
            heads,
            queries,
            keys,
            head_dim,
            embed,
            weights,
            values,
            out_weight,
            out_bias,
        })
    }

    /// The softmax row of batch `b`, head `h`, query `i`.
    fn row(&self, b: usize, h: usize, i: usize) -> &[f64] {
        let start = ((b * self.heads + h) * self.queries + i) * self.keys;
        &self.weights[start..start + self.keys]
    }

    /// `w_{h,s,k} = Σ_j W_o[k, (h,j)] v_{h,s,j}` of batch `b`, laid out
    /// `H × E × S` (key innermost: a coordinate's column is contiguous).
    fn projected_values(&self, b: usize) -> Vec<f64> {
        let (hn, s_n, j_n, e_n) = (self.heads, self.keys, self.head_dim, self.embed);
        let mut w = vec![0.0; hn * e_n * s_n];
        for h in 0..hn {
            let v = &self.values[(b * hn + h) * s_n * j_n..(b * hn + h + 1) * s_n * j_n];
            for k in 0..e_n {
                let wo = &self.out_weight[k * hn * j_n + h * j_n..k * hn * j_n + (h + 1) * j_n];
                let column = &mut w[(h * e_n + k) * s_n..(h * e_n + k + 1) * s_n];
                for (s, out) in column.iter_mut().enumerate() {
                    *out = wo
                        .iter()
                        .zip(&v[s * j_n..(s + 1) * j_n])
                        .map(|(a, b)| a * b)
                        .sum();
                }
            }
        }
        w
    }
}

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
    fn new(closed_form: f64, sampled: f64, variance_sum: f64, count: usize) -> Self {
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
    fn pooled<'a>(
        closed_form: f64,
        cells: impl Iterator<Item = &'a (f64, f64)> + Clone,
        count: usize,
    ) -> Self {
        let sampled = cells.clone().map(|(v, _)| v).sum::<f64>() / count as f64;
        Self::new(closed_form, sampled, cells.map(|(_, s2)| s2).sum(), count)
    }
}

/// The audit of one attention site.
#[derive(Debug, Clone, Serialize)]
pub struct AttentionAudit {
    pub name: String,
    pub p: f64,
    pub heads: usize,
    pub keys: usize,
    /// Query rows over the batch (`B · L`).
    pub queries: usize,
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

/// The closed forms of one query row: `E[out]`, `Var(out)` (each `E`) and
/// `Var R` per head.
struct RowValues {
    mean: Vec<f64>,
    variance: Vec<f64>,
    row_sum_variance: Vec<f64>,
}

fn row_values(c: &AttentionCapture, w: &[f64], b: usize, i: usize, odds: f64) -> RowValues {
    let (s_n, e_n) = (c.keys, c.embed);
    let mut mean = c.out_bias.clone();
    let mut variance = vec![0.0; e_n];
    let mut row_sum_variance = Vec::with_capacity(c.heads);
    for h in 0..c.heads {
        let a = c.row(b, h, i);
        row_sum_variance.push(odds * a.iter().map(|x| x * x).sum::<f64>());
        for k in 0..e_n {
            let column = &w[(h * e_n + k) * s_n..(h * e_n + k + 1) * s_n];
            let (m, v) = a
                .iter()
                .zip(column)
                .fold((0.0, 0.0), |(m, v), (a, w)| (m + a * w, v + a * a * w * w));
            mean[k] += m;
            variance[k] += odds * v;
        }
    }
    RowValues {
        mean,
        variance,
        row_sum_variance,
    }
}

/// `SAMPLED_COORDINATES` coordinates evenly spaced over `0..embed`.
fn coordinates(embed: usize) -> Vec<usize> {
    let n = SAMPLED_COORDINATES.min(embed);
    (0..n).map(|t| t * embed / n).collect()
}

/// The sampler's `(Var R per head, its SE²)` and `(Σ_h Var contribution_k,
/// Σ_h SE²)` per sampled coordinate, for query row `(b, i)`.
type RowSamples = (Vec<(f64, f64)>, Vec<(f64, f64)>);

fn row_samples(
    c: &AttentionCapture,
    w: &[f64],
    b: usize,
    i: usize,
    ks: &[usize],
    samples: u64,
    seed: u64,
) -> Result<RowSamples, Error> {
    let (s_n, e_n) = (c.keys, c.embed);
    let mut row_sum = Vec::with_capacity(c.heads);
    let mut output = vec![(0.0, 0.0); ks.len()];
    for h in 0..c.heads {
        let a = c.row(b, h, i);
        for (slot, &k) in ks.iter().enumerate() {
            let column = &w[(h * e_n + k) * s_n..(h * e_n + k + 1) * s_n];
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

/// Audits one attention site: the closed forms on every query row, and the
/// sampled check at `samples` draws (each row from its own derived seed, so
/// the bits do not depend on the thread count).
pub fn audit_attention_site(
    c: &AttentionCapture,
    samples: u64,
    seed: u64,
) -> Result<AttentionAudit, Error> {
    let odds = Rate::new(c.p)?.odds();
    let site_seed = derive_seed(seed, &c.name);
    let projected: Vec<Vec<f64>> = (0..c.batch)
        .into_par_iter()
        .map(|b| c.projected_values(b))
        .collect();
    let rows: Vec<(usize, usize)> = (0..c.batch)
        .flat_map(|b| (0..c.queries).map(move |i| (b, i)))
        .collect();
    let ks = coordinates(c.embed);
    let per_row: Vec<(RowValues, RowSamples)> = rows
        .par_iter()
        .map(|&(b, i)| {
            let w = &projected[b];
            Ok((
                row_values(c, w, b, i, odds),
                row_samples(c, w, b, i, &ks, samples, site_seed)?,
            ))
        })
        .collect::<Result<_, Error>>()?;
    let n_rows = rows.len();
    let head_rows = n_rows * c.heads;
    let all_row_sums = per_row.iter().flat_map(|(v, _)| v.row_sum_variance.iter());
    let mean_row_sum_variance = all_row_sums.clone().sum::<f64>() / head_rows as f64;
    let max_row_sum_variance = all_row_sums.fold(0.0f64, |m, x| m.max(*x));
    let mean_output_variance = per_row
        .iter()
        .flat_map(|(v, _)| v.variance.iter())
        .sum::<f64>()
        / (n_rows * c.embed) as f64;
    let sampled_rows = per_row.iter().flat_map(|(_, (r, _))| r.iter());
    let row_sum_check = SampledCheck::pooled(mean_row_sum_variance, sampled_rows, head_rows);
    let cells = n_rows * ks.len();
    let closed_on_ks = per_row
        .iter()
        .flat_map(|(v, _)| ks.iter().map(|&k| v.variance[k]))
        .sum::<f64>()
        / cells as f64;
    let sampled_out = per_row.iter().flat_map(|(_, (_, o))| o.iter());
    let output_check = SampledCheck::pooled(closed_on_ks, sampled_out, cells);
    let mut audit = AttentionAudit {
        name: c.name.clone(),
        p: c.p,
        heads: c.heads,
        keys: c.keys,
        queries: n_rows,
        embed: c.embed,
        mean_row_sum_variance,
        max_row_sum_variance,
        mean_output_variance,
        samples,
        sampled_coordinates: ks,
        row_sum_check,
        output_check,
        warnings: Vec::new(),
        mean: per_row
            .iter()
            .flat_map(|(v, _)| v.mean.iter().copied())
            .collect(),
        variance: per_row
            .iter()
            .flat_map(|(v, _)| v.variance.iter().copied())
            .collect(),
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

/// Audits every attention site (in order).
pub fn audit_attention_sites(
    captures: &[AttentionCapture],
    samples: u64,
    seed: u64,
) -> Result<Vec<AttentionAudit>, Error> {
    captures
        .iter()
        .map(|c| audit_attention_site(c, samples, seed))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::tolerance;

    /// Two heads of width 2, three keys, two queries, three outputs: small
    /// enough to enumerate the `2^(H·S)` masks of each query.
    fn tiny(p: f64) -> AttentionCapture {
        let weights = vec![
            0.2, 0.3, 0.5, 0.6, 0.3, 0.1, // head 0, queries 0 and 1
            0.1, 0.1, 0.8, 0.0, 0.5, 0.5, // head 1 (a masked key)
        ];
        let values: Vec<f64> = (0..12).map(|t| ((t * 7 % 5) as f64 - 2.0) / 1.5).collect();
        let out_weight: Vec<f64> = (0..12).map(|t| ((t * 5 % 7) as f64 - 3.0) / 2.0).collect();
        AttentionCapture::new(
            "mha".into(),
            p,
            (1, 2, 2, 3, 2, 3),
            weights,
            values,
            out_weight,
            vec![0.5, -1.0, 0.25],
        )
        .unwrap()
    }

    /// The module's output under one mask set, straight from the definition
    /// `out = c + W_o concat_h(Σ_s b_s v_s)`: no `w`, no exchanged sums.
    fn forward(c: &AttentionCapture, i: usize, keep: impl Fn(usize, usize) -> bool) -> Vec<f64> {
        let q = 1.0 - c.p;
        let mut concat = vec![0.0; c.heads * c.head_dim];
        for h in 0..c.heads {
            for s in 0..c.keys {
                let b = if keep(h, s) {
                    c.row(0, h, i)[s] / q
                } else {
                    0.0
                };
                for j in 0..c.head_dim {
                    concat[h * c.head_dim + j] += b * c.values[(h * c.keys + s) * c.head_dim + j];
                }
            }
        }
        (0..c.embed)
            .map(|k| {
                c.out_bias[k]
                    + (0..concat.len())
                        .map(|t| c.out_weight[k * concat.len() + t] * concat[t])
                        .sum::<f64>()
            })
            .collect()
    }

    #[test]
    fn closed_forms_match_exact_enumeration() {
        let c = tiny(0.3);
        let a = audit_attention_site(&c, 4096, 1).unwrap();
        let q = 1.0 - c.p;
        let units = c.heads * c.keys;
        for i in 0..c.queries {
            let mut mean = vec![0.0; c.embed];
            let mut second = vec![0.0; c.embed];
            let mut row_sum_moments = [[0.0; 2]; 2];
            for mask in 0u32..1 << units {
                let keep = |h: usize, s: usize| mask >> (h * c.keys + s) & 1 == 1;
                let kept = mask.count_ones() as i32;
                let prob = q.powi(kept) * c.p.powi(units as i32 - kept);
                for (k, o) in forward(&c, i, keep).iter().enumerate() {
                    mean[k] += prob * o;
                    second[k] += prob * o * o;
                }
                for (h, m) in row_sum_moments.iter_mut().enumerate() {
                    let r: f64 = (0..c.keys)
                        .filter(|&s| keep(h, s))
                        .map(|s| c.row(0, h, i)[s] / q)
                        .sum();
                    m[0] += prob * r;
                    m[1] += prob * r * r;
                }
            }
            for k in 0..c.embed {
                let var = second[k] - mean[k] * mean[k];
                let got_mean = a.mean[i * c.embed + k];
                let got_var = a.variance[i * c.embed + k];
                // 64 masks × (a forward of ~30 roundings, a product, a sum):
                // the enumeration's roundings bound both sides' errors.
                let scale = second[k].abs() + mean[k] * mean[k];
                assert!(
                    (got_mean - mean[k]).abs() <= tolerance::bound(ENUMERATION_ROUNDINGS, scale)
                );
                assert!((got_var - var).abs() <= tolerance::bound(ENUMERATION_ROUNDINGS, scale));
            }
            for (h, m) in row_sum_moments.iter().enumerate() {
                let var = m[1] - m[0] * m[0];
                let closed = c.p / q * c.row(0, h, i).iter().map(|x| x * x).sum::<f64>();
                assert!((closed - var).abs() <= tolerance::bound(ENUMERATION_ROUNDINGS, m[1]));
            }
        }
    }

    /// Roundings of one enumerated moment: 64 masks summed (63), each a
    /// product of a 6-factor probability and a forward of at most 3 keys ×
    /// 2 heads × 2 widths plus the 4-term projection (about 24), and the
    /// variance's subtraction: fewer than 128.
    const ENUMERATION_ROUNDINGS: f64 = 128.0;

    #[test]
    fn sampled_check_agrees_and_bits_do_not_depend_on_threads() {
        let c = tiny(0.3);
        let on = |threads: usize| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| audit_attention_site(&c, 1 << 14, 9).unwrap())
        };
        let (one, two) = (on(1), on(2));
        assert_eq!(one.row_sum_check, two.row_sum_check);
        assert_eq!(one.output_check, two.output_check);
        assert!(
            one.row_sum_check.z.abs() < critical_z(),
            "{:?}",
            one.row_sum_check
        );
        assert!(
            one.output_check.z.abs() < critical_z(),
            "{:?}",
            one.output_check
        );
        assert_eq!(one.sampled_coordinates, vec![0, 1, 2]);
    }

    #[test]
    fn one_hot_rows_warn_and_bad_captures_are_errors() {
        let mut c = tiny(0.5);
        c.weights = vec![1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0];
        let a = audit_attention_site(&c, 256, 1).unwrap();
        assert_eq!(a.max_row_sum_variance, 1.0);
        assert!(a.warnings.is_empty());
        let a = audit_attention_site(&tiny(0.6), 256, 1).unwrap();
        assert!(a.max_row_sum_variance < 1.0);
        c.p = 0.6;
        assert!(audit_attention_site(&c, 256, 1).unwrap().warnings[0].contains("one-hot"));
        let short = AttentionCapture::new(
            "x".into(),
            0.1,
            (1, 1, 1, 2, 1, 1),
            vec![0.5],
            vec![1.0, 2.0],
            vec![1.0],
            vec![0.0],
        );
        assert!(short.is_err());
        let negative = AttentionCapture::new(
            "x".into(),
            0.1,
            (1, 1, 1, 2, 1, 1),
            vec![-0.5, 1.5],
            vec![1.0, 2.0],
            vec![1.0],
            vec![0.0],
        );
        assert!(matches!(negative, Err(Error::InvalidOption { .. })));
    }
}
