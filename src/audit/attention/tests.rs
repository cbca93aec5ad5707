//! Tests of the attention-site audit: exact enumeration of the closed
//! forms, the sampled check, warnings and bad captures.

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
    let a = audit_attention_site(&c, 4096, Tokens::All, 1).unwrap();
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
            assert!((got_mean - mean[k]).abs() <= tolerance::bound(ENUMERATION_ROUNDINGS, scale));
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
            .install(|| audit_attention_site(&c, 1 << 14, Tokens::All, 9).unwrap())
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
    let a = audit_attention_site(&c, 256, Tokens::All, 1).unwrap();
    assert_eq!(a.max_row_sum_variance, 1.0);
    assert!(a.warnings.is_empty());
    let a = audit_attention_site(&tiny(0.6), 256, Tokens::All, 1).unwrap();
    assert!(a.max_row_sum_variance < 1.0);
    c.p = 0.6;
    assert!(
        audit_attention_site(&c, 256, Tokens::All, 1)
            .unwrap()
            .warnings[0]
            .contains("one-hot")
    );
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

/// The closed forms the plain way, row by row (the sums of the module docs
/// written out, no matrix products): `(E[out], Var(out), Var R per head)`
/// of query `i` of batch element `b`, with the magnitudes `Σ |terms|` of
/// each output's mean and variance.
fn plain_row(c: &AttentionCapture, b: usize, i: usize) -> [Vec<f64>; 5] {
    let odds = c.p / (1.0 - c.p);
    let (hn, s_n, j_n, e_n) = (c.heads, c.keys, c.head_dim, c.embed);
    let mut mean = c.out_bias.clone();
    let mut variance = vec![0.0; e_n];
    let mut mean_size: Vec<f64> = c.out_bias.iter().map(|x| x.abs()).collect();
    let mut row_sums = Vec::new();
    for h in 0..hn {
        let a = c.row(b, h, i);
        row_sums.push(odds * a.iter().map(|x| x * x).sum::<f64>());
        for k in 0..e_n {
            for (s, a) in a.iter().enumerate() {
                let (mut w, mut w_size) = (0.0, 0.0);
                for j in 0..j_n {
                    let term = c.out_weight[k * hn * j_n + h * j_n + j]
                        * c.values[((b * hn + h) * s_n + s) * j_n + j];
                    w += term;
                    w_size += term.abs();
                }
                mean[k] += a * w;
                mean_size[k] += a * w_size;
                variance[k] += odds * a * a * w * w;
            }
        }
    }
    [mean, variance, row_sums, mean_size, Vec::new()]
}

/// A capture of random entries: 2 batch elements, 3 heads of width 3, 131
/// queries and 259 outputs (more than one block of rows and columns), 5 keys, softmax rows
/// with a masked key.
fn random_capture(seed: u64) -> AttentionCapture {
    use rand::{RngExt, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let (bn, hn, l_n, s_n, j_n, e_n) = (2, 3, 131, 5, 3, 259);
    let mut normal =
        |n: usize| -> Vec<f64> { (0..n).map(|_| rng.random::<f64>() * 2.0 - 1.0).collect() };
    let values = normal(bn * hn * s_n * j_n);
    let out_weight = normal(e_n * hn * j_n);
    let out_bias = normal(e_n);
    let mut weights = normal(bn * hn * l_n * s_n);
    for row in weights.chunks_mut(s_n) {
        row[s_n - 1] = 0.0;
        let total: f64 = row.iter().map(|x| x.exp()).sum::<f64>() - 1.0;
        for x in &mut row[..s_n - 1] {
            *x = x.exp() / total;
        }
    }
    AttentionCapture::new(
        "random".into(),
        0.2,
        (bn, hn, l_n, s_n, j_n, e_n),
        weights,
        values,
        out_weight,
        out_bias,
    )
    .unwrap()
}

/// Roundings of a closed form, matrix products or plain loops: a `w` of
/// `J` products (`2J`), times `a` (or `a²` and `w²`: 3 more), summed over
/// `H·S` terms, the bias and `p/q`; both sides' counts together, doubled
/// for the products' other order: `4 (2J + 4 + H·S)`, at most 100 here.
const PRODUCT_ROUNDINGS: f64 = 100.0;

#[test]
fn matrix_products_match_the_plain_sums_on_random_captures() {
    for seed in 0..3 {
        let c = random_capture(seed);
        let a = audit_attention_site(&c, 256, Tokens::Sample(2), seed).unwrap();
        for b in 0..c.batch {
            for i in 0..c.queries {
                let [mean, variance, row_sums, mean_size, _] = plain_row(&c, b, i);
                let r = b * c.queries + i;
                for k in 0..c.embed {
                    let at = r * c.embed + k;
                    let (got_mean, got_var) = (a.mean[at], a.variance[at]);
                    let mean_bound = tolerance::bound(PRODUCT_ROUNDINGS, mean_size[k]);
                    assert!((got_mean - mean[k]).abs() <= mean_bound, "{b} {i} {k}");
                    let var_bound = tolerance::bound(PRODUCT_ROUNDINGS, variance[k]);
                    assert!((got_var - variance[k]).abs() <= var_bound, "{b} {i} {k}");
                }
                let max = row_sums.iter().fold(0.0f64, |m, x| m.max(*x));
                assert!(max <= a.max_row_sum_variance);
            }
        }
        let mean_row_sums = (0..c.batch * c.queries)
            .flat_map(|r| plain_row(&c, r / c.queries, r % c.queries)[2].clone())
            .sum::<f64>()
            / (c.batch * c.queries * c.heads) as f64;
        // A mean of positive terms, each within a few roundings: at most
        // one rounding per term summed plus the products' count.
        let terms = (c.batch * c.queries * c.heads * c.keys) as f64;
        let bound = tolerance::bound(terms + PRODUCT_ROUNDINGS, mean_row_sums);
        assert!((a.mean_row_sum_variance - mean_row_sums).abs() <= bound);
    }
}
