//! candle 0.11.1 against the dropout family, and candle's findings pinned.
//!
//! Runs only with `--features candle` (a separate CI step). Each "pin" test
//! asserts the framework's behaviour as found in its source, so it fails
//! if candle changes (see the README's "Frameworks" section).
//!
//! # False-alarm budget of this file
//!
//! This file is not part of the default suite's budget (`tests/zz_budget.rs`),
//! since it does not run in the default build. It makes its own statistical
//! assertions at the same per-assertion level (`critical_z()`, α = 10⁻¹⁰):
//! * `dropout_family_passes_against_candle`: one per component of the
//!   dropout family (41 at present);
//! * `candle_drops_at_least_one_grid_step`: one Poisson tail assertion at
//!   level ≤ 10⁻¹⁰ (see the test).
//!
//! Its ceiling is [`CANDLE_ASSERTION_BUDGET`] = 100, so by the union bound
//! this file fails by chance on an unchanged candle with probability at
//! most 100 · 10⁻¹⁰ = 10⁻⁸ (`the_file_stays_within_its_budget` checks the
//! count). Every other assertion is deterministic or compares exact
//! computations within a stated rounding bound.
#![cfg(feature = "candle")]

mod common;

use candle_core::{DType, Device, Tensor, Var};
use dropmc::Error;
use dropmc::claims::registry;
use dropmc::conformance::report::{Options, run};
use dropmc::ops::adapters::candle::{CandleDropout, Norm, accepts_rate, normalize, survivor_scale};
use dropmc::ops::{
    BackwardPass, DropoutLayer, EvalPass, InvertedDropout, Rate, Subject, TrainPass,
};
use dropmc::stats::assertion_alpha;
use rand::SeedableRng;

/// Statistical assertions this file may make (see the module doc).
const CANDLE_ASSERTION_BUDGET: u64 = 100;
/// Draws per claim: candle builds several tensors per call, so the family
/// runs at a tenth of its default budget (still ≥ 50 000 draws, which the
/// kept-count claim needs).
const SAMPLES: u64 = 100_000;

fn dropout_components() -> u64 {
    registry()
        .into_iter()
        .filter(|c| c.family() == "dropout")
        .map(|c| c.analytic().expect("analytic").len() as u64)
        .sum()
}

#[test]
fn the_file_stays_within_its_budget() {
    let n = dropout_components() + 1;
    assert!(n <= CANDLE_ASSERTION_BUDGET, "{n} assertions");
    // The module docs' chance of a false failure, 10⁻⁸: the file's share
    // FAMILY_ALPHA · CANDLE_ASSERTION_BUDGET / SUITE_ASSERTION_BUDGET
    // of the suite's rate (each side two roundings).
    let share = dropmc::stats::FAMILY_ALPHA * CANDLE_ASSERTION_BUDGET as f64
        / dropmc::stats::SUITE_ASSERTION_BUDGET as f64;
    assert!(n as f64 * assertion_alpha() <= share + dropmc::stats::tolerance::bound(4.0, share));
}

#[test]
fn dropout_family_passes_against_candle() {
    let options = Options {
        seed: None,
        samples: Some(SAMPLES),
        family: Some("dropout".into()),
    };
    let report = run(
        &dropmc::Registry::default(),
        &Subject::with_dropout(&CandleDropout),
        &options,
    )
    .expect("runs");
    for result in &report.results {
        common::assert_pass(result);
    }
}

fn rng() -> rand_chacha::ChaCha8Rng {
    rand_chacha::ChaCha8Rng::seed_from_u64(7)
}

/// Finding: candle's CPU generator is `rand::rng()`; `set_seed` bails, so
/// two identical calls give different masks and nothing makes them repeat.
#[test]
fn pin_candle_cpu_rng_cannot_be_seeded() {
    assert!(Device::Cpu.set_seed(1).is_err());
    let x = vec![1.0; 128];
    let a = CandleDropout::raw_train(&x, 0.5).expect("runs");
    let b = CandleDropout::raw_train(&x, 0.5).expect("runs");
    // Equal only with probability 2^-128 if the draws are independent.
    assert_ne!(a, b);
    // The adapter ignores the trait's generator: the same seed, other masks.
    let (mut z1, mut z2, mut m) = (vec![0.0; 128], vec![0.0; 128], vec![false; 128]);
    CandleDropout
        .forward_train(TrainPass::new(&x, &mut z1, &mut m), 0.5, &mut rng())
        .expect("runs");
    CandleDropout
        .forward_train(TrainPass::new(&x, &mut z2, &mut m), 0.5, &mut rng())
        .expect("runs");
    assert_ne!(z1, z2);
}

