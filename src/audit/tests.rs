//! Tests of [`super::audit_site`] and its token sample.
use super::*;

/// A bypass LayerNorm site of `tokens` tokens of width `d` (also the
/// estimate's tests').
pub(super) fn capture(d: usize, tokens: usize) -> SiteCapture {
    capture_scaled(d, tokens, |_| 1.0)
}

/// A bypass LayerNorm site of `tokens` tokens of width `d`, with fixed
/// patterned `v` and `h`; token `t`'s `v` is multiplied by `scale(t)`.
fn capture_scaled(d: usize, tokens: usize, scale: impl Fn(usize) -> f64) -> SiteCapture {
    let v: Vec<f64> = (0..d * tokens)
        .map(|i| scale(i / d) * (((i * 37 % 11) as f64 - 5.0) / 3.0))
        .collect();
    let h: Vec<f64> = (0..d * tokens)
        .map(|i| ((i * 13 % 7) as f64 - 3.0) / 2.0)
        .collect();
    SiteCapture::new(
        "s".into(),
        Form::Bypass,
        0.2,
        d,
        v,
        h,
        true,
        vec![1.0; d],
        vec![0.0; d],
        1e-5,
    )
    .unwrap()
}

#[test]
fn same_bits_on_any_thread_count() {
    let c = capture(64, 6);
    let on = |threads: usize| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| audit_site(&c, 4096, 9).unwrap())
    };
    let (one, two) = (on(1), on(2));
    assert_eq!(one.truth, two.truth);
    assert_eq!(one.truth_se, two.truth_se);
    assert!(!one.exact && one.truth_se.iter().all(|s| *s > 0.0));
}

#[test]
fn a_token_sample_estimates_the_gap_over_every_token() {
    // 240 tokens, the first half with small dropout inputs (small gaps),
    // the second with large ones: a sample that is not uniform (the
    // first 40 tokens, say) is off by many SEs. d = 12 (enumerated truth): the gap's only
    // noise is the token sample's.
    let (d, total) = (12, 240);
    let c = capture_scaled(d, total, |t| if t < total / 2 { 0.3 } else { 2.0 });
    let all = audit_site(&c, 4096, 5).unwrap();
    let z = crate::stats::critical_z();
    for seed in 0..4 {
        let some = audit_site_tokens(&c, 4096, Tokens::Sample(40), seed).unwrap();
        let indices = some.token_indices.clone().unwrap();
        assert_eq!(
            (some.tokens, some.tokens_total, indices.len()),
            (40, total, 40)
        );
        // The sampled tokens' truth rows are those of the full audit.
        for (row, &t) in indices.iter().enumerate() {
            assert_eq!(
                some.truth[row * d..(row + 1) * d],
                all.truth[t * d..(t + 1) * d]
            );
        }
        for (a, s) in [
            (all.uncorrected, some.uncorrected),
            (all.first_order, some.first_order),
        ] {
            let off = (s.mean_square - a.mean_square).abs();
            assert!(
                off < z * s.mean_square_se,
                "{off} vs SE {}",
                s.mean_square_se
            );
        }
    }
    assert!(
        report::table(&[audit_site_tokens(&c, 4096, Tokens::Sample(40), 0).unwrap()])
            .contains("40 of 240")
    );
}

#[test]
fn enumerated_truth_has_no_noise_and_the_correction_helps() {
    let a = audit_site(&capture(12, 4), 4096, 1).unwrap();
    assert!(a.exact && a.truth_se.iter().all(|s| *s == 0.0));
    assert!(a.first_order.rms < a.uncorrected.rms);
}

/// Issue 52: an enumerated truth draws no mask, whatever was asked; the
/// row (and the JSON the CLI and the Python binding print) says 0, a
/// sampled one the masks it drew.
#[test]
fn a_site_reports_the_masks_it_drew() {
    let exact = audit_site(&capture(12, 2), 1_000_000_000_000, 1).unwrap();
    assert!(exact.exact);
    assert_eq!(exact.samples, 0);
    let json: serde_json::Value = serde_json::from_str(&report::json(&[exact])).unwrap();
    assert_eq!(json[0]["samples"], 0);
    let sampled = audit_site(&capture(24, 1), 256, 1).unwrap();
    assert!(!sampled.exact);
    assert_eq!(sampled.samples, 256);
}

