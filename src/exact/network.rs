//! Exact oracles of the network family ([`crate::formulas::network`]): the
//! forward of each small stack the claims use, with its dropouts given as
//! one closure (so the same definition runs on every enumerated mask and,
//! in the claims' samplers, through a subject's own dropout layer), and the
//! grouped enumeration that reaches the pre-LN stack at any width for the
//! order check.
//!
//! # The stacks
//!
//! * [`LinearResidual`]: `h₁ = x + drop₁(A x)`, `h₂ = h₁ + drop₂(B h₁)`
//!   (two residual blocks with linear branches; enumerated over all
//!   `2^{2d}` masks).
//! * [`PreLn`]: `h₁ = x + drop₁(a ⊙ x)`, `h₂ = h₁ + drop₂(b ⊙ LN₁(h₁))`,
//!   read at `LN₂(h₂)` (two pre-LN blocks with elementwise branches). The
//!   units form two groups of `d/2`: group 1 has `x₁, a₁, b₁`, group 2
//!   `x₂` and no branch (`a = b = 0`), so only group 1 is noisy.
//! * [`MeanShift`]: `y_k = h_g + t_g S/d`, `S = Σ_j drop(u)_j`, read at
//!   `φ(y)` (a wide linear map after a dropout, then an elementwise
//!   nonlinearity; groups of `d/2` units with `u_g, h_g, t_g`).
//!
//! # Grouped enumeration of the pre-LN stack (exact at any `d`)
//!
//! Only group 1's masks matter. Let `K` be its count kept by `drop₁`
//! (`Binomial(n, q)`, `n = d/2`); given `K`, `J_A` of the `K` kept and
//! `J_B` of the `n − K` dropped are kept by `drop₂` (`Binomial(K, q)`,
//! `Binomial(n − K, q)`, independent by A1). The units of group 1 then hold
//! four values (`h₁ ∈ {A, B}`, `A = x₁ (1 + a₁/q)`, `B = x₁`; `h₂ = h₁ +
//! b₁ LN₁(h₁)/q` if kept by `drop₂`, else `h₁`), group 2 holds `x₂`, and
//! `LN₂` is a function of the counts. By exchangeability a unit of group 1
//! is in each state with probability (its count)/`n` given the counts, as
//! in [`super::enumerate_counts`], so
//! `E[LN₂(h₂)_k] = Σ P(K) P(J_A|K) P(J_B|K) Σ_state (count/n) LN₂(state)`.
//!
//! Rounding: the weights as in [`super::binomial_weights`] (three per
//! term), Higham's summation bound over the terms, the skipped mass
//! (weights below [`PRE_LN_NEGLIGIBLE`]) times `sup |LN₂| ≤ √d`, and
//! each term's own [`PRE_LN_TERM_ROUNDINGS`] charged on
//! `2 (mean |h| + |μ|)/σ` over the unit's group (as `linear_path`'s
//! sweep). Given the counts, group 1's expected output is
//! `(mean of its values − μ)/σ`, so a term needs `μ`, `σ` and that mean.

use nalgebra::{DMatrix, DVector};

use super::{Oracle, binomial_weights};
use crate::error::Error;
use crate::formulas::{Rate, layernorm};
use crate::ops::LayerNorm;
use crate::stats::tolerance::{self, gamma_upper};

/// One dropout of a stack: `(which, input) → output` (`which` numbers the
/// stack's dropouts from 0).
pub type Dropouts<'a> = dyn FnMut(usize, &[f64]) -> Result<Vec<f64>, Error> + 'a;

/// The dropouts given by mask bits: dropout `k` reads bits `k d .. (k+1) d`.
pub fn masked(mask: &[bool], q: f64) -> impl FnMut(usize, &[f64]) -> Result<Vec<f64>, Error> + '_ {
    move |k, x| {
        let bits = &mask[k * x.len()..(k + 1) * x.len()];
        Ok(x.iter()
            .zip(bits)
            .map(|(v, &m)| if m { v / q } else { 0.0 })
            .collect())
    }
}

/// `h₁ = x + drop₁(A x)`, `h₂ = h₁ + drop₂(B h₁)`.
#[derive(Debug, Clone)]
pub struct LinearResidual {
    pub x: DVector<f64>,
    pub a: DMatrix<f64>,
    pub b: DMatrix<f64>,
    pub rate: Rate,
}

impl LinearResidual {
    /// `h₂` for one draw of the two dropouts.
    pub fn forward(&self, drop: &mut Dropouts) -> Result<DVector<f64>, Error> {
        let h1 = &self.x + DVector::from_vec(drop(0, (&self.a * &self.x).as_slice())?);
        let branch = DVector::from_vec(drop(1, (&self.b * &h1).as_slice())?);
        Ok(h1 + branch)
    }

    /// The exact mean `E h₂ = (I + B)(I + A) x` (inverted dropout is
    /// unbiased and every op is linear).
    pub fn mean(&self) -> DVector<f64> {
        let h1 = &self.x + &self.a * &self.x;
        &h1 + &self.b * &h1
    }

