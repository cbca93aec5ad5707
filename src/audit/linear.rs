//! Audit of linear-path captures (`Dropout(u) → Linear(W, b) → (+h) →
//! norm`): per token, the truth `E[norm(y)]` by sampling masks through the
//! path, its standard error, the eval output `norm(ȳ)`, the first-order
//! output `β + c (LN(ȳ) − β)` (or `c_rms RMS(ȳ)`,
//! [`crate::formulas::linear_path`]), one [`TokenValues`] a token; the
//! site's gaps to the truth are [`LinearAudit::gaps`].
//!
//! Each draw is one mask of `u` through the subject's reference dropout,
//! one mat-vec (`d × m`) and the norm: budget `samples · d · m` flops per
//! token. Tokens run in parallel, each from the seed derived from `seed`,
//! the capture's name and the token's index ([`derive_seed`], as
//! [`super::audit_site`] does), so the bits do not depend on the thread
//! count. The first-order output reads `W` only through its column norms,
//! computed once per capture.

use nalgebra::{DMatrix, DVector};
use rayon::prelude::*;
use serde::Serialize;

use super::token::sampled_truth;
use super::{Gap, TokenValues};
use crate::claims::fn_claim::sample_means;
use crate::claims::linear_path::sample_path;
use crate::engine::{Budget, derive_seed};
use crate::error::Error;
use crate::formulas::linear_path::{
    self as f, Path, Source, Step, linear_dropout_traces, ln_first_order_linear,
    rms_first_order_linear,
};
use crate::ops::{AnyNorm, Rate, Subject};

/// One linear-path site's capture: per token the dropout's input `u`
/// (width `m`), and what follows the dropout ([`LinearTail`]).
#[derive(Debug, Clone)]
pub struct LinearCapture {
    pub name: String,
    pub rate: Rate,
    pub u: Vec<Vec<f64>>,
    pub tail: LinearTail,
}

/// What follows a captured path's dropped source, the same for the linear
/// and the attention paths: `Linear(W, b) → (+h_t) → norm`, with `h` one
/// row per token (width `d`).
#[derive(Debug, Clone)]
pub struct LinearTail {
    pub w: DMatrix<f64>,
    pub b: DVector<f64>,
    pub h: Vec<Vec<f64>>,
    pub norm: AnyNorm,
}

impl LinearTail {
    /// Token `t`'s path from its dropped `source`.
    pub fn path(&self, source: Source, t: usize) -> Path {
        Path::linear_then_add(
            source,
            self.w.clone(),
            self.b.clone(),
            DVector::from_column_slice(&self.h[t]),
        )
    }
}

/// A capture's audit, token by token: each token's truth, eval output and
/// first order ([`TokenValues::first_order`]; no `ρ²` is defined for a
/// path, so its `rho2` is NaN).
#[derive(Debug, Clone)]
pub struct LinearAudit {
    pub name: String,
    pub tokens: Vec<TokenValues>,
}

/// A linear-path site's row as the ordinary audit table reports it: the
/// RMS gaps of the eval and first-order outputs to the truth over the
/// tokens, noise-corrected ([`Gap::over`], the same estimator as every
/// other site's), and the truth's RMS standard error per unit.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct LinearGaps {
    pub uncorrected: Gap,
    pub first_order: Gap,
    pub resolution: f64,
}

impl LinearAudit {
    /// The site's [`LinearGaps`] (at least one token).
    pub fn gaps(&self) -> LinearGaps {
        let (sum, count) = self.tokens.iter().fold((0.0, 0usize), |(s, n), t| {
            (
                s + t.truth_se.iter().map(|e| e * e).sum::<f64>(),
                n + t.truth_se.len(),
            )
        });
        LinearGaps {
            uncorrected: Gap::over(&self.tokens, |t| &t.eval),
            first_order: Gap::over(&self.tokens, |t| &t.first),
            resolution: (sum / count.max(1) as f64).sqrt(),
        }
    }
}

