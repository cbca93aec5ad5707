//! The order check of `linear_path.output`: a path whose exact `E[LN(y)]`
//! the grouped enumeration reaches at every width of
//! [`SWEEP_D`], so the first-order closed
//! form's gap can be measured as `d` grows.
//!
//! # The sweep path at width `d`
//!
//! Two groups of `d/2` units: `u = u₁` on group 1, `u₂` on group 2, dropped
//! at `p`; `W = diag(s_g) + (t_g/d) 1_{G₁}ᵀ` (row `k` of group `g` reads
//! its own unit times `s_g` and `t_g/d` times each unit of group 1: a
//! genuine off-diagonal mixing); `b = 0`; `+h` with `h_g` per group;
//! LayerNorm with `γ = 1`, `β = 0`, `ε = 0`. Given the kept counts
//! `n₁, n₂`, with `S = n₁ u₁ / q`, the kept units of group `g` hold
//! `A_g = s_g u_g / q + t_g S/d + h_g` and the dropped ones
//! `B_g = t_g S/d + h_g`; so `LN(y)` takes four values, and a unit of
//! group `g` is kept with probability `n_g / (d/2)` given the counts
//! (exchangeability). The oracle sums over `(n₁, n₂)` with
//! [`enumerate_counts`].
//!
//! # Rounding of one term
//!
//! `A_g`, `B_g`: 4 roundings; `μ` from four values and their counts: 8;
//! `V` by two passes over them: 16; `sqrt`, the subtraction `y − μ` and
//! the division: 3. So [`TERM_ROUNDINGS`] `= 31`, charged on
//! `2 (|y| + |μ|)/sqrt(V)` (the subtraction's absolute error plus the
//! relative error of `sqrt V` times `|y − μ|/sqrt V`).

use nalgebra::{DMatrix, DVector};

use crate::claims::order::{GapCurve, OrderCheck, OwnGap, Rival, SWEEP_D};
use crate::error::Error;
use crate::exact::enumerate_counts;
use crate::formulas::linear_path as f;
use crate::formulas::{Rate, layernorm};
use crate::ops::LayerNorm;
use crate::stats::tolerance::gamma_upper;

/// Roundings of one term of the grouped sum (module docs).
pub const TERM_ROUNDINGS: f64 = 31.0;

const U: [f64; 2] = [1.5, 0.5];
const S: [f64; 2] = [1.0, -0.8];
const T: [f64; 2] = [0.5, 2.0];
const H: [f64; 2] = [0.3, -0.4];
const P: f64 = 0.3;

fn group(k: usize, d: usize) -> usize {
    usize::from(k >= d / 2)
}

/// The sweep path at width `d` ([`path`]): the dropout's input `u`, the
/// eval mean `ȳ = W u + h` and `W`.
#[derive(Debug, Clone)]
pub struct SweepPath {
    pub u: DVector<f64>,
    pub mean: DVector<f64>,
    pub w: DMatrix<f64>,
}

/// A closed form of `E[LN(y)]` on the sweep path at width `d`.
pub type ClosedForm = fn(&SweepPath, Rate) -> Result<Vec<f64>, Error>;

/// The first-order closed form through the live correction's own code:
/// `ȳ = W u + b + h`, the traces from the column norms, `c`, `β + c (LN(ȳ) − β)`.
pub fn first_order(path: &SweepPath, rate: Rate) -> Result<Vec<f64>, Error> {
    let norms = f::column_norms(&path.w);
    let (centered, _) = f::linear_dropout_traces(&norms, path.u.as_slice(), rate);
    f::ln_first_order_linear(centered, path.mean.as_slice(), &norm(path.mean.len())?)
}

/// The eval output `LN(ȳ)`: the rival the first-order form must beat.
pub fn eval_output(path: &SweepPath, _: Rate) -> Result<Vec<f64>, Error> {
    layernorm::uncorrected(path.mean.as_slice(), &norm(path.mean.len())?)
}

fn norm(d: usize) -> Result<LayerNorm, Error> {
    LayerNorm::new(vec![1.0; d], vec![0.0; d], 0.0)
}

