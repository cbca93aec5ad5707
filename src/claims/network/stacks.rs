//! The family's stacks ([`crate::exact::network`]) at their configurations,
//! and each one's closed form carried through the ledger, rule by rule
//! ([`crate::formulas::network`]): the functions the claims and their order
//! checks call, so a planted fault in any rule reaches them.

use nalgebra::{DMatrix, DVector};

use crate::error::Error;
use crate::exact::network::{LinearResidual, MeanShift, PreLn};
use crate::formulas::network::{self as f, Elementwise, Noisy, SILU};
use crate::formulas::{Rate, layernorm};
use crate::ops::LayerNorm;

/// The ledger's rules the stacks compose (the real ones: [`LEDGER`]); a
/// test plants a wrong rule here and watches a claim fail
/// (`tests/network.rs`).
#[derive(Clone, Copy)]
pub struct Rules {
    /// Rule 3.
    pub residual_add: fn(&Noisy, &Noisy, &[f64]) -> Noisy,
    /// Rules 4 and 6 for LayerNorm.
    pub layernorm: fn(&Noisy, &LayerNorm) -> Noisy,
    /// Rule 5.
    pub elementwise: fn(&Noisy, Elementwise) -> Noisy,
}

/// The rules of [`crate::formulas::network`].
pub const LEDGER: Rules = Rules {
    residual_add: f::residual_add,
    layernorm: f::layernorm,
    elementwise: f::elementwise,
};

/// The family's drop rate (every dropout of every stack).
pub const P: f64 = 0.3;

pub(crate) fn rate() -> Rate {
    Rate::new(P).expect("a literal rate in [0, 1)")
}

/// A deterministic, irregular `d × d` matrix (entries in `[−0.9, 0.9]`,
/// diagonal included): no symmetry that could hide a dropped term.
fn weights(d: usize, seed: usize) -> DMatrix<f64> {
    DMatrix::from_fn(d, d, |i, j| {
        let k = (i * 31 + j * 17 + seed * 7) % 19;
        (k as f64 - 9.0) / 10.0
    })
}

/// The exact claim's stack: `d = 4`, two dropouts, `2^8` masks.
pub fn linear_residual() -> LinearResidual {
    LinearResidual {
        x: DVector::from_vec(vec![0.8, -1.2, 0.5, 1.5]),
        a: weights(4, 1),
        b: weights(4, 2),
        rate: rate(),
    }
}

/// The ledger's `h₂` on the linear residual stack: rules 2, 1, 3 twice,
/// the second add with the cross term `B_ii s₁_i`.
pub fn linear_residual_ledger(stack: &LinearResidual, rules: &Rules) -> Noisy {
    let zero = vec![0.0; stack.x.len()];
    let x = Noisy::clean(stack.x.as_slice());
    let branch1 = f::dropout(&f::linear(&stack.a, &zero, &x), stack.rate);
    let h1 = (rules.residual_add)(&x, &branch1, &zero);
    let branch2 = f::dropout(&f::linear(&stack.b, &zero, &h1), stack.rate);
    let cross = f::cross_covariance(stack.b.diagonal().as_slice(), &h1.var);
    (rules.residual_add)(&h1, &branch2, &cross)
}

/// The pre-LN stack at width `d`: group 1 noisy (`x₁ = 1.5`, `a₁ = 0.8`,
/// `b₁ = 0.6`), group 2 clean (`x₂ = −0.5`), `LN₁`'s gain 2.
pub fn pre_ln(d: usize) -> PreLn {
    PreLn {
        x: [1.5, -0.5],
        a: 0.8,
        b: 0.6,
        gamma: 2.0,
        rate: rate(),
        d,
    }
}

/// The width of the norm-output claim's own configuration (`2^12` masks).
pub const PRE_LN_D: usize = 6;

/// `v ↦ g ⊙ v`, `s ↦ g² ⊙ s`: rule 2 for a diagonal map.
fn scale(g: &[f64], y: &Noisy) -> Noisy {
    Noisy {
        mean: y.mean.iter().zip(g).map(|(v, g)| g * v).collect(),
        var: y.var.iter().zip(g).map(|(s, g)| g * g * s).collect(),
    }
}

