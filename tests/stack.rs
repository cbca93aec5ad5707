//! The deep-stack experiment asserts each of the dropout-before-BatchNorm note's claims about dropout
//! before BatchNorm, with the suite's statistics.
//!
//! One run of [`dropmc::eval::stack::run`] (64 random networks at p = 0, 0.1 and
//! 0.5, the same networks at every rate) backs all the statistical
//! assertions below; each is a one- or two-sided Student-t test (63 degrees
//! of freedom) at the suite's per-assertion level, on a paired contrast
//! computed inside each replicate so that its standard error is the paired
//! one. Each goes through `tests/common`, which records it for
//! `tests/zz_budget.rs`.

mod common;

use std::sync::LazyLock;

use dropmc::engine::DEFAULT_SEED;
use dropmc::engine::{Budget, derive_seed, stream};
use dropmc::eval::stack::{LayerRow, RateTable, StackConfig, StackTable, run, run_replicate};
use dropmc::ops::Subject;
use dropmc::stats::Estimate;

const RATES: [f64; 2] = [0.1, 0.5];
/// Replicates (random networks). With Student-t at `REPLICATES − 1`
/// degrees of freedom the one-sided 10⁻¹⁰ critical value is 9.25 at 32
/// replicates and 7.57 at 64 (mpmath); the weakest contrast (`fold_half_lo`
/// at p = 0.1, layer 1) had t = 8.9 at 32, about 12.6 expected at 64. The
/// normal cut-off 6.47 would be honest (size within twice nominal) only from
/// about 650 replicates: the t quantile exceeds z by `(z³ + z)/(4ν)`, which
/// moves the tail by `exp(z (z³ + z)/(4ν)) ≤ 2` for `ν ≥ 650`.
const REPLICATES: u64 = 64;

/// A lighter configuration than the CLI's default (fewer
/// buffer-refresh batches and eval examples) to keep the suite fast; at 32
/// replicates every contrast asserted below kept z >= 8.8 over four other
/// seeds (the nulls stayed within |z| <= 2.6); 64 replicates multiply the
/// contrasts' z by about √2.
fn config() -> StackConfig {
    StackConfig {
        batch: 128,
        refresh_batches: 32,
        eval_examples: 512,
        ..StackConfig::default()
    }
}

static TABLE: LazyLock<StackTable> = LazyLock::new(|| {
    let budget = Budget::new(REPLICATES, derive_seed(DEFAULT_SEED, "tests/stack")).unwrap();
    run(config(), &RATES, &Subject::reference(), budget).expect("stack runs")
});

fn rate(p: f64) -> &'static RateTable {
    TABLE.rate(p).expect("rate present")
}

/// Layer `l` (1-based) at rate `p`.
fn layer(p: f64, l: usize) -> &'static LayerRow<Estimate> {
    rate(p).layer(l).expect("layer present")
}

fn depth() -> usize {
    config().depth
}

/// One-sided: the estimate is significantly above zero (Student-t with the
/// replicates' `REPLICATES − 1` degrees of freedom).
fn assert_positive(e: Estimate, what: &str) {
    common::assert_positive(what, e);
}

/// Two-sided: the estimate is consistent with zero. Student-t with the
/// replicates' degrees of freedom: at 31 its 10⁻¹⁰ critical value is 9.53,
/// not the normal 6.47, beyond which t₃₁ has tail 3.3·10⁻⁷ (mpmath), 3 300
/// times nominal; at 63 it is 7.74. Recorded by `tests/common`.
fn assert_null(e: Estimate, what: &str) {
    common::assert_consistent(what, e, 0.0);
}

#[test]
fn train_mode_outputs_are_standardised_whatever_p() {
    // Deterministic, per replicate: every train-mode batch leaves each
    // channel with mean 0 and biased variance s²/(s² + ε) ∈ [1 − ε/s², 1],
    // so the pooled channel variance lies in [1 − ε/s²_min, 1] up to the
    // rounding of summing n = 30·128 squares of size ~1 (≤ 4 n ε each way),
    // and the unbiased pooling factor n/(n − 1).
    let cfg = config();
    let n = (cfg.refresh_batches / 2) as f64 * cfg.batch as f64;
    let rounding = 4.0 * n * f64::EPSILON;
    for (i, p) in [0.0, 0.5, 0.9].into_iter().enumerate() {
        let mut rng = stream(derive_seed(DEFAULT_SEED, "tests/stack/train"), i as u64);
        let rep = run_replicate(&cfg, &Subject::reference(), p, &mut rng).unwrap();
        let lo = 1.0 - cfg.eps / rep.base.min_train_norm_var;
        let hi = n / (n - 1.0);
        for (l, v) in rep.base.train_variance.iter().enumerate() {
            assert!(
                *v >= lo - rounding && *v <= hi + rounding,
                "p = {p}, layer {}: train variance {v} outside [{lo}, {hi}]",
                l + 1
            );
        }
    }
}

#[test]
fn eval_outputs_shrink_more_with_p_and_with_depth() {
    for l in 1..=depth() {
        // p = 0.1 against the dropout-free network, then 0.5 against 0.1.
        assert_positive(layer(0.1, l).rate_step, &format!("null - p0.1, layer {l}"));
        assert_positive(layer(0.5, l).rate_step, &format!("p0.1 - p0.5, layer {l}"));
    }
    // Every step of depth at p = 0.5; at p = 0.1 the deep steps are small
    // (about 0.05 against a paired SE of about 0.007 at this budget), so only
    // the first layer against the last is asserted there.
    for l in 1..depth() {
        assert_positive(
            layer(0.5, l).depth_step,
            &format!("p 0.5: layer {l} - layer {}", l + 1),
        );
    }
    assert_positive(
        rate(0.1).extra.first_minus_last,
        "p 0.1: first - last layer",
    );
}

