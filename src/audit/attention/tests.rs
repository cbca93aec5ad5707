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