/// Finding: `p` is an `f32`; candle bails unless `0 <= p as f32 < 1`. So
/// `p = 1` is an error (as in this crate), and so is every `p` in
/// `(1 − 2^-25, 1)`, which rounds to `1.0f32`; a tiny negative `p` rounds
/// to `-0.0` and is accepted.
#[test]
fn pin_candle_rate_validation() {
    let x = [1.0, 2.0, 3.0];
    for p in [1.0, 1.5, -0.1, f64::NAN, f64::INFINITY, 1.0 - 1e-9] {
        assert!(!accepts_rate(p), "p = {p}");
        let err = CandleDropout::raw_train(&x, p).expect_err("candle bails");
        assert!(
            matches!(&err, Error::Framework { message, .. } if message.contains("[0, 1)")),
            "{err}"
        );
    }
    // 1 − 1e-9 is a valid rate for this crate, not for candle.
    assert!(Rate::new(1.0 - 1e-9).is_ok());
    // -1e-50 is invalid here but accepted by candle (it becomes -0.0f32).
    assert!(Rate::new(-1e-50).is_err());
    assert_eq!(CandleDropout::raw_train(&x, -1e-50).expect("accepted"), x);
    // Through the adapter, p = 1 is an error too.
    let (mut z, mut m) = (vec![0.0; 3], vec![false; 3]);
    assert!(
        CandleDropout
            .forward_train(TrainPass::new(&x, &mut z, &mut m), 1.0, &mut rng())
            .is_err()
    );
}

/// Finding: a survivor is `x · fl(1/(1 − p32))`: the reciprocal of the
/// f32-rounded keep probability, multiplied, not `x / q`.
#[test]
fn pin_candle_survivor_is_x_times_rounded_reciprocal() {
    let p = 0.3;
    let scale = 1.0 / (1.0 - f64::from(0.3f32));
    assert_eq!(survivor_scale(p), scale);
    // Inputs whose candle survivor differs from x / q in the last bits.
    let x: Vec<f64> = (1..=400)
        .map(|k| 1.0 + k as f64 / 7.0)
        .filter(|v| v * scale != v / 0.7)
        .take(256)
        .collect();
    assert_eq!(x.len(), 256);
    let z = CandleDropout::raw_train(&x, p).expect("runs");
    let survivors = z.iter().filter(|v| **v != 0.0).count();
    // P(no survivor) = 0.3^256: a survivor is certain for practical purposes.
    assert!(survivors > 0);
    for (v, o) in x.iter().zip(&z) {
        if *o != 0.0 {
            assert_eq!(*o, v * scale, "x = {v}");
            assert_ne!(*o, v / 0.7, "x = {v}");
        }
    }
}

/// Finding: uniforms are `f32` on a 2^-23 grid and a unit is dropped iff
/// `u < p32`, so any `p32 > 0` drops with probability at least `2^-23`
/// (`⌈p32·2^23⌉/2^23`). At `p = 10^-12` candle drops 1.19·10⁻⁷ of the units,
/// 119 000 times the nominal rate.
///
/// The test draws `N = 24·2^23` units and asserts at least one drop. Under
/// candle as found, drops ~ Poisson(24) (binomial, N·2^-23 = 24), so the
/// assertion fails by chance with probability `e^-24 ≈ 3.8·10⁻¹¹`, below
/// the per-assertion level 10⁻¹⁰. A candle whose drop rate were the
/// nominal 10⁻¹² would see a drop with probability ≈ 2·10⁻⁴ only.
#[test]
fn candle_drops_at_least_one_grid_step() {
    let chunk = 1usize << 23;
    let ones = Tensor::ones(chunk, DType::F32, &Device::Cpu).expect("tensor");
    let mut dropped = 0usize;
    for _ in 0..24 {
        let z = candle_nn::ops::dropout(&ones, 1e-12).expect("runs");
        let kept: f32 = z.sum_all().and_then(|s| s.to_scalar()).expect("sum");
        // Every kept unit contributes exactly fl(1/(1 − 1e-12f32)) = 1.0f32.
        dropped += chunk - kept as usize;
        if dropped > 0 {
            break;
        }
    }
    assert!(dropped > 0, "no unit dropped at p = 1e-12 in 24·2^23 draws");
}