impl LinearCapture {
    /// A checked capture from plain rows: `w` one row per output unit
    /// (`d` rows of width `m`), `u` and `h` one row per token.
    pub fn new(
        name: String,
        p: f64,
        u: Vec<Vec<f64>>,
        h: Vec<Vec<f64>>,
        w: &[Vec<f64>],
        b: Vec<f64>,
        norm: AnyNorm,
    ) -> Result<Self, Error> {
        let m = w.first().map_or(0, Vec::len);
        if w.is_empty() || m == 0 {
            return Err(Error::Empty { what: "w" });
        }
        if let Some(row) = w.iter().find(|r| r.len() != m) {
            return Err(Error::LengthMismatch {
                what: "w (one row)",
                expected: m,
                got: row.len(),
            });
        }
        for row in w {
            crate::error::check_finite_vec("w", row)?;
        }
        crate::error::check_finite_vec("b", &b)?;
        let capture = LinearCapture {
            name,
            rate: Rate::new(p)?,
            u,
            tail: LinearTail {
                w: DMatrix::from_fn(w.len(), m, |i, j| w[i][j]),
                b: DVector::from_vec(b),
                h,
                norm,
            },
        };
        capture.validate()?;
        Ok(capture)
    }

    /// `ȳ = W u + b + h` of token `t`.
    pub fn mean(&self, t: usize) -> DVector<f64> {
        let LinearTail { w, b, h, .. } = &self.tail;
        w * DVector::from_column_slice(&self.u[t]) + b + DVector::from_column_slice(&h[t])
    }

    /// The first-order output of every token (the live correction): `W`'s
    /// column norms once, then `O(m + d)` per token beyond `ȳ`.
    pub fn first_order_tokens(&self) -> Result<Vec<Vec<f64>>, Error> {
        self.validate()?;
        let norms = f::column_norms(&self.tail.w);
        (0..self.u.len())
            .map(|t| first_order(self, &norms, &self.u[t], self.mean(t).as_slice()))
            .collect()
    }

    /// Checks the shapes: every `u` of width `W.ncols()`, every `h` and `b`
    /// and the norm of width `W.nrows()`, as many `h` as `u`.
    pub fn validate(&self) -> Result<(), Error> {
        let LinearTail { w, b, h, norm } = &self.tail;
        let (d, m) = (w.nrows(), w.ncols());
        let mismatch = |what, expected, got| Error::LengthMismatch {
            what,
            expected,
            got,
        };
        if self.u.is_empty() {
            return Err(Error::Empty { what: "u (tokens)" });
        }
        if h.len() != self.u.len() {
            return Err(mismatch("h (tokens)", self.u.len(), h.len()));
        }
        if b.len() != d {
            return Err(mismatch("b", d, b.len()));
        }
        if norm.dim() != d {
            return Err(mismatch("norm width", d, norm.dim()));
        }
        for (u, h) in self.u.iter().zip(h) {
            crate::error::check_finite_vec("u", u)?;
            crate::error::check_finite_vec("h", h)?;
            if u.len() != m {
                return Err(mismatch("u (one token)", m, u.len()));
            }
            if h.len() != d {
                return Err(mismatch("h (one token)", d, h.len()));
            }
        }
        Ok(())
    }

    fn path(&self, t: usize) -> Path {
        let source = Source::Dropped {
            u: self.u[t].clone(),
            rate: self.rate,
        };
        self.tail.path(source, t)
    }
}

/// The first-order output of one token from the column norms.
pub fn first_order(
    capture: &LinearCapture,
    norms: &[(f64, f64)],
    u: &[f64],
    mean: &[f64],
) -> Result<Vec<f64>, Error> {
    let (centered, trace) = linear_dropout_traces(norms, u, capture.rate);
    match &capture.tail.norm {
        AnyNorm::Layer(ln) => ln_first_order_linear(centered, mean, ln),
        AnyNorm::Rms(rms) => rms_first_order_linear(trace, mean, rms),
    }
}

/// Audits one capture at `samples` masks per token from `seed`.
pub fn audit_linear(
    capture: &LinearCapture,
    samples: u64,
    seed: u64,
) -> Result<LinearAudit, Error> {
    capture.validate()?;
    let norms = f::column_norms(&capture.tail.w);
    audit_tokens(
        (&capture.name, capture.u.len(), &capture.tail.norm),
        (samples, seed),
        |t| capture.path(t),
        |t, _| first_order(capture, &norms, &capture.u[t], capture.mean(t).as_slice()),
    )
}

