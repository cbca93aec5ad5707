//! The linear-path family: a dropout that reaches its norm through linear
//! maps, adds and further dropouts. The exact covariance `Σ` of the norm's
//! input, `E[V]` and `E[R²]` (exact, every one with an oracle that runs the
//! path's forward on every mask, [`crate::exact::linear_path`]), and
//! `β + c (LN(ȳ) − β)` as the estimate of `E[LN(y)]` (leading order,
//! z-tested against the enumerated `E[LN(y)]`, its gap and the eval
//! output's gap reported). Derivations: [`crate::formulas::linear_path`].
//!
//! Three paths: `Dropout(u) → Linear(W, b) → (+h)` ([`linear`]);
//! attention dropout on two heads → value product → concatenation →
//! `o_proj` → (+h) ([`attention`]); and the two-dropout chain
//! `Dropout(u) → Linear → Dropout → Linear → (+h)` ([`chain`]).
//!
//! Each draw runs the path once through the subject's own dropout layer
//! (its `forward_train` for a vector, `forward_attention` for a row) and
//! the mat-vecs; the statistic is the per-draw quantity whose mean is
//! claimed: `(y_i − ȳ_i)(y_j − ȳ_j)` (`ȳ` the eval forward, the exact
//! mean), `V(y)`, `mean y²`, or `LN(y)`. Each mean test declares the
//! skewness of its draws from their exact law over every mask.

use std::sync::LazyLock;

use nalgebra::DVector;

use super::enumerated::EnumeratedClaim;
use super::fn_claim::sample_means;
use super::order::{OrderCheck, OwnGap};
use super::{Card, Claim, Law, Shape, listed};
use crate::engine::{Budget, Stream};
use crate::error::Error;
use crate::exact::linear_path as ex;
use crate::exact::{Oracle, central_moments_by};
use crate::formulas::linear_path::{self as f, Moments, Path, Source, Step};
use crate::formulas::{layernorm, mean_and_variance};
use crate::ops::{Subject, TrainPass};
use crate::stats::Estimate;
use crate::stats::tolerance::gamma_upper;

/// The family's name.
pub const FAMILY: &str = "linear_path";
/// Draws of each claim at the default budget (more where its statistic's
/// minimum budget is higher).
pub const SAMPLES: u64 = 400_000;

/// What one claim states of its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantity {
    /// `Cov(y) = Σ` (upper triangle, row by row).
    Covariance,
    /// `E[V] = V(ȳ) + tr(CΣC)/d`.
    MeanOfV,
    /// `E[R²] = mean ȳ² + tr Σ/d`.
    MeanOfR2,
    /// `E[LN(y)] ≈ β + c (LN(ȳ) − β)` (leading order).
    Output,
}

/// One claim: a quantity of a path (its configuration).
pub type PathClaim = EnumeratedClaim<Quantity, fn() -> Path>;

impl PathClaim {
    /// The path the claim is stated on.
    pub fn path(&self) -> Path {
        (self.config)()
    }

    /// Components of the claimed quantity for a norm input of width `d`.
    pub fn dim(&self, d: usize) -> usize {
        match self.quantity {
            Quantity::Covariance => d * (d + 1) / 2,
            Quantity::MeanOfV | Quantity::MeanOfR2 => 1,
            Quantity::Output => d,
        }
    }

    /// The per-draw statistic at the norm input `y` (`mean` the eval
    /// forward `ȳ`).
    pub fn per_draw(&self, y: &DVector<f64>, mean: &DVector<f64>, out: &mut [f64]) {
        match self.quantity {
            Quantity::Covariance => {
                let e = y - mean;
                upper(|i, j| e[i] * e[j], y.len(), out);
            }
            Quantity::MeanOfV => out[0] = mean_and_variance(y.as_slice()).1,
            Quantity::MeanOfR2 => out[0] = y.norm_squared() / y.len() as f64,
            Quantity::Output => {
                let ln = layernorm::uncorrected(y.as_slice(), &wide_norm())
                    .expect("a finite input of the claim's width");
                out.copy_from_slice(&ln);
            }
        }
    }