    /// `E f(h₂)` over all `2^{2d}` masks.
    pub fn expectation(
        &self,
        dim: usize,
        mut f: impl FnMut(&DVector<f64>, &mut [f64]),
    ) -> Result<Oracle, Error> {
        let q = self.rate.q();
        super::enumerate_masks(2 * self.x.len(), self.rate, dim, |mask, out| {
            let h2 = self
                .forward(&mut masked(mask, q))
                .expect("mask bits cover both dropouts");
            f(&h2, out);
        })
    }
}

/// The two-group pre-LN stack (module docs) at width `d`.
#[derive(Debug, Clone)]
pub struct PreLn {
    /// `x₁, x₂`.
    pub x: [f64; 2],
    /// Group 1's branch gains `a₁` (into `drop₁`) and `b₁` (into `drop₂`).
    pub a: f64,
    pub b: f64,
    /// `LN₁`'s gain (all units; `β = 0`, `ε = 0`); `LN₂` has `γ = 1`.
    pub gamma: f64,
    pub rate: Rate,
    pub d: usize,
}

/// Weights below this are skipped by the grouped pre-LN sum (three nested
/// counts, so its cost is the cube of each range): the skipped mass is
/// charged at `sup |LN₂| ≤ √d` in the rounding bound, at most about
/// `10^-15` at `d = 4096` against gaps above `10^-5`, while the ranges
/// shrink from about ±11.4 to ±8.6 standard deviations (under half the terms of
/// [`super::NEGLIGIBLE_WEIGHT`]).
pub const PRE_LN_NEGLIGIBLE: f64 = 1e-18;

/// Roundings of one term of the grouped pre-LN sum: `h₁` (2), `LN₁`'s
/// `μ, σ` over three values and their counts (8 + 16 + 1) and its output
/// (3), `h₂` (3), `LN₂`'s `μ, V` over five values (10 + 20), `sqrt`,
/// subtraction and division (3): 66.
pub const PRE_LN_TERM_ROUNDINGS: f64 = 66.0;

impl PreLn {
    fn group(&self, k: usize) -> usize {
        usize::from(k >= self.d / 2)
    }

    /// Per unit: `x`, `a`, `b`.
    pub fn units(&self) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        let by = |f: &dyn Fn(usize) -> f64| (0..self.d).map(|k| f(self.group(k))).collect();
        (
            by(&|g| self.x[g]),
            by(&|g| if g == 0 { self.a } else { 0.0 }),
            by(&|g| if g == 0 { self.b } else { 0.0 }),
        )
    }

    /// `LN₁`: gain `γ`, `β = 0`, `ε = 0`.
    pub fn ln1(&self) -> Result<LayerNorm, Error> {
        LayerNorm::new(vec![self.gamma; self.d], vec![0.0; self.d], 0.0)
    }

    /// `LN₂`: `γ = 1`, `β = 0`, `ε = 0`.
    pub fn ln2(&self) -> Result<LayerNorm, Error> {
        LayerNorm::new(vec![1.0; self.d], vec![0.0; self.d], 0.0)
    }

    /// `LN₂(h₂)` for one draw of the two dropouts.
    pub fn forward(&self, drop: &mut Dropouts) -> Result<Vec<f64>, Error> {
        let (x, a, b) = self.units();
        let ax: Vec<f64> = a.iter().zip(&x).map(|(a, x)| a * x).collect();
        let h1: Vec<f64> = x.iter().zip(drop(0, &ax)?).map(|(x, n)| x + n).collect();
        let u = layernorm::uncorrected(&h1, &self.ln1()?)?;
        let bu: Vec<f64> = b.iter().zip(&u).map(|(b, u)| b * u).collect();
        let h2: Vec<f64> = h1.iter().zip(drop(1, &bu)?).map(|(h, n)| h + n).collect();
        layernorm::uncorrected(&h2, &self.ln2()?)
    }

    /// Per group, the exact `E[LN₂(h₂)_k]` of a unit of that group, and its
    /// rounding bound (module docs).
    pub fn grouped(&self) -> Result<Oracle, Error> {
        let (n, q, dd) = (self.d / 2, self.rate.q(), self.d as f64);
        let nn = n as f64;
        let (wk, eta) = binomial_weights(n, self.rate);
        let (mut values, mut magnitude, mut term, mut terms) = ([0.0; 2], [0.0; 2], [0.0; 2], 0.0);
        let mut skipped = 0.0;
        let [x1, x2] = self.x;
        let (hk, hd) = (x1 * (1.0 + self.a / q), x1);
        let (lo, hi) = support(&wk, &mut skipped);
        for (k, &pk) in wk.iter().enumerate().take(hi + 1).skip(lo) {
            // LN₁ over the counts (k of A, n − k of B, n of x₂).
            let counts1 = [k as f64, (n - k) as f64, n as f64];
            let (mu1, sd1) = moments(&counts1, &[hk, hd, x2], dd);
            let lift = |h: f64| h + self.b * self.gamma * (h - mu1) / sd1 / q;
            let (wa, _) = binomial_weights(k, self.rate);
            let (wb, _) = binomial_weights(n - k, self.rate);
            let (mut outside_a, mut outside_b) = (0.0, 0.0);
            let (alo, ahi) = support(&wa, &mut outside_a);
            let (blo, bhi) = support(&wb, &mut outside_b);
            skipped += pk * (outside_a + outside_b);
            for (ja, &pa) in wa.iter().enumerate().take(ahi + 1).skip(alo) {
                for (jb, &pb) in wb.iter().enumerate().take(bhi + 1).skip(blo) {
                    let w = pk * pa * pb;
                    terms += 1.0;
                    let vals = [lift(hk), hk, lift(hd), hd, x2];
                    let counts = [ja, k - ja, jb, n - k - jb, n].map(|c| c as f64);
                    let (mu, sd) = moments(&counts, &vals, dd);
                    // Group 1's states average to its mean; group 2 is x₂.
                    let (mut mean1, mut abs1) = (0.0, 0.0);
                    for (c, v) in counts[..4].iter().zip(&vals) {
                        mean1 += c * v;
                        abs1 += c * v.abs();
                    }
                    let out = [(mean1 / nn - mu) / sd, (x2 - mu) / sd];
                    let abs = [abs1 / nn + mu.abs(), x2.abs() + mu.abs()].map(|a| 2.0 * a / sd);
                    for g in 0..2 {
                        values[g] += w * out[g];
                        magnitude[g] += w * out[g].abs();
                        term[g] += w * abs[g];
                    }
                }
            }
        }
        let factor = gamma_upper(tolerance::enumeration_roundings(terms, 3.0)) + 3.0 * eta;
        let rounding = (0..2)
            .map(|g| {
                factor * magnitude[g]
                    + gamma_upper(PRE_LN_TERM_ROUNDINGS) * term[g]
                    + skipped * dd.sqrt()
            })
            .collect();
        Ok(Oracle {
            values: values.to_vec(),
            rounding,
        })
    }
}

