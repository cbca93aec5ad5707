//! burn 0.22.1 (ndarray backend, autodiff) against the dropout family, and
//! burn's findings pinned.
//!
//! Runs only with `--features burn` (a separate CI step). Each "pin" test
//! asserts the framework's behaviour as found in its source, so it fails if
//! burn changes (see the README's "Frameworks" section).
//!
//! # False-alarm budget of this file
//!
//! Not part of the default suite's budget (`tests/zz_budget.rs`): it does not
//! run in the default build. Its statistical assertions use the same
//! per-assertion level (`critical_z()`, α = 10⁻¹⁰):
//! * `dropout_family_passes_against_burn`: one per component of the dropout
//!   family (41 at present).
//!
//! Its ceiling is [`BURN_ASSERTION_BUDGET`] = 100, so this file fails by
//! chance on an unchanged burn with probability at most 10⁻⁸
//! (`the_file_stays_within_its_budget` checks the count). Every other
//! assertion is deterministic (burn is seeded) or compares exact
//! computations within a stated rounding bound.
#![cfg(feature = "burn")]

mod common;

use burn::module::Module;
use burn::nn::DropoutConfig;
use dropmc::Error;
use dropmc::claims::registry;
use dropmc::conformance::report::{Options, run};
use dropmc::ops::adapters::burn::{
    BurnBatchNorm, BurnDropout, accepts_rate, autodiff_device, layer_norm, plain_device, read,
    tensor,
};
use dropmc::ops::{BackwardPass, DropoutLayer, EvalPass, InvertedDropout, Subject, TrainPass};
use dropmc::stats::assertion_alpha;
use rand::SeedableRng;

/// Statistical assertions this file may make (see the module doc).
const BURN_ASSERTION_BUDGET: u64 = 100;
/// Draws per claim: each burn call builds an autodiff graph under a lock,
/// so the family runs at 1/20 of its default budget (50 000 draws, the
/// least the kept-count claim's normal approximation needs).
const SAMPLES: u64 = 50_000;

fn dropout_components() -> u64 {
    registry()
        .into_iter()
        .filter(|c| c.family() == "dropout")
        .map(|c| c.analytic().expect("analytic").len() as u64)
        .sum()
}

#[test]
fn the_file_stays_within_its_budget() {
    let n = dropout_components();
    assert!(n <= BURN_ASSERTION_BUDGET, "{n} assertions");
    // The module docs' chance of a false failure, 10⁻⁸: the file's share
    // FAMILY_ALPHA · BURN_ASSERTION_BUDGET / SUITE_ASSERTION_BUDGET
    // of the suite's rate (each side two roundings).
    let share = dropmc::stats::FAMILY_ALPHA * BURN_ASSERTION_BUDGET as f64
        / dropmc::stats::SUITE_ASSERTION_BUDGET as f64;
    assert!(n as f64 * assertion_alpha() <= share + dropmc::stats::tolerance::bound(4.0, share));
}

#[test]
fn dropout_family_passes_against_burn() {
    let options = Options {
        seed: None,
        samples: Some(SAMPLES),
        family: Some("dropout".into()),
    };
    let report = run(
        &dropmc::Registry::default(),
        &Subject::with_dropout(&BurnDropout),
        &options,
    )
    .expect("runs");
    for result in &report.results {
        common::assert_pass(result);
    }
}

fn rng(seed: u64) -> rand_chacha::ChaCha8Rng {
    rand_chacha::ChaCha8Rng::seed_from_u64(seed)
}

/// Finding: `Dropout::forward` is the identity unless the input lives on an
/// autodiff device, even for a freshly initialised layer (training flag on):
/// on the plain ndarray device nothing is dropped. On the autodiff device
/// the same layer drops (all 256 units kept with probability 2^-256).
#[test]
fn pin_burn_dropout_is_identity_off_autodiff() {
    let x: Vec<f64> = (0..256).map(|k| 1.0 + k as f64).collect();
    let layer = DropoutConfig::new(0.5).init();
    assert!(layer.training.is_enabled());
    let plain =
        read(layer.forward(tensor(&x, [256], &plain_device().expect("device")))).expect("read");
    assert_eq!(plain, x);
    let trained =
        BurnDropout::raw_forward(&x, 0.5, 1, &autodiff_device().expect("device")).expect("runs");
    assert!(trained.contains(&0.0));
}