#[test]
fn a_compound_site_is_enumerated_with_c2_and_has_no_second_order() {
    let plain = capture(16, 4);
    let v = plain.v.clone();
    let compound = SiteCapture::new(
        "c".into(),
        Form::Plain,
        0.2,
        16,
        v,
        vec![],
        true,
        (0..16).map(|k| 0.5 + k as f64 / 16.0).collect(),
        vec![0.1; 16],
        1e-5,
    )
    .and_then(|c| {
        c.into_compound(
            vec![1.5; 16],
            (0..16).map(|k| k as f64 / 8.0).collect(),
            1e-5,
        )
    })
    .unwrap();
    let a = audit_site(&compound, 4096, 2).unwrap();
    assert_eq!((a.form, a.norm), (Form::Compound, "LN→LN"));
    assert!(a.exact && a.second_order.is_none());
    let c1 = a.c1_only.unwrap();
    assert!(a.first_order.rms < c1.rms && c1.rms < a.uncorrected.rms);
    // Only a plain LayerNorm site can become compound.
    assert!(
        plain
            .into_compound(vec![1.0; 16], vec![0.0; 16], 0.0)
            .is_err()
    );
}

#[test]
fn a_token_mask_site_is_exact_and_its_two_point_form_leaves_rounding_alone() {
    let c = capture(64, 5).with_mask_groups(&[3; 64]).unwrap();
    let a = audit_site(&c, 4096, 4).unwrap();
    // One group: two masks, enumerated whatever d.
    assert!(a.exact && a.truth_se.iter().all(|s| *s == 0.0));
    let two_point = a.two_point.unwrap();
    // Both the enumeration and the two-point form evaluate the norm at
    // the same two inputs and weight them by q and p: they differ by the
    // rounding of two norm evaluations and a weighted sum.
    use crate::stats::tolerance::{AFFINE_ROUNDINGS, bound, norm_statistic_roundings};
    let largest = a.truth.iter().fold(0.0f64, |m, t| m.max(t.abs()));
    let rounding = bound(
        2.0 * (norm_statistic_roundings(64) + AFFINE_ROUNDINGS) + 4.0,
        largest,
    );
    assert!(two_point.rms <= rounding, "{} > {rounding}", two_point.rms);
    let table = report::table(&[a]);
    assert!(table.contains("gap 2-point") && table.contains("mask: s: shared, token"));
    // The elementwise truth of the same activations differs: the mask's
    // structure changes the expectation.
    let elementwise = audit_site(&capture(64, 5), 4096, 4).unwrap();
    let shared = audit_site(&c, 4096, 4).unwrap();
    let differ = elementwise
        .truth
        .iter()
        .zip(&elementwise.truth_se)
        .zip(&shared.truth)
        .any(|((e, s), t)| (e - t).abs() > crate::stats::critical_z() * s);
    assert!(differ);
}

#[test]
fn the_model_eval_output_replaces_the_recomputed_one() {
    let c = capture(12, 3);
    let plain = audit_site(&c, 4096, 1).unwrap();
    // Handing back the truth itself as the model's eval output: its gap is 0.
    let from_model = audit_site(
        &c.clone().with_eval_output(plain.truth.clone()).unwrap(),
        4096,
        1,
    )
    .unwrap();
    assert!(from_model.eval_from_model && from_model.uncorrected.rms == 0.0);
    assert!(plain.uncorrected.rms > 0.0);
    assert!(capture(12, 3).with_eval_output(vec![f64::NAN; 36]).is_err());
    assert!(capture(12, 3).with_mask_groups(&[0; 11]).is_err());
}

#[test]
fn bad_captures_are_typed_errors() {
    let bad_rows = SiteCapture::new(
        "s".into(),
        Form::Plain,
        0.1,
        4,
        vec![1.0; 6],
        vec![],
        true,
        vec![1.0; 4],
        vec![0.0; 4],
        0.0,
    );
    assert!(matches!(bad_rows, Err(Error::InvalidOption { .. })));
    let bad_p = SiteCapture::new(
        "s".into(),
        Form::Plain,
        1.5,
        2,
        vec![1.0, 2.0],
        vec![],
        true,
        vec![1.0; 2],
        vec![0.0; 2],
        0.0,
    );
    assert!(bad_p.is_err());
}
