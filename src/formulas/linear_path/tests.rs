//! The reductions to the identity-path families and the cheap traces.

use super::*;
use crate::formulas::{layernorm, rmsnorm};

const U: [f64; 6] = [1.5, -0.4, 0.8, 2.0, -1.1, 0.3];

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-13 * a.abs().max(b.abs()).max(1.0)
}

fn identity(p: f64) -> Path {
    Path {
        source: Source::Dropped {
            u: U.to_vec(),
            rate: Rate::new(p).unwrap(),
        },
        steps: vec![],
    }
}

#[test]
fn the_identity_path_gives_the_layernorm_and_rmsnorm_forms() {
    let rate = Rate::new(0.3).unwrap();
    let m = identity(0.3).moments().unwrap();
    assert!(close(
        mean_of_v(&m),
        layernorm::mean_of_v(&U, rate).unwrap()
    ));
    assert!(close(
        mean_of_r2(&m),
        rmsnorm::mean_of_r2(&U, rate).unwrap()
    ));
    // c of today's LayerNorm drops the 1/d part of tr(CΣC)/d: tr Σ/d.
    let (mu, s2) = layernorm::input_moments(&U).unwrap();
    let c = ln_factor_from_trace(s2, m.cov.trace(), U.len(), 0.0).unwrap();
    assert!(close(c, layernorm::shrink(mu, s2.sqrt(), rate).unwrap()));
    assert!(close(rms_factor(&m, 0.0).unwrap(), rate.q().sqrt()));
    let r2 = rmsnorm::mean_square(&U).unwrap();
    assert!(close(
        rms_factor(&m, 0.5).unwrap(),
        rmsnorm::shrink(r2, 0.5, rate)
    ));
}

#[test]
fn the_column_norm_traces_equal_the_covariance_traces() {
    let w = DMatrix::from_fn(4, 6, |i, j| ((i * 7 + j * 3) % 5) as f64 - 1.7);
    let mut path = identity(0.25);
    path.steps.push(Step::Linear {
        w: w.clone(),
        b: DVector::from_element(4, 0.5),
    });
    let m = path.moments().unwrap();
    let (c, t) = linear_dropout_traces(&column_norms(&w), &U, Rate::new(0.25).unwrap());
    assert!(close(c, centered_trace(&m.cov)));
    assert!(close(t, m.cov.trace()));
}

#[test]
fn a_mismatched_step_is_a_typed_error() {
    let mut path = identity(0.3);
    path.steps.push(Step::Add(DVector::zeros(5)));
    assert!(matches!(path.moments(), Err(Error::LengthMismatch { .. })));
}