/// Finding: burn panics (does not return an error) for `p` outside
/// `[0, 1)`, `p = 1` included, in `DropoutConfig::init`; the adapter checks
/// first and returns `InvalidRate`. `p = 0` is the identity.
#[test]
fn pin_burn_rate_validation() {
    for p in [1.0, 1.5, -0.1, f64::NAN] {
        assert!(!accepts_rate(p));
        let panicked = std::panic::catch_unwind(|| DropoutConfig::new(p).init()).is_err();
        assert!(panicked, "p = {p} did not panic");
        let (mut z, mut m) = (vec![0.0; 3], vec![false; 3]);
        let err = BurnDropout
            .forward_train(
                TrainPass::new(&[1.0, 2.0, 3.0], &mut z, &mut m),
                p,
                &mut rng(1),
            )
            .expect_err("rejected");
        assert!(matches!(err, Error::InvalidRate { .. }));
    }
    // Unlike candle, burn keeps p in f64: 1 − 1e-9 is accepted.
    assert!(accepts_rate(1.0 - 1e-9));
    let x = [0.5, -1.2, 3.0];
    let z =
        BurnDropout::raw_forward(&x, 0.0, 3, &autodiff_device().expect("device")).expect("runs");
    assert_eq!(z, x);
}

/// Seeding makes burn reproducible: the same seed gives the same output,
/// another seed another mask (equal with probability 2^-128).
#[test]
fn burn_dropout_is_reproducible_through_the_adapter() {
    let x = vec![1.0; 128];
    let run_with = |seed: u64| {
        let (mut z, mut m) = (vec![0.0; 128], vec![false; 128]);
        BurnDropout
            .forward_train(TrainPass::new(&x, &mut z, &mut m), 0.5, &mut rng(seed))
            .expect("runs");
        z
    };
    assert_eq!(run_with(11), run_with(11));
    assert_ne!(run_with(11), run_with(12));
}

/// Finding: a survivor is `(x · 1) · fl(1/q)`, a multiplication by the
/// rounded reciprocal, not `x / q`.
#[test]
fn pin_burn_survivor_is_x_times_rounded_reciprocal() {
    let p = 0.3;
    let scale = 1.0 / (1.0 - p);
    let x: Vec<f64> = (1..=400)
        .map(|k| 1.0 + k as f64 / 7.0)
        .filter(|v| v * scale != v / (1.0 - p))
        .take(64)
        .collect();
    assert_eq!(x.len(), 64);
    let z = BurnDropout::raw_forward(&x, p, 5, &autodiff_device().expect("device")).expect("runs");
    assert!(z.iter().any(|v| *v != 0.0));
    for (v, o) in x.iter().zip(&z) {
        if *o != 0.0 {
            assert_eq!(*o, v * scale, "x = {v}");
            assert_ne!(*o, v / (1.0 - p), "x = {v}");
        }
    }
}

/// Evaluation through `Module::valid()` is the identity and draws nothing.
#[test]
fn burn_eval_is_identity() {
    let x = vec![0.5, -1.2, 3.0, 0.0, 2.0];
    let mut out = vec![9.0; 5];
    BurnDropout
        .forward_eval(EvalPass::new(&x, &mut out), 0.3, &mut rng(1))
        .expect("runs");
    assert_eq!(out, x);
}

/// burn's own autograd through its own dropout: with `x = 1` the output is
/// the factor `keep · s`, and the gradient of `Σ dropout(x)` equals it.
#[test]
fn burn_autograd_uses_the_forward_mask() {
    let device = autodiff_device().expect("device");
    let x = tensor(&[1.0; 256], [256], &device).require_grad();
    device.seed(9);
    let z = DropoutConfig::new(0.3).init().forward(x.clone());
    let grads = z.clone().sum().backward();
    let g = read(x.grad(&grads).expect("grad")).expect("read");
    let z = read(z).expect("read");
    assert_eq!(g, z);
    assert!(z.contains(&0.0) && z.iter().any(|v| *v != 0.0));
}

/// The adapter's backward (burn's autograd of `(x ⊙ mask) · s`) against the
/// reference `g · m / q`: `|burn − ref| ≤ 2ε |g| / q` on kept units (one
/// rounding of `s`, one of each product), zero on dropped ones.
#[test]
fn burn_backward_matches_reference() {
    let p = 0.3;
    let g = [0.5, -1.0, 2.5, 4.0, -0.25, 1.0];
    let mask = [true, false, true, true, false, true];
    let (mut ours, mut reference) = ([0.0; 6], [0.0; 6]);
    BurnDropout
        .backward(BackwardPass::new(&g, &mask, &mut ours), p)
        .expect("runs");
    InvertedDropout
        .backward(BackwardPass::new(&g, &mask, &mut reference), p)
        .expect("runs");
    for k in 0..6 {
        if mask[k] {
            let bound = 3.0 * f64::EPSILON * g[k].abs() / (1.0 - p);
            assert!((ours[k] - reference[k]).abs() <= bound, "k = {k}");
        } else {
            assert_eq!(ours[k], 0.0);
        }
    }
}

