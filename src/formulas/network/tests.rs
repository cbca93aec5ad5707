//! Hand values of the ledger's rules.

use super::*;
use crate::formulas::NormParams;
use crate::formulas::layernorm::mean_of_v;

/// A LayerNorm's parameters, without the layer (the formulas sit below
/// `ops`).
struct Params {
    gamma: Vec<f64>,
    beta: Vec<f64>,
    eps: f64,
}

impl NormParams for Params {
    fn gamma(&self) -> &[f64] {
        &self.gamma
    }
    fn eps(&self) -> f64 {
        self.eps
    }
}

impl ShiftedNormParams for Params {
    fn beta(&self) -> &[f64] {
        &self.beta
    }
}

#[test]
fn dropout_of_a_noisy_input_by_hand() {
    // v = 2, s = 0.5, p = 0.5: (p/q) v² + s/q = 4 + 1 = 5.
    let y = Noisy {
        mean: vec![2.0],
        var: vec![0.5],
    };
    let z = dropout(&y, Rate::new(0.5).unwrap());
    assert_eq!(z.var, vec![5.0]);
    assert_eq!(z.mean, vec![2.0]);
}

#[test]
fn the_centred_noise_of_one_dropout_is_layernorms_exact_mean_of_v() {
    // Dropout of a clean x: V(x) + s̄ is formulas::layernorm's exact E[V].
    let x = [0.5, -1.0, 2.0, 1.5, 0.3];
    let rate = Rate::new(0.3).unwrap();
    let z = dropout(&Noisy::clean(&x), rate);
    let total = mean_and_variance(&x).1 + centred_mean_noise(&z.var);
    let exact = mean_of_v(&x, rate).unwrap();
    assert!((total - exact).abs() < 1e-14 * exact, "{total} vs {exact}");
}

#[test]
fn silu_derivatives_match_finite_differences() {
    for x in [-3.0, -1.0, -0.2, 0.0, 0.7, 2.5] {
        let h = 1e-4;
        let d1 = ((SILU.value)(x + h) - (SILU.value)(x - h)) / (2.0 * h);
        let d2 = ((SILU.first)(x + h) - (SILU.first)(x - h)) / (2.0 * h);
        assert!((d1 - (SILU.first)(x)).abs() < 1e-7, "{x}");
        assert!((d2 - (SILU.second)(x)).abs() < 1e-7, "{x}");
    }
}

#[test]
fn without_noise_the_norms_are_their_eval_outputs() {
    let x = [0.5, -1.0, 2.0, 1.5];
    let ln = Params {
        gamma: vec![1.5; 4],
        beta: vec![0.2; 4],
        eps: 1e-5,
    };
    let out = layernorm(&Noisy::clean(&x), &ln);
    let eval = crate::formulas::layernorm::uncorrected(&x, &ln).unwrap();
    for (a, b) in out.mean.iter().zip(&eval) {
        assert!((a - b).abs() < 1e-14);
    }
    assert!(out.var.iter().all(|&s| s == 0.0));
    let rms = rmsnorm(&Noisy::clean(&x), &[1.5; 4], 1e-5);
    let r = (x.iter().map(|a| a * a).sum::<f64>() / 4.0 + 1e-5).sqrt();
    for (a, v) in rms.mean.iter().zip(&x) {
        assert!((a - 1.5 * v / r).abs() < 1e-14);
    }
}
