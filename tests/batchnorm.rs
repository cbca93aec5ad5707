//! The BatchNorm op against hand-computed PyTorch conventions, and a wrong
//! dropout caught by the family's claims (the claims themselves pass in
//! `tests/report_snapshot.rs`).

use dropmc::Error;
use dropmc::claims::{check, registry};
use dropmc::engine::DEFAULT_SEED;
use dropmc::engine::{Budget, derive_seed};
use dropmc::ops::{
    BackwardPass, BatchNorm, DropoutLayer, EvalPass, Linear, Rate, Subject, TrainPass, relu,
};
use nalgebra::{DMatrix, DVector};
use rand::Rng;

/// Rounding bound for the handful of operations per entry below: 16 ε of
/// the largest magnitude involved (a few divisions and square roots).
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 16.0 * f64::EPSILON * a.abs().max(b.abs()).max(1.0)
}

#[test]
fn train_mode_uses_the_biased_variance_and_updates_with_the_unbiased_one() {
    // One channel, batch [1, 2, 3, 6]: mean 3, biased var (4+1+0+9)/4 = 3.5,
    // unbiased 14/3. Output (x − 3)/sqrt(3.5 + ε); running stats with
    // momentum 0.1 from (0, 1): 0.3 and 0.9 + 0.1·14/3.
    let mut bn = BatchNorm::new(1).unwrap();
    let x = DMatrix::from_row_slice(1, 4, &[1.0, 2.0, 3.0, 6.0]);
    let y = bn.forward_train(&x).unwrap();
    let denom = (3.5f64 + 1e-5).sqrt();
    for (got, v) in y.iter().zip([1.0, 2.0, 3.0, 6.0]) {
        assert!(close(*got, (v - 3.0) / denom), "{got}");
    }
    assert!(close(bn.running_mean()[0], 0.3));
    assert!(close(bn.running_var()[0], 0.9 + 0.1 * 14.0 / 3.0));
    assert_eq!(bn.batches_tracked(), 1);
    // Eval uses the buffers and changes nothing.
    let before = bn.clone();
    let e = bn.forward_eval(&x).unwrap();
    let d = (bn.running_var()[0] + 1e-5).sqrt();
    assert!(close(e[(0, 3)], (6.0 - 0.3) / d));
    assert_eq!(bn, before);
}

#[test]
fn affine_parameters_and_the_fold_act_per_channel() {
    let mut bn = BatchNorm::new(2)
        .unwrap()
        .with_affine(&[2.0, 1.0], &[0.5, -1.0])
        .unwrap()
        .with_eps(0.0)
        .unwrap()
        .with_buffers(&[1.0, 0.0], &[9.0, 4.0])
        .unwrap();
    let x = DMatrix::from_column_slice(2, 1, &[4.0, 2.0]);
    let y = bn.forward_eval(&x).unwrap();
    // Channel 0: 2·(4 − 1)/3 + 0.5 = 2.5; channel 1: (2 − 0)/2 − 1 = 0.
    assert_eq!(y.as_slice(), &[2.5, 0.0]);
    // Fold at p = 0.5: 0.5·9 − 0.5·1 = 4 and 0.5·4 − 0 = 2.
    bn.fold_dropout(0.5).unwrap();
    assert_eq!(bn.running_var(), &[4.0, 2.0]);
}