/// Finding: burn's BatchNorm updates `running ← (1 − m) running + m batch`
/// (PyTorch's momentum convention, m = 0.1) but with the BIASED batch
/// variance (divide by n), where PyTorch uses the unbiased one (n − 1).
/// Batch (n = 4, c = 2): channel 0 = (1, 2, 3, 6): mean 3, biased var 3.5,
/// unbiased 14/3; channel 1 = (0.5, −0.5, 1.5, 2.5): mean 1, 1.25, 5/3.
#[test]
fn pin_burn_batch_norm_running_variance_is_biased() {
    let bn = BurnBatchNorm::new(2, 0.1, 1e-5).expect("layer");
    let batch = [1.0, 0.5, 2.0, -0.5, 3.0, 1.5, 6.0, 2.5];
    bn.train_step(&batch).expect("runs");
    let mean = bn.running_mean().expect("read");
    let var = bn.running_var().expect("read");
    let close = |a: f64, b: f64| (a - b).abs() <= 16.0 * f64::EPSILON * b.abs().max(1.0);
    assert!(
        close(mean[0], 0.1 * 3.0) && close(mean[1], 0.1 * 1.0),
        "{mean:?}"
    );
    assert!(close(var[0], 0.9 + 0.1 * 3.5), "{var:?}");
    assert!(close(var[1], 0.9 + 0.1 * 1.25), "{var:?}");
    let pytorch = [0.9 + 0.1 * 14.0 / 3.0, 0.9 + 0.1 * 5.0 / 3.0];
    assert!((var[0] - pytorch[0]).abs() > 0.1 && (var[1] - pytorch[1]).abs() > 0.04);
    // A second step compounds with the same momentum.
    bn.train_step(&batch).expect("runs");
    let var2 = bn.running_var().expect("read");
    assert!(close(var2[0], 0.9 * (0.9 + 0.35) + 0.35), "{var2:?}");
}

/// Finding: the same (training-mode) BatchNorm on the plain device takes
/// the inference branch: it normalizes with the running statistics (fresh:
/// mean 0, variance 1), not with the batch's, and updates nothing.
#[test]
fn pin_burn_batch_norm_off_autodiff_uses_running_stats() {
    let bn = BurnBatchNorm::new(2, 0.1, 1e-5).expect("layer");
    let batch = [1.0, 0.5, 2.0, -0.5, 3.0, 1.5, 6.0, 2.5];
    let y = bn.forward_plain_device(&batch).expect("runs");
    let scale = 1.0 / (1.0f64 + 1e-5).sqrt();
    for (a, b) in y.iter().zip(&batch) {
        assert!(
            (a - b * scale).abs() <= 8.0 * f64::EPSILON * b.abs(),
            "{a} vs {b}"
        );
    }
    assert_eq!(bn.running_var().expect("read"), vec![1.0, 1.0]);
}

/// burn's LayerNorm: ε inside the square root, added to the biased
/// variance, computed in f64 for f64 input. ε = 1, x = (−1, 1): ±1/√2 (ε
/// outside would give ±1/2, the unbiased variance ±1/√3).
#[test]
fn pin_burn_layer_norm_eps_placement() {
    let y = layer_norm(&[-1.0, 1.0], 2, 1.0).expect("runs");
    let want = std::f64::consts::FRAC_1_SQRT_2;
    assert!((y[0] + want).abs() <= 4.0 * f64::EPSILON, "{y:?}");
    assert!((y[1] - want).abs() <= 4.0 * f64::EPSILON, "{y:?}");
}

// The expectation of burn's LayerNorm after dropout (exact and sampled), and
// its BatchNorm buffers against the BatchNorm claims, are checked in
// `tests/frameworks_norm.rs`.

/// The module is on the autodiff device: sanity of the helpers' devices.
#[test]
fn helper_devices_are_what_they_say() {
    assert!(autodiff_device().expect("device").is_autodiff());
    assert!(!plain_device().expect("device").is_autodiff());
    let layer = DropoutConfig::new(0.5).init().valid();
    assert!(!layer.training.is_enabled());
}