/// The sweep path at width `d`.
pub fn path(d: usize) -> SweepPath {
    let u = DVector::from_fn(d, |k, _| U[group(k, d)]);
    let w = DMatrix::from_fn(d, d, |k, j| {
        let g = group(k, d);
        let own = if k == j { S[g] } else { 0.0 };
        let mix = if group(j, d) == 0 {
            T[g] / d as f64
        } else {
            0.0
        };
        own + mix
    });
    let h = DVector::from_fn(d, |k, _| H[group(k, d)]);
    let mean = &w * &u + h;
    SweepPath { u, mean, w }
}

/// Per group, the exact `E[LN(y)_k]` of a unit of that group, and its
/// rounding bound.
pub fn exact(d: usize) -> Result<([f64; 2], [f64; 2]), Error> {
    let rate = Rate::new(P)?;
    let (q, half, dd) = (rate.q(), d / 2, d as f64);
    let oracle = enumerate_counts(&[half, half], rate, 4, dd.sqrt(), |n, out| {
        let sum = n[0] as f64 * U[0] / q;
        let a = [0, 1].map(|g| S[g] * U[g] / q + T[g] * sum / dd + H[g]);
        let b = [0, 1].map(|g| T[g] * sum / dd + H[g]);
        let counts = [n[0], half - n[0], n[1], half - n[1]].map(|c| c as f64);
        let values = [a[0], b[0], a[1], b[1]];
        let mu = counts.iter().zip(&values).map(|(c, v)| c * v).sum::<f64>() / dd;
        let var = counts
            .iter()
            .zip(&values)
            .map(|(c, v)| c * (v - mu) * (v - mu))
            .sum::<f64>()
            / dd;
        let sd = var.sqrt();
        for g in 0..2 {
            let kept = n[g] as f64 / half as f64;
            out[g] = kept * (a[g] - mu) / sd + (1.0 - kept) * (b[g] - mu) / sd;
            out[2 + g] = 2.0
                * (kept * (a[g].abs() + mu.abs()) + (1.0 - kept) * (b[g].abs() + mu.abs()))
                / sd;
        }
    })?;
    let v = &oracle.values;
    let r = &oracle.rounding;
    Ok((
        [v[0], v[1]],
        [0, 1].map(|g| r[g] + gamma_upper(TERM_ROUNDINGS) * v[2 + g]),
    ))
}

/// `mean_k |closed_k − exact_k|` at width `d` of each closed form, and
/// the oracle's rounding bound in the same measure.
pub fn gaps(closed: &[ClosedForm], d: usize) -> Result<(Vec<f64>, f64), Error> {
    let path = path(d);
    let rate = Rate::new(P)?;
    let (values, rounding) = exact(d)?;
    let gaps = closed
        .iter()
        .map(|c| {
            let est = c(&path, rate)?;
            Ok(est
                .iter()
                .enumerate()
                .map(|(k, e)| (e - values[group(k, d)]).abs())
                .sum::<f64>()
                / d as f64)
        })
        .collect::<Result<_, Error>>()?;
    Ok((gaps, (rounding[0] + rounding[1]) / 2.0))
}

/// The order check of `closed` (order 1) against the eval output, with the
/// claim's own gaps at its configuration (`own`, `own_rival`).
pub fn order_check(closed: ClosedForm, own: OwnGap, own_rival: f64) -> Result<OrderCheck, Error> {
    let (mut gap, mut rounding, mut rival) = (vec![], vec![], vec![]);
    for &d in &SWEEP_D {
        let (g, r) = gaps(&[closed, eval_output], d)?;
        gap.push(g[0]);
        rival.push(g[1]);
        rounding.push(r);
    }
    let curve = GapCurve::fit(&SWEEP_D, gap, rounding, 1);
    let rival = Rival {
        name: "the eval output LN(y_bar)",
        gap_at_d: own_rival,
        gap: rival,
    };
    Ok(OrderCheck::judge(&curve, own, Some(&rival)))
}