#[test]
fn bad_inputs_are_typed_errors() {
    assert!(BatchNorm::new(0).is_err());
    let bn = BatchNorm::new(2).unwrap();
    // An out-of-range setting is an invalid option, not a formula undefined
    // at the input.
    let invalid_option =
        |r: Result<BatchNorm, Error>| matches!(r, Err(Error::InvalidOption { .. }));
    assert!(invalid_option(bn.clone().with_momentum(1.5)));
    assert!(invalid_option(bn.clone().with_eps(f64::NAN)));
    assert!(invalid_option(bn.clone().with_eps(-1.0)));
    assert!(invalid_option(
        bn.clone().with_buffers(&[0.0, 0.0], &[1.0, 0.0])
    ));
    assert!(bn.clone().with_affine(&[1.0], &[0.0, 0.0]).is_err());
    let mut b = bn.clone();
    // Wrong channel count, one-example train batch, non-finite input.
    assert!(matches!(
        b.forward_train(&DMatrix::zeros(3, 4)),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(b.forward_train(&DMatrix::zeros(2, 1)).is_err());
    assert!(
        b.forward_eval(&DMatrix::from_element(2, 2, f64::INFINITY))
            .is_err()
    );
    // A constant channel with ε = 0 cannot be normalised.
    let mut z = bn.with_eps(0.0).unwrap();
    assert!(z.forward_train(&DMatrix::from_element(2, 4, 1.0)).is_err());
    // An impossible fold names the channel and leaves the buffers alone.
    let mut f = BatchNorm::new(2)
        .unwrap()
        .with_buffers(&[0.0, 3.0], &[1.0, 1.0])
        .unwrap();
    let err = f.fold_dropout(0.5).unwrap_err();
    assert!(err.to_string().contains("channel 1"), "{err}");
    assert_eq!(f.running_var(), &[1.0, 1.0]);
    assert!(f.fold_dropout(1.0).is_err());
}

#[test]
fn linear_and_relu() {
    let w = DMatrix::from_row_slice(2, 2, &[1.0, -1.0, 2.0, 0.5]);
    let layer = Linear::new(w, DVector::from_vec(vec![0.5, -3.0])).unwrap();
    let mut y = layer
        .forward(&DMatrix::from_column_slice(2, 1, &[1.0, 2.0]))
        .unwrap();
    // [1 − 2 + 0.5, 2 + 1 − 3] = [−0.5, 0].
    assert_eq!(y.as_slice(), &[-0.5, 0.0]);
    relu(&mut y);
    assert_eq!(y.as_slice(), &[0.0, 0.0]);
    assert!(layer.forward(&DMatrix::zeros(3, 1)).is_err());
    assert!(Linear::new(DMatrix::zeros(2, 2), DVector::zeros(3)).is_err());
}

/// Dropout that forgets the inverted rescale (keeps `x`, not `x/q`).
struct NoRescale;

impl DropoutLayer for NoRescale {
    fn name(&self) -> &str {
        "no-rescale"
    }
    fn forward_train(&self, pass: TrainPass<'_>, p: f64, rng: &mut dyn Rng) -> Result<(), Error> {
        let TrainPass { x, out, mask } = pass;
        Rate::new(p)?;
        for ((o, m), v) in out.iter_mut().zip(mask.iter_mut()).zip(x) {
            *m = dropmc::engine::keep(rng, p);
            *o = if *m { *v } else { 0.0 };
        }
        Ok(())
    }
    fn forward_eval(&self, pass: EvalPass<'_>, _: f64, _: &mut dyn Rng) -> Result<(), Error> {
        let EvalPass { x, out } = pass;
        out.copy_from_slice(x);
        Ok(())
    }
    fn backward(&self, pass: BackwardPass<'_>, _: f64) -> Result<(), Error> {
        let BackwardPass {
            grad_out: g,
            mask: m,
            grad_in: gi,
        } = pass;
        for ((o, g), m) in gi.iter_mut().zip(g).zip(m) {
            *o = if *m { *g } else { 0.0 };
        }
        Ok(())
    }
}

#[test]
fn a_dropout_without_rescale_is_caught_by_the_buffer_claims() {
    // Expected failure (spends no false-alarm budget): without 1/q the
    // running mean converges to q μ, not μ.
    let subject = Subject::with_dropout(&NoRescale);
    let claim = registry()
        .into_iter()
        .find(|c| c.id() == "batchnorm.running_stats")
        .unwrap();
    let budget = Budget::new(4096, derive_seed(DEFAULT_SEED, "tests/batchnorm/mutant")).unwrap();
    assert!(check(claim, &subject, budget).rejected());
}

#[test]
fn buffer_targets_at_a_configuration_by_hand() {
    use dropmc::claims::batchnorm::{Config, Quantity, at};
    // μ = 2, σ = 1, p = 1/2: v = (1 + 0.5·4)/0.5 = 6. One step of momentum
    // 1/2 from (0, 1): E[rm] = 1, E[rv] = (1 + κ 6)/2 = 3.5 unbiased,
    // (1 + 4.5)/2 = 2.75 biased (κ = 3/4); Var rm = 0.5·(1 − 0.25)/1.5 ·
    // 6/4 = 0.375, so the fold is 0.5·3.5 − 0.5·(1 + 0.375) = 1.0625.
    let config = |unbiased| Config {
        mu: vec![2.0],
        sigma: vec![1.0],
        p: 0.5,
        batch: 4,
        steps: 1,
        momentum: 0.5,
        unbiased,
        folded_eval: false,
    };
    let closed_form = |unbiased, quantity: Quantity| {
        at(&config(unbiased))
            .into_iter()
            .find(|c| c.quantity == quantity)
            .unwrap()
            .closed_form()
            .unwrap()
    };
    assert_eq!(closed_form(true, Quantity::RunningStats), vec![1.0, 3.5]);
    assert_eq!(closed_form(false, Quantity::RunningStats), vec![1.0, 2.75]);
    assert!((closed_form(true, Quantity::FoldBuffers)[0] - 1.0625).abs() <= 4.0 * f64::EPSILON);
    // One buffer set (as trained): one ratio per channel.
    assert_eq!(closed_form(true, Quantity::VarianceShift), vec![1.0]);
}