    /// The closed form from the path's moments `m`.
    pub fn closed_form_of(&self, m: &Moments) -> Result<Vec<f64>, Error> {
        Ok(match self.quantity {
            Quantity::Covariance => {
                let mut out = vec![0.0; self.dim(m.dim())];
                upper(|i, j| m.cov[(i, j)], m.dim(), &mut out);
                out
            }
            Quantity::MeanOfV => vec![f::mean_of_v(m)],
            Quantity::MeanOfR2 => vec![f::mean_of_r2(m)],
            Quantity::Output => f::ln_corrected(m, &wide_norm())?,
        })
    }

    /// The skewness of the draws, per component, from their exact law.
    fn skewness_by_enumeration(&self) -> Result<Vec<f64>, Error> {
        let path = self.path();
        let (mean, _) = ex::eval_forward(&path)?;
        let dim = self.dim(mean.len());
        let moments = central_moments_by(
            dim,
            |y: &DVector<f64>, out: &mut [f64]| self.per_draw(y, &mean, out),
            |dim, g| ex::path_expectation(&path, dim, |y, _, out| g(y, out)),
        )?;
        Ok(moments.iter().map(|c| c.skewness().abs()).collect())
    }

    /// The oracle: `E` of the per-draw statistic over every mask, with the
    /// rounding of the forward and of the closed form added (derivation in
    /// [`crate::exact::linear_path`]): a covariance entry's draw
    /// `(y_i − ȳ_i)(y_j − ȳ_j)` errs by at most `γ_{2n+3}` times
    /// `(ŷabs_i + ȳabs_i)(ŷabs_j + ȳabs_j)`, and the closed form's entry by
    /// `γ_{2n} Σabs_ij`; `V` and `mean y²` err by at most
    /// `γ_{n+2d+4} · 3 mean ŷabs²` (an input error `e` moves `‖C y‖²/d` by
    /// `≤ (2‖y‖‖e‖ + ‖e‖²)/d`, the two-pass reduction adds `2d + 4`
    /// roundings), and their closed forms by `γ_{2n+2d+4}` times
    /// `3 (mean ȳabs² + tr Σabs/d + 1ᵀΣabs1/d²)`. The leading-order output's
    /// oracle carries the enumeration's own bound.
    fn exact(&self) -> Result<Oracle, Error> {
        let path = self.path();
        let (mean, mean_abs) = ex::eval_forward(&path)?;
        let d = mean.len();
        let dim = self.dim(d);
        let n = ex::forward_roundings(&path);
        let values = ex::path_expectation(&path, dim, |y, _, out| self.per_draw(y, &mean, out))?;
        let magnitude = ex::path_expectation(&path, dim, |_, y_abs, out| match self.quantity {
            Quantity::Covariance => {
                let s = y_abs + &mean_abs;
                upper(|i, j| s[i] * s[j], d, out);
            }
            Quantity::MeanOfV | Quantity::MeanOfR2 => {
                out[0] = 3.0 * y_abs.norm_squared() / d as f64;
            }
            Quantity::Output => out.fill(0.0),
        })?;
        let abs = ex::absolute(&path).moments()?;
        let (forward, closed): (f64, Vec<f64>) = match self.quantity {
            Quantity::Covariance => {
                let mut c = vec![0.0; dim];
                upper(|i, j| abs.cov[(i, j)], d, &mut c);
                (
                    gamma_upper(2.0 * n + 3.0),
                    c.iter().map(|x| gamma_upper(2.0 * n) * x).collect(),
                )
            }
            Quantity::MeanOfV | Quantity::MeanOfR2 => {
                let dd = d as f64;
                let scale =
                    abs.mean.norm_squared() / dd + abs.cov.trace() / dd + abs.cov.sum() / (dd * dd);
                let k = n + 2.0 * dd + 4.0;
                (gamma_upper(k), vec![gamma_upper(n + k) * 3.0 * scale])
            }
            Quantity::Output => (0.0, vec![0.0; dim]),
        };
        let rounding = values
            .rounding
            .iter()
            .zip(&magnitude.values)
            .zip(&closed)
            .map(|((r, m), c)| r + forward * m + c)
            .collect();
        Ok(Oracle {
            values: values.values,
            rounding,
        })
    }