/// The ledger at `LN₂`'s input on the pre-LN stack: `h₁` by rules 2, 1, 3;
/// the branch by rule 4 (`LN₁`), 2 (`b ⊙`) and 1; the add by rule 3 with
/// the cross term `b_i (γ/σ) P_ii s₁_i`.
pub fn pre_ln_ledger(stack: &PreLn, rules: &Rules) -> Result<Noisy, Error> {
    let (x, a, b) = stack.units();
    let zero = vec![0.0; stack.d];
    let x = Noisy::clean(&x);
    let h1 = (rules.residual_add)(&x, &f::dropout(&scale(&a, &x), stack.rate), &zero);
    let ln1 = stack.ln1()?;
    let branch = f::dropout(&scale(&b, &(rules.layernorm)(&h1, &ln1)), stack.rate);
    let jacobian: Vec<f64> = f::layernorm_jacobian_diagonal(&h1, &ln1)
        .iter()
        .zip(&b)
        .map(|(j, b)| j * b)
        .collect();
    Ok((rules.residual_add)(
        &h1,
        &branch,
        &f::cross_covariance(&jacobian, &h1.var),
    ))
}

/// The network-corrected `E[LN₂(h₂)] ≈ β + c (LN₂(v) − β)` (rule 6 with
/// the ledger's `s̄`).
pub fn pre_ln_network(stack: &PreLn, rules: &Rules) -> Result<Vec<f64>, Error> {
    Ok((rules.layernorm)(&pre_ln_ledger(stack, rules)?, &stack.ln2()?).mean)
}

/// The per-site correction (the rival): `LN₂`'s input at its eval value,
/// with only `drop₂`'s own injection `(p/q)(b ⊙ LN₁(h̄₁))²` as its noise
/// (everything upstream of its own dropout taken as fixed).
pub fn pre_ln_per_site(stack: &PreLn) -> Result<Vec<f64>, Error> {
    let (x, a, b) = stack.units();
    let h1: Vec<f64> = x.iter().zip(&a).map(|(x, a)| x + a * x).collect();
    let u = layernorm::uncorrected(&h1, &stack.ln1()?)?;
    let branch = f::dropout(
        &Noisy::clean(&scale(&b, &Noisy::clean(&u)).mean),
        stack.rate,
    );
    let h2 = f::residual_add(&Noisy::clean(&h1), &branch, &vec![0.0; stack.d]);
    Ok(f::layernorm(&h2, &stack.ln2()?).mean)
}

/// The mean-shift stack at width `d`: `u = (1.2, −0.6)`, `h = (0.3, −0.8)`,
/// `t = (2, 1.5)`, `φ = SiLU`.
pub fn mean_shift(d: usize) -> MeanShift {
    MeanShift {
        u: [1.2, -0.6],
        h: [0.3, -0.8],
        t: [2.0, 1.5],
        phi: SILU.value,
        rate: rate(),
        d,
    }
}

/// The width of the mean-shift claim's own configuration (`2^8` masks).
pub const MEAN_SHIFT_D: usize = 8;

/// `sup |φ(y)|` over the range `y` takes: `|SiLU(y)| ≤ max(|y|, 0.28)`.
pub fn mean_shift_sup(stack: &MeanShift) -> f64 {
    let reach: f64 = stack.u.iter().map(|u| u.abs()).sum::<f64>() / stack.rate.q();
    let worst = (0..2)
        .map(|g| stack.h[g].abs() + stack.t[g].abs() * reach)
        .fold(0.0, f64::max);
    worst.max(0.28)
}

/// The ledger at `φ`'s input, one row per group: rule 1 on `u`, rule 2
/// with the `2 × d` map whose row `g` is `t_g/d` everywhere (`b = h`).
fn mean_shift_input(stack: &MeanShift) -> Noisy {
    let w = DMatrix::from_fn(2, stack.d, |g, _| stack.t[g] / stack.d as f64);
    let dropped = f::dropout(&Noisy::clean(&stack.input()), stack.rate);
    f::linear(&w, &stack.h, &dropped)
}

/// Per unit, `φ(v) + φ''(v) s/2` (rule 5's mean).
pub fn mean_shift_second_order(stack: &MeanShift, rules: &Rules) -> Vec<f64> {
    per_unit(
        stack,
        &(rules.elementwise)(&mean_shift_input(stack), SILU).mean,
    )
}

/// Per unit, the plain `φ(v)` (the rival).
pub fn mean_shift_plain(stack: &MeanShift) -> Vec<f64> {
    let v: Vec<f64> = mean_shift_input(stack)
        .mean
        .iter()
        .map(|&v| (SILU.value)(v))
        .collect();
    per_unit(stack, &v)
}

fn per_unit(stack: &MeanShift, by_group: &[f64]) -> Vec<f64> {
    (0..stack.d)
        .map(|k| by_group[usize::from(k >= stack.d / 2)])
        .collect()
}