/// The counts `lo..=hi` whose weight is at least [`PRE_LN_NEGLIGIBLE`]
/// (binomial weights are unimodal, so they form one run), adding the mass
/// outside to `skipped`.
fn support(w: &[f64], skipped: &mut f64) -> (usize, usize) {
    let lo = w.iter().position(|&p| p >= PRE_LN_NEGLIGIBLE).unwrap_or(0);
    let hi = w.iter().rposition(|&p| p >= PRE_LN_NEGLIGIBLE).unwrap_or(0);
    *skipped += w[..lo].iter().sum::<f64>() + w[hi + 1..].iter().sum::<f64>();
    (lo, hi)
}

/// `(μ, σ)` of `d` units holding `values[s]` `counts[s]` times.
fn moments(counts: &[f64], values: &[f64], d: f64) -> (f64, f64) {
    let mu = counts.iter().zip(values).map(|(c, v)| c * v).sum::<f64>() / d;
    let var = counts
        .iter()
        .zip(values)
        .map(|(c, v)| c * (v - mu) * (v - mu))
        .sum::<f64>()
        / d;
    (mu, var.sqrt())
}

/// `y_k = h_g + t_g S/d`, `S = Σ_j drop(u)_j`, read at `φ(y)`.
#[derive(Debug, Clone)]
pub struct MeanShift {
    pub u: [f64; 2],
    pub h: [f64; 2],
    pub t: [f64; 2],
    pub phi: fn(f64) -> f64,
    pub rate: Rate,
    pub d: usize,
}

impl MeanShift {
    fn group(&self, k: usize) -> usize {
        usize::from(k >= self.d / 2)
    }

    /// The dropout's input `u`, per unit.
    pub fn input(&self) -> Vec<f64> {
        (0..self.d).map(|k| self.u[self.group(k)]).collect()
    }

    /// `φ(y)` for one draw of the dropout.
    pub fn forward(&self, drop: &mut Dropouts) -> Result<Vec<f64>, Error> {
        let sum: f64 = drop(0, &self.input())?.iter().sum();
        Ok((0..self.d)
            .map(|k| {
                let g = self.group(k);
                (self.phi)(self.h[g] + self.t[g] * sum / self.d as f64)
            })
            .collect())
    }

    /// Per group, the exact `E φ(y_k)` by the kept counts of the two groups
    /// ([`super::enumerate_counts`]; `|φ| ≤ sup_phi` on the range `y` takes).
    pub fn grouped(&self, sup_phi: f64) -> Result<Oracle, Error> {
        let (n, q, dd) = (self.d / 2, self.rate.q(), self.d as f64);
        super::enumerate_counts(&[n, n], self.rate, 2, sup_phi, |c, out| {
            let sum = (c[0] as f64 * self.u[0] + c[1] as f64 * self.u[1]) / q;
            for (g, o) in out.iter_mut().enumerate() {
                *o = (self.phi)(self.h[g] + self.t[g] * sum / dd);
            }
        })
    }
}