    /// The gaps `mean_k |estimate_k − E[LN(y)]_k|` of the first-order
    /// output and of the eval output `LN(ȳ)` (the output claim's note).
    pub fn output_gaps(&self) -> Result<(f64, f64), Error> {
        let path = self.path();
        let exact = self.exact()?.values;
        let m = path.moments()?;
        let gap = |est: &[f64]| {
            est.iter()
                .zip(&exact)
                .map(|(a, e)| (a - e).abs())
                .sum::<f64>()
                / exact.len() as f64
        };
        Ok((
            gap(&f::ln_corrected(&m, &wide_norm())?),
            gap(&layernorm::uncorrected(m.mean.as_slice(), &wide_norm())?),
        ))
    }
}

impl PathClaim {
    /// The order check of `closed` on the sweep path ([`sweep`]), with this
    /// claim's own first-order and eval gaps at `d = 16`.
    pub fn order_check_with(&self, closed: sweep::ClosedForm) -> Result<OrderCheck, Error> {
        let (first, eval) = self.output_gaps()?;
        let oracle = self.exact()?;
        let rounding = oracle.rounding.iter().sum::<f64>() / oracle.rounding.len() as f64;
        let own = OwnGap {
            d: oracle.values.len(),
            gap: first,
            rounding,
        };
        sweep::order_check(closed, own, eval)
    }
}

/// Writes `g(i, j)` for `i ≤ j < d`, row by row.
fn upper(g: impl Fn(usize, usize) -> f64, d: usize, out: &mut [f64]) {
    let mut k = 0;
    for i in 0..d {
        for j in i..d {
            out[k] = g(i, j);
            k += 1;
        }
    }
}

/// One pass of the path through the subject's dropout layer.
pub fn sample_path(path: &Path, s: &Subject, rng: &mut Stream) -> Result<DVector<f64>, Error> {
    let drop = |x: &[f64], p: f64, row: bool, rng: &mut Stream| -> Result<Vec<f64>, Error> {
        let (mut out, mut mask) = (vec![0.0; x.len()], vec![false; x.len()]);
        let pass = TrainPass::new(x, &mut out, &mut mask);
        if row {
            s.dropout.forward_attention(pass, p, rng)?;
        } else {
            s.dropout.forward_train(pass, p, rng)?;
        }
        Ok(out)
    };
    let mut x = match &path.source {
        Source::Dropped { u, rate } => DVector::from_vec(drop(u, rate.p(), false, rng)?),
        Source::Attention { heads, rate } => {
            let mut out = Vec::with_capacity(path.source.width());
            for head in heads {
                let b = DVector::from_vec(drop(&head.a, rate.p(), true, rng)?);
                out.extend((head.v.transpose() * b).iter().copied());
            }
            DVector::from_vec(out)
        }
    };
    for step in &path.steps {
        x = match step {
            Step::Linear { w, b } => w * &x + b,
            Step::Add(h) => &x + h,
            Step::Dropout(rate) => DVector::from_vec(drop(x.as_slice(), rate.p(), false, rng)?),
        };
    }
    Ok(x)
}