/// Finding: `Dropout::forward(xs, false)` returns `xs` and never validates
/// `p` (`Dropout::new` does not either); training with the same `p` errs.
#[test]
fn pin_candle_eval_is_identity_and_unvalidated() {
    let x = vec![0.5, -1.2, 3.0, 0.0, 2.0];
    for p in [0.0, 0.3, 1.0, 7.0, f64::NAN] {
        let mut out = vec![9.0; 5];
        CandleDropout
            .forward_eval(EvalPass::new(&x, &mut out), p, &mut rng())
            .expect("eval never validates p");
        assert_eq!(out, x, "p = {p}");
    }
    assert!(
        InvertedDropout
            .forward_eval(EvalPass::new(&x, &mut [0.0; 5]), 1.0, &mut rng())
            .is_err()
    );
    let t = Tensor::from_slice(&x, 5, &Device::Cpu).expect("tensor");
    assert!(candle_nn::Dropout::new(1.0).forward(&t, true).is_err());
}

/// candle's own autograd through its own dropout: with `x = 1` the output
/// is the factor `keep · s`, and the gradient of `Σ dropout(x)` must be
/// that same factor (the forward's mask), bit for bit.
#[test]
fn candle_autograd_uses_the_forward_mask() {
    let d = 256;
    let x = Var::from_tensor(&Tensor::ones(d, DType::F64, &Device::Cpu).expect("t")).expect("v");
    let z = candle_nn::ops::dropout(x.as_tensor(), 0.3).expect("runs");
    let grads = z.sum_all().and_then(|s| s.backward()).expect("backward");
    let g: Vec<f64> = grads
        .get(x.as_tensor())
        .expect("grad")
        .to_vec1()
        .expect("read");
    let z: Vec<f64> = z.to_vec1().expect("read");
    assert_eq!(g, z);
    assert!(z.contains(&0.0) && z.iter().any(|v| *v != 0.0));
}

/// The adapter's backward (candle's autograd of `x ⊙ mask·s`) against the
/// reference `g · m / q`: they differ only through `s ≠ 1/q`, so
/// `|candle − ref| ≤ |g| (|s − 1/q| + 4ε/q)` for kept units (two roundings
/// each side), and dropped units are exactly zero.
#[test]
fn candle_backward_matches_reference_up_to_its_scale() {
    let p = 0.3;
    let g = [0.5, -1.0, 2.5, 4.0, -0.25, 1.0];
    let mask = [true, false, true, true, false, true];
    let mut ours = [0.0; 6];
    let mut reference = [0.0; 6];
    CandleDropout
        .backward(BackwardPass::new(&g, &mask, &mut ours), p)
        .expect("runs");
    InvertedDropout
        .backward(BackwardPass::new(&g, &mask, &mut reference), p)
        .expect("runs");
    let q = 1.0 - p;
    let slack = (survivor_scale(p) - 1.0 / q).abs() + 4.0 * f64::EPSILON / q;
    for k in 0..6 {
        if mask[k] {
            assert!(
                (ours[k] - reference[k]).abs() <= g[k].abs() * slack,
                "k = {k}"
            );
            assert_eq!(ours[k], g[k] * survivor_scale(p));
        } else {
            assert_eq!(ours[k], 0.0);
        }
    }
}