#[test]
fn dropout_only_after_the_last_bn_leaves_every_bn_unshifted() {
    // Exact null: with no dropout before any BN, every BN sees the same
    // distributions as in the dropout-free network (p = 0) on the same weights.
    for p in RATES {
        for l in 1..=depth() {
            assert_null(
                layer(p, l).after_last_minus_null,
                &format!("p {p}, layer {l}"),
            );
        }
    }
}

#[test]
fn re_estimating_the_statistics_without_dropout_removes_the_shift() {
    // Exact null again: re-estimation in train mode with dropout off is the
    // buffer refresh of the dropout-free network.
    for p in RATES {
        for l in 1..=depth() {
            assert_null(
                layer(p, l).reestimate_minus_null,
                &format!("p {p}, layer {l}"),
            );
        }
    }
}

#[test]
fn folding_the_buffers_removes_at_least_half_the_shift_at_every_depth() {
    // The fold is exact for the first BN only (up to the realised buffers'
    // fluctuation, whose Jensen term is visible at p = 0.5); deeper, it is
    // measured. `fold_half_lo > 0`: E[fold] lies above null − ½ shift (at
    // least half the shrinkage removed); `fold_gain > 0`: the folded ratio
    // is closer to 1 than the unfolded one; `fold_half_hi > 0`: no overshoot
    // by half the shift (asserted at p = 0.5, where the shift is large enough
    // for the test to have power at this budget).
    for p in RATES {
        for l in 1..=depth() {
            assert_positive(layer(p, l).fold_half_lo, &format!("p {p}, layer {l} lo"));
            assert_positive(layer(p, l).fold_gain, &format!("p {p}, layer {l} gain"));
        }
    }
    for l in 1..=depth() {
        assert_positive(layer(0.5, l).fold_half_hi, &format!("p 0.5, layer {l} hi"));
    }
}

#[test]
fn layer_norm_in_place_of_bn_shifts_less() {
    for p in RATES {
        for l in 1..=depth() {
            assert_positive(layer(p, l).layer_norm_gain, &format!("p {p}, layer {l}"));
        }
    }
}

#[test]
fn the_readout_shrinks_and_the_fold_restores_it() {
    for p in RATES {
        let r = rate(p).extra.readout_base;
        let shrink = Estimate {
            value: 1.0 - r.value,
            ..r
        };
        assert_positive(shrink, &format!("p {p}: 1 - readout ratio"));
        assert_positive(
            rate(p).extra.readout_fold_gain,
            &format!("p {p}: readout fold gain"),
        );
    }
}

#[test]
fn the_stack_is_bit_identical_on_1_and_2_threads() {
    // The rates of one replicate run in parallel on sub-streams seeded in
    // order from the replicate's stream, so the thread count cannot matter.
    let cfg = StackConfig {
        depth: 2,
        width: 4,
        batch: 8,
        refresh_batches: 4,
        eval_examples: 16,
        ..StackConfig::default()
    };
    let budget = Budget::new(3, 7).unwrap();
    let on = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let t = pool
            .install(|| run(cfg, &[0.2, 0.6], &Subject::reference(), budget))
            .unwrap();
        serde_json::to_string(&t).unwrap()
    };
    assert_eq!(on(1), on(2));
}

#[test]
fn bad_configurations_are_typed_errors() {
    let budget = Budget::new(2, 1).unwrap();
    let subject = Subject::reference();
    let bad = |cfg: StackConfig, rates: &[f64]| run(cfg, rates, &subject, budget).is_err();
    assert!(bad(
        StackConfig {
            depth: 0,
            ..config()
        },
        &[0.5]
    ));
    assert!(bad(
        StackConfig {
            batch: 1,
            ..config()
        },
        &[0.5]
    ));
    assert!(bad(
        StackConfig {
            eps: f64::NAN,
            ..config()
        },
        &[0.5]
    ));
    assert!(bad(config(), &[1.0]));
    assert!(bad(config(), &[0.5, 0.1]));
}

#[test]
fn the_json_lists_each_row_in_the_order_of_its_column_names() {
    let json = serde_json::to_value(&*TABLE).unwrap();
    let names = |key: &str| -> Vec<String> {
        serde_json::from_value(json[key].clone()).expect("a list of names")
    };
    assert_eq!(
        names("layer_fields"),
        [
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
        ]
    );
    assert_eq!(names("rate_fields").len(), 7);
    let first = &json["rates"][1];
    let row = first["layers"][2]
        .as_array()
        .expect("a layer row is an array");
    assert_eq!(row.len(), 15);
    // The column named "fold" of layer 3 is the typed field `fold`.
    let fold = row[1]["value"].as_f64().unwrap();
    assert_eq!(fold, layer(0.1, 3).fold.value);
    assert_eq!(rate(0.1).at(3, "fold"), Some(layer(0.1, 3).fold));
    assert_eq!(rate(0.1).at(3, "no such column"), None);
    let extra = first["extra"].as_array().expect("the rate row is an array");
    assert_eq!(
        extra[0]["value"].as_f64(),
        Some(rate(0.1).extra.readout_base.value)
    );
}
