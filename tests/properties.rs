//! Properties of the reference dropout over random configurations
//! (proptest strategies and quickcheck newtypes for the same domains).

use dropmc::engine::stream;
use dropmc::ops::{BackwardPass, DropoutLayer, EvalPass, InvertedDropout, TrainPass};
use proptest::prelude::*;
use quickcheck::{Arbitrary, Gen, QuickCheck};
use rand::Rng;

/// A valid drop rate, endpoints included: 0, just below 1, and the interior.
fn rate() -> impl Strategy<Value = f64> {
    prop_oneof![Just(0.0), Just(1.0 - f64::EPSILON), 0.0..1.0f64]
}

/// A finite vector of 1 to 64 values over many magnitudes.
fn vector() -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(
        prop_oneof![
            -1e6..1e6f64,
            -1.0..1.0f64,
            Just(0.0),
            Just(f64::MIN_POSITIVE / 4.0)
        ],
        1..64,
    )
}

/// Counts the words drawn through it.
struct Counting<R> {
    inner: R,
    draws: u64,
}

impl<R: Rng> rand::TryRng for Counting<R> {
    type Error = std::convert::Infallible;
    fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
        self.draws += 1;
        Ok(self.inner.next_u32())
    }
    fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
        self.draws += 1;
        Ok(self.inner.next_u64())
    }
    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Self::Error> {
        self.draws += 1;
        self.inner.fill_bytes(dst);
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: Some(Box::new(
        proptest::test_runner::FileFailurePersistence::Direct("proptest-regressions/properties.txt"))), ..ProptestConfig::default() })]

    #[test]
    fn p_zero_is_the_identity(x in vector(), seed in any::<u64>()) {
        let mut rng = stream(seed, 0);
        let (mut out, mut mask) = (vec![0.0; x.len()], vec![false; x.len()]);
        InvertedDropout.forward_train(TrainPass::new(&x, &mut out, &mut mask), 0.0, &mut rng).unwrap();
        prop_assert_eq!(&out, &x);
        prop_assert!(mask.iter().all(|m| *m));
    }

    #[test]
    fn eval_returns_the_input_and_draws_nothing(x in vector(), p in rate(), seed in any::<u64>()) {
        let mut rng = Counting { inner: stream(seed, 0), draws: 0 };
        let mut out = vec![f64::NAN; x.len()];
        InvertedDropout.forward_eval(EvalPass::new(&x, &mut out), p, &mut rng).unwrap();
        let bits = |v: &[f64]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        prop_assert_eq!(bits(&out), bits(&x));
        prop_assert_eq!(rng.draws, 0);
    }

    #[test]
    fn survivors_are_x_over_q_and_the_dropped_are_zero(x in vector(), p in rate(), seed in any::<u64>()) {
        let mut rng = stream(seed, 0);
        let (mut out, mut mask) = (vec![0.0; x.len()], vec![false; x.len()]);
        InvertedDropout.forward_train(TrainPass::new(&x, &mut out, &mut mask), p, &mut rng).unwrap();
        for k in 0..x.len() {
            let expected = if mask[k] { x[k] / (1.0 - p) } else { 0.0 };
            prop_assert_eq!(out[k].to_bits(), expected.to_bits());
        }
    }

    #[test]
    fn backward_is_grad_times_mask_over_q(x in vector(), p in rate(), seed in any::<u64>()) {
        let mut rng = stream(seed, 0);
        let (mut out, mut mask) = (vec![0.0; x.len()], vec![false; x.len()]);
        InvertedDropout.forward_train(TrainPass::new(&x, &mut out, &mut mask), p, &mut rng).unwrap();
        let grad: Vec<f64> = x.iter().map(|v| 0.5 - v).collect();
        let mut grad_in = vec![0.0; x.len()];
        InvertedDropout.backward(BackwardPass::new(&grad, &mask, &mut grad_in), p).unwrap();
        for k in 0..x.len() {
            let expected = if mask[k] { grad[k] / (1.0 - p) } else { 0.0 };
            prop_assert_eq!(grad_in[k].to_bits(), expected.to_bits());
        }
    }

    #[test]
    fn rates_outside_the_unit_interval_are_rejected(
        p in prop_oneof![Just(1.0), Just(f64::NAN), Just(f64::INFINITY), Just(-0.0 - 1e-300), 1.0..1e9f64, -1e9..-1e-12f64],
    ) {
        let mut rng = stream(0, 0);
        let (mut out, mut mask) = (vec![0.0; 2], vec![false; 2]);
        prop_assert!(InvertedDropout.forward_train(TrainPass::new(&[1.0, 2.0], &mut out, &mut mask), p, &mut rng).is_err());
        prop_assert!(dropmc::ops::Rate::new(p).is_err());
    }
}

/// A drop rate in `[0, 1)` for quickcheck.
#[derive(Debug, Clone, Copy)]
struct ValidRate(f64);

impl Arbitrary for ValidRate {
    fn arbitrary(g: &mut Gen) -> Self {
        let u = u32::arbitrary(g) as f64 / (u32::MAX as f64 + 1.0);
        ValidRate(u)
    }
}

/// A non-empty finite vector for quickcheck.
#[derive(Debug, Clone)]
struct FiniteVec(Vec<f64>);

impl Arbitrary for FiniteVec {
    fn arbitrary(g: &mut Gen) -> Self {
        let mut v: Vec<f64> = Vec::<i32>::arbitrary(g)
            .into_iter()
            .map(|i| i as f64 / 7.0)
            .collect();
        if v.is_empty() {
            v.push(1.0);
        }
        FiniteVec(v)
    }
}

#[test]
fn quickcheck_eval_is_the_identity() {
    fn prop(x: FiniteVec, p: ValidRate, seed: u64) -> bool {
        let mut rng = Counting {
            inner: stream(seed, 0),
            draws: 0,
        };
        let mut out = vec![0.0; x.0.len()];
        InvertedDropout
            .forward_eval(EvalPass::new(&x.0, &mut out), p.0, &mut rng)
            .is_ok()
            && out == x.0
            && rng.draws == 0
    }
    QuickCheck::new()
        .tests(500)
        .quickcheck(prop as fn(FiniteVec, ValidRate, u64) -> bool);
}

#[test]
fn quickcheck_mask_matches_output() {
    fn prop(x: FiniteVec, p: ValidRate, seed: u64) -> bool {
        let mut rng = stream(seed, 0);
        let n = x.0.len();
        let (mut out, mut mask) = (vec![0.0; n], vec![false; n]);
        InvertedDropout
            .forward_train(TrainPass::new(&x.0, &mut out, &mut mask), p.0, &mut rng)
            .is_ok()
            && (0..n).all(|k| {
                if mask[k] {
                    out[k] == x.0[k] / (1.0 - p.0)
                } else {
                    out[k] == 0.0
                }
            })
    }
    QuickCheck::new()
        .tests(500)
        .quickcheck(prop as fn(FiniteVec, ValidRate, u64) -> bool);
}