impl Claim for PathClaim {
    fn card(&self) -> Card {
        let shape = match self.quantity {
            Quantity::MeanOfV | Quantity::MeanOfR2 => Shape::Scalar,
            _ => Shape::Vector,
        };
        let card = self.enumerated_card(FAMILY, shape, SAMPLES, || self.skewness_by_enumeration());
        match self.quantity {
            Quantity::Output => card.leading_order(1),
            _ => card,
        }
    }
    fn analytic(&self) -> Result<Vec<f64>, Error> {
        self.closed_form_of(&self.path().moments()?)
    }
    fn oracle(&self) -> Result<Option<Oracle>, Error> {
        self.exact().map(Some)
    }
    fn estimate(&self, subject: &Subject, budget: Budget) -> Result<Vec<Estimate>, Error> {
        let path = self.path();
        let (mean, _) = ex::eval_forward(&path)?;
        sample_means(subject, budget, self.dim(mean.len()), |s, rng, out| {
            let y = sample_path(&path, s, rng)?;
            self.per_draw(&y, &mean, out);
            Ok(())
        })
    }
    /// Per component, the skewness of the draw's exact law over every mask
    /// of the path.
    fn law(&self) -> Law {
        self.enumerated_law(
            || self.skewness_by_enumeration(),
            "the path's enumeration over masks failed",
        )
    }
    fn order_check(&self) -> Option<Result<OrderCheck, String>> {
        (self.quantity == Quantity::Output).then(|| {
            self.order_check_with(sweep::first_order)
                .map_err(|e| e.to_string())
        })
    }
    fn note(&self) -> Option<String> {
        if self.quantity != Quantity::Output {
            return None;
        }
        let (first, eval) = self.output_gaps().ok()?;
        Some(format!(
            "first-order gap {first:.3e} vs eval output's {eval:.3e} (mean |.| to the enumerated E[LN(y)], d = 16)"
        ))
    }
}

static CLAIMS: LazyLock<Vec<PathClaim>> = LazyLock::new(|| {
    use Quantity::*;
    vec![
        PathClaim::new(
            "linear_path.covariance",
            "y = W dropout(u) + b + h: Cov y = (p/q) W diag(u^2) W^T",
            Covariance,
            linear,
        ),
        PathClaim::new(
            "linear_path.mean_of_v",
            "E[V_y] = V(y_bar) + tr(C Sigma C)/d",
            MeanOfV,
            linear,
        ),
        PathClaim::new(
            "linear_path.mean_of_r2",
            "E[R^2_y] = mean(y_bar^2) + tr(Sigma)/d",
            MeanOfR2,
            linear,
        ),
        PathClaim::new(
            "linear_path.attention_covariance",
            "y = o_proj(concat_h sum_s b_s v_s) + h: Cov y = (p/q) sum_h sum_s a_s^2 (W_h v_s)(W_h v_s)^T",
            Covariance,
            attention,
        ),
        PathClaim::new(
            "linear_path.attention_mean_of_v",
            "attention -> o_proj -> +h: E[V_y] = V(y_bar) + tr(C Sigma C)/d",
            MeanOfV,
            attention,
        ),
        PathClaim::new(
            "linear_path.chain_covariance",
            "two dropouts: Cov = S + (p2/q2) diag(x_bar^2 + diag S), S = (p1/q1) W1 diag(u^2) W1^T, then W2 . W2^T",
            Covariance,
            chain,
        ),
        PathClaim::new(
            "linear_path.chain_mean_of_v",
            "two dropouts: E[V_y] = V(y_bar) + tr(C Sigma C)/d",
            MeanOfV,
            chain,
        ),
        PathClaim::new(
            "linear_path.output",
            "E[LN(y)] ~ beta + c (LN(y_bar) - beta), c^2 = (V(y_bar) + eps)/(E[V_y] + eps)",
            Output,
            wide,
        ),
    ]
});

/// The family's claims in report order (named and described in
/// [`super::families`]).
pub fn claims() -> Vec<&'static dyn Claim> {
    listed(&CLAIMS)
}

/// This family's claims with their concrete type.
pub fn path_claims() -> &'static [PathClaim] {
    &CLAIMS
}

pub mod configs;
pub mod sweep;
pub use configs::{attention, chain, linear, wide, wide_norm};
#[cfg(test)]
mod tests;