/// Findings: all three layers put ε inside the square root, added to the
/// biased (population) variance; the fused `LayerNorm` (with bias) and
/// `RmsNorm` compute in f32 even on f64 tensors, the bias-free `LayerNorm`
/// in f64. With ε = 1 and x = (−1, 1): (x − μ)/sqrt(σ² + ε) = ±1/√2,
/// whereas ε outside the root would give ±1/2 and the unbiased variance
/// ±1/√3.
#[test]
fn pin_candle_norm_eps_placement() {
    let x = [-1.0, 1.0];
    let want = std::f64::consts::FRAC_1_SQRT_2;
    for (norm, tol) in [
        (Norm::LayerNorm, 4.0 * f64::from(f32::EPSILON)),
        (Norm::LayerNormNoBias, 4.0 * f64::EPSILON),
        (Norm::RmsNorm, 4.0 * f64::from(f32::EPSILON)),
    ] {
        let y = normalize(norm, &x, 2, 1.0).expect("runs");
        assert!(
            (y[0] + want).abs() <= tol && (y[1] - want).abs() <= tol,
            "{norm:?}: {y:?}"
        );
    }
}

/// Finding: candle's fused LayerNorm and RmsNorm kernels (the path
/// `LayerNorm` with a bias and `RmsNorm` take on a contiguous tensor) reject
/// `f64` tensors, both with the message "unsupported dtype for rmsnorm"; the
/// bias-free `LayerNorm` runs in `f64`.
#[test]
fn pin_candle_fused_norms_reject_f64() {
    let t = Tensor::from_slice(&[1.0f64, 2.0, 4.0], (1, 3), &Device::Cpu).expect("t");
    let ones = Tensor::ones(3, DType::F64, &Device::Cpu).expect("t");
    let zeros = Tensor::zeros(3, DType::F64, &Device::Cpu).expect("t");
    use candle_core::Module;
    let ln = candle_nn::LayerNorm::new(ones.clone(), zeros, 1e-5).forward(&t);
    let rms = candle_nn::RmsNorm::new(ones.clone(), 1e-5).forward(&t);
    for r in [ln, rms] {
        let message = r.expect_err("f64 is rejected").to_string();
        assert!(
            message.contains("unsupported dtype for rmsnorm F64"),
            "{message}"
        );
    }
    assert!(
        candle_nn::LayerNorm::new_no_bias(ones, 1e-5)
            .forward(&t)
            .is_ok()
    );
}

/// Finding: the fused LayerNorm kernel (f32) takes the variance as
/// E[x²] − mean² accumulated in f32, so a row with a large offset loses
/// its variance to cancellation. Row: 10⁴ + (−1, 1, −1, 1, ...) (exact in
/// f32), exact output ±1/sqrt(1 + 10⁻⁵). The bias-free path (f64, two-pass)
/// gets it to f64 rounding; the fused one is off by more than 10 % (f32's
/// spacing at Σx² ≈ 8·10⁸ is 64).
#[test]
fn pin_candle_fused_layer_norm_is_f32_one_pass() {
    let d = 8;
    let x: Vec<f64> = (0..d)
        .map(|k| 1e4 + if k % 2 == 0 { -1.0 } else { 1.0 })
        .collect();
    let want: Vec<f64> = (0..d)
        .map(|k| if k % 2 == 0 { -1.0 } else { 1.0 } / (1.0f64 + 1e-5).sqrt())
        .collect();
    let exact = normalize(Norm::LayerNormNoBias, &x, d, 1e-5).expect("runs");
    let fused = normalize(Norm::LayerNorm, &x, d, 1e-5).expect("runs");
    // f64 two-pass: the deviations ±1 are exact, so only the last few
    // operations round: 16 ε per output is ample.
    for (e, w) in exact.iter().zip(&want) {
        assert!((e - w).abs() <= 16.0 * f64::EPSILON, "{e} vs {w}");
    }
    let worst = fused
        .iter()
        .zip(&want)
        .map(|(f, w)| (f - w).abs())
        .fold(0.0, f64::max);
    println!("fused LayerNorm on 1e4 ± 1: {fused:?}, worst error {worst:e}");
    assert!(
        worst > 0.1,
        "fused LayerNorm error {worst}: candle now accumulates precisely"
    );
}

// The expectation of candle's LayerNorm / RmsNorm after dropout (exact, by
// enumerating every mask through candle, and sampled) is checked against the
// crate's oracle and the normalization claims in `tests/frameworks_norm.rs`.
