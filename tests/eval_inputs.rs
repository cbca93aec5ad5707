//! Inputs `eval` accepts that a framework produces: a float32 softmax row
//! (its sum is 1 only to float32 rounding). No statistical assertion.

use dropmc::engine::Budget;
use dropmc::eval::attn::{attn, float32_row_sum_slack};

/// A softmax computed in float32 the way a framework does it: subtract the
/// max, exponentiate, sum in order, divide.
fn float32_softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f32> = logits.iter().map(|l| (l - max).exp()).collect();
    let s: f32 = e.iter().sum();
    e.iter().map(|v| f64::from(v / s)).collect()
}

#[test]
fn float32_softmax_rows_are_accepted_and_renormalised() {
    let mut off_by_rounding = 0;
    for d in [3usize, 17, 128, 1000] {
        let logits: Vec<f32> = (0..d)
            .map(|i| ((i * 37 % 11) as f32) * 0.37 - 1.5)
            .collect();
        let a = float32_softmax(&logits);
        let total: f64 = a.iter().sum();
        // The derived bound covers the row actually produced.
        assert!(
            (total - 1.0).abs() <= float32_row_sum_slack(d),
            "d = {d}: {total}"
        );
        let out = attn(&a, 0.1, None, Budget::new(200, 1).unwrap()).expect("accepted");
        let warned = out.results.iter().any(|r| !r.warnings.is_empty());
        assert_eq!(warned, total != 1.0, "d = {d}: sum {total}");
        off_by_rounding += usize::from(total != 1.0);
    }
    // The test exercises the renormalisation at least once.
    assert!(off_by_rounding > 0);
}

#[test]
fn a_row_off_by_more_than_rounding_is_refused() {
    let d = 128;
    let mut a = vec![1.0 / d as f64; d];
    a[0] += 2.0 * float32_row_sum_slack(d);
    let err = attn(&a, 0.1, None, Budget::new(200, 1).unwrap()).unwrap_err();
    assert!(err.to_string().contains("--a sums to"), "{err}");
}

/// The progress observer sees the draws of `eval ln`'s kernels and changes
/// no bit of the output (no statistical assertion).
#[test]
fn observing_progress_changes_nothing() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    let x: Vec<f64> = (0..40).map(|k| (k as f64 * 0.37).sin() + 0.3).collect();
    let budget = Budget::new(300_000, 3).unwrap();
    let plain = dropmc::eval::norm::ln(&x, 0.2, None, None, 1e-5, budget).unwrap();
    let last = Arc::new(AtomicU64::new(0));
    let seen = Arc::clone(&last);
    let observed = dropmc::fast::observe_progress(
        Box::new(move |done, total| {
            assert!(done <= total);
            seen.store(done, Ordering::Relaxed);
        }),
        || dropmc::eval::norm::ln(&x, 0.2, None, None, 1e-5, budget).unwrap(),
    );
    assert_eq!(plain, observed);
    assert_eq!(last.load(Ordering::Relaxed), budget.samples);
}