/// The per-token loop every capture shares, as the audit of the capture
/// `name`: token `t`'s path is `path_of(t)`, its first-order output
/// `first(t, path)`; the eval output is the norm of the path's mean (the
/// eval forward, every rule's `ȳ`).
pub fn audit_tokens(
    (name, count, norm): (&str, usize, &AnyNorm),
    (samples, seed): (u64, u64),
    path_of: impl Fn(usize) -> Path + Sync,
    first: impl Fn(usize, &Path) -> Result<Vec<f64>, Error> + Sync,
) -> Result<LinearAudit, Error> {
    let site_seed = derive_seed(seed, name);
    let d = norm.dim();
    let carry = crate::engine::cancel::carry();
    let tokens = (0..count)
        .into_par_iter()
        .map(|t| {
            carry.run(|| {
                crate::engine::cancel::checkpoint()?;
                let budget = Budget::new(samples, derive_seed(site_seed, &t.to_string()))?;
                let path = path_of(t);
                let truth = sample_means(&Subject::reference(), budget, d, |s, rng, out| {
                    let y = sample_path(&path, s, rng)?;
                    norm.forward(y.as_slice(), out)
                })?;
                let mean = eval_forward(&path);
                let mut eval = vec![0.0; d];
                norm.forward(mean.as_slice(), &mut eval)?;
                let first = first(t, &path)?;
                Ok(TokenValues::first_order(
                    sampled_truth(&truth),
                    eval,
                    first,
                    f64::NAN,
                ))
            })
        })
        .collect::<Result<_, Error>>()?;
    Ok(LinearAudit {
        name: name.to_string(),
        tokens,
    })
}

/// `ȳ`: the source's mean through the steps (further dropouts are the
/// identity in eval).
fn eval_forward(path: &Path) -> DVector<f64> {
    path.steps
        .iter()
        .fold(path.source.mean(), |x, step| match step {
            Step::Linear { w, b } => w * x + b,
            Step::Add(h) => x + h,
            Step::Dropout(_) => x,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::LayerNorm;

    /// `mean_k |eval_k − truth_k|` and `mean_k |first_k − truth_k|`.
    fn gaps(t: &TokenValues) -> (f64, f64) {
        let gap = |a: &[f64]| {
            a.iter()
                .zip(&t.truth)
                .map(|(x, y)| (x - y).abs())
                .sum::<f64>()
                / a.len() as f64
        };
        (gap(&t.eval), gap(&t.first))
    }

    fn capture(p: f64) -> LinearCapture {
        let (d, m) = (8, 12);
        LinearCapture {
            name: "toy".into(),
            rate: Rate::new(p).unwrap(),
            u: vec![(0..m).map(|j| 1.0 + (j % 5) as f64 * 0.3).collect()],
            tail: LinearTail {
                w: DMatrix::from_fn(d, m, |i, j| ((i * 7 + j * 3) % 11) as f64 / 5.0 - 1.0),
                b: DVector::from_element(d, 0.1),
                h: vec![(0..d).map(|k| (k % 3) as f64 * 0.5 - 0.5).collect()],
                norm: AnyNorm::Layer(LayerNorm::new(vec![1.0; d], vec![0.0; d], 1e-5).unwrap()),
            },
        }
    }

    #[test]
    fn at_p_zero_the_truth_is_the_eval_output_and_the_correction_is_none() {
        let a = audit_linear(&capture(0.0), 100, 1).unwrap();
        let (eval_gap, first_order_gap) = gaps(&a.tokens[0]);
        assert!(eval_gap < 1e-12 && first_order_gap < 1e-12, "{a:?}");
    }

    #[test]
    fn the_first_order_output_is_closer_to_the_truth_than_the_eval_output() {
        let a = audit_linear(&capture(0.2), 200_000, 1).unwrap();
        let (eval_gap, first_order_gap) = gaps(&a.tokens[0]);
        println!("eval gap {eval_gap:e}, first-order gap {first_order_gap:e}");
        assert!(first_order_gap < eval_gap / 3.0, "{a:?}");
    }

    #[test]
    fn a_mismatched_h_is_a_typed_error() {
        let mut c = capture(0.2);
        c.tail.h[0].pop();
        assert!(matches!(
            audit_linear(&c, 10, 1),
            Err(Error::LengthMismatch { .. })
        ));
    }
}
