//! Linear paths: a dropout that reaches its norm through linear maps, adds
//! of mask-independent terms and further independent dropouts
//! (`Dropout(u) → Linear(W, b) → (+h) → norm`, attention dropout → value
//! product → head concatenation → `o_proj` → (+h) → norm).
//!
//! # Setting
//!
//! The path starts at a **source**: a dropout of a fixed vector `u`
//! (`z = m ⊙ u / q`, `m_j ~ Bernoulli(q)` independent), or attention
//! dropout on the rows `a` of `H` heads with values `v_s ∈ ℝ^{d_h}`
//! (`b_s = m_s a_s / q`, head output `o_h = Σ_s b_s v_s`, the heads
//! concatenated). Then a chain of **steps**: `Linear(W, b)`: `x ↦ W x + b`;
//! `Add(h)`: `x ↦ x + h`, `h` independent of every mask; `Dropout(p')`: a
//! further inverted dropout with its own independent mask. The norm's input
//! is `y`, of width `d`; `C = I − 11ᵀ/d` is the centering matrix.
//!
//! # Derivation: the mean and covariance, op by op (exact)
//!
//! Write `(ȳ, Σ)` for the mean and covariance of the current vector.
//!
//! 1. **Dropout of a fixed `u`.** `E[m_j/q] = 1`, `Var(m_j/q) = p/q`, the
//!    `m_j` independent: `ȳ = u`, `Σ = (p/q) diag(u²)`.
//! 2. **Attention dropout, one head.** `o = Σ_s (m_s/q) a_s v_s` is a sum
//!    of independent terms, term `s` with mean `a_s v_s` and covariance
//!    `Var(m_s/q) a_s² v_s v_sᵀ`: `ō = Σ_s a_s v_s`,
//!    `Σ_o = (p/q) Σ_s a_s² v_s v_sᵀ` (full, not diagonal). Heads have
//!    independent masks, so the concatenation's covariance is block
//!    diagonal, one block per head.
//! 3. **Linear map.** `E[W x + b] = W x̄ + b` and
//!    `Cov(W x + b) = W Σ Wᵀ` (bilinearity). Through `o_proj = [W_1 … W_H]`
//!    after attention: `W Σ Wᵀ = Σ_h W_h Σ_h W_hᵀ
//!    = (p/q) Σ_h Σ_s a_s² (W_h v_s)(W_h v_s)ᵀ`.
//! 4. **Add of an independent term.** A fixed `h` shifts the mean; an
//!    independent random term adds its mean and its covariance
//!    (`Cov(x + x') = Σ + Σ'` when `x ⟂ x'`).
//! 5. **Dropout of an already-noisy `x`** (mean `x̄`, covariance `Σ_x`),
//!    mask `m` independent of `x`: `w_k = m_k x_k / q`.
//!    `E[w_k] = E[m_k/q] E[x_k] = x̄_k`. For `k ≠ l`, `m_k`, `m_l`, `x` are
//!    independent: `E[w_k w_l] = E[m_k/q] E[m_l/q] E[x_k x_l] = E[x_k x_l]`,
//!    so `Cov(w_k, w_l) = Σ_x,kl`. For `k = l`, `E[m_k²]/q² = q/q² = 1/q`:
//!    `E[w_k²] = E[x_k²]/q`, so
//!    `Var w_k = (Σ_x,kk + x̄_k²)/q − x̄_k² = Σ_x,kk + (p/q)(x̄_k² + Σ_x,kk)`.
//!    Together: `Σ_w = Σ_x + (p/q) diag(x̄² + diag Σ_x)`. A fixed `x`
//!    (`Σ_x = 0`) gives rule 1 back.
//!
//! # Derivation: `E[V]` and `E[R²]` (exact)
//!
//! `V = (1/d) ‖C y‖²` and `R² = (1/d) ‖y‖²`. For any random `y` with mean
//! `ȳ` and covariance `Σ`, `E[‖A y‖²] = ‖A ȳ‖² + tr(A Σ Aᵀ)`. With `A = C`
//! (`C` symmetric, idempotent):
//!
//! ```text
//! E[V]  = V(ȳ) + tr(C Σ C)/d,   tr(C Σ C) = tr Σ − 1ᵀ Σ 1 / d
//! E[R²] = mean(ȳ²) + tr(Σ)/d
//! ```
//!
//! # Derivation: the first-order factors (leading order)
//!
//! `E[y] = ȳ` exactly, so `E[C y] = C ȳ`. As in [`super::layernorm`],
//! replacing `sqrt(V + ε)` by `sqrt(E[V] + ε)` (the fluctuation of `V`
//! about its mean and its covariance with `C y` are `O(1/d)` when `Σ`'s
//! spectrum is spread over `d` units),
//!
//! ```text
//! E[LN(y)] ≈ β + c (LN(ȳ) − β),   c = sqrt((V(ȳ) + ε)/(E[V] + ε))
//! E[RMS(y)] ≈ c_rms RMS(ȳ),       c_rms = sqrt((mean ȳ² + ε)/(E[R²] + ε))
//! ```
//!
//! **Reductions.** The identity path from a dropped `u` (`y = z`) has
//! `Σ = (p/q) diag(u²)`, `tr Σ = (p/q) Σ u²`, `1ᵀΣ1 = tr Σ`:
//! `E[V] = σ² + (p/q)(σ² + μ²)(1 − 1/d)`, which is
//! [`super::layernorm::mean_of_v`], and `E[R²] = mean u²/q`
//! ([`super::rmsnorm::mean_of_r2`]; at `ε = 0`, `c_rms = √q`). A bypass
//! `y = h + z` gives [`super::bypass::mean_of_v`]. Dropping the `1/d` term
//! of `E[V]` gives `c` and `c_damped`; the unit tests check every
//! reduction against those functions.
//!
//! # Cheap traces (per token, no `d × d` matrix)
//!
//! For `Dropout(u) → Linear(W, b) → (+h)`, `Σ = (p/q) W diag(u²) Wᵀ`, so
//! `tr(C Σ C) = (p/q) Σ_j u_j² ‖C w_j‖²` (`w_j` the columns of `W`) and
//! `tr Σ = (p/q) Σ_j u_j² ‖w_j‖²`: the column norms once per weight, then
//! `O(m)` per token ([`column_norms`], [`linear_dropout_traces`]). For
//! attention through `o_proj`, `tr(C Σ C) = (p/q) Σ_h Σ_s a_s² ‖C W_h v_s‖²`.
//!
//! # Assumptions
//!
//! Masks independent of one another and of every added term. `E[V]`,
//! `E[R²]`, `ȳ`, `Σ` are exact for every `d`; the factors are leading
//! order. A nonlinearity on the path has no closed form here.

use nalgebra::{DMatrix, DVector};

use super::Rate;
use crate::error::{Error, check_eps};

/// One attention head: its probability row `a` (one entry per key) and its
/// values, one row `v_s` per key (`T × d_h`).
#[derive(Debug, Clone, PartialEq)]
pub struct Head {
    pub a: Vec<f64>,
    pub v: DMatrix<f64>,
}

/// Where the path starts: the first dropout.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// `z = m ⊙ u / q`.
    Dropped { u: Vec<f64>, rate: Rate },
    /// Attention dropout on each head's row, heads concatenated.
    Attention { heads: Vec<Head>, rate: Rate },
}

/// One op after the source.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// `x ↦ W x + b`.
    Linear { w: DMatrix<f64>, b: DVector<f64> },
    /// `x ↦ x + h`, `h` independent of the masks.
    Add(DVector<f64>),
    /// A further inverted dropout with its own mask.
    Dropout(Rate),
}

/// A source and the steps to the norm.
#[derive(Debug, Clone, PartialEq)]
pub struct Path {
    pub source: Source,
    pub steps: Vec<Step>,
}

/// The exact mean and covariance of a vector on the path.
#[derive(Debug, Clone, PartialEq)]
pub struct Moments {
    pub mean: DVector<f64>,
    pub cov: DMatrix<f64>,
}

impl Source {
    /// Width of the source's output.
    pub fn width(&self) -> usize {
        match self {
            Source::Dropped { u, .. } => u.len(),
            Source::Attention { heads, .. } => heads.iter().map(|h| h.v.ncols()).sum(),
        }
    }

    /// The source's mean: `u`, or each head's `Σ_s a_s v_s` concatenated
    /// (the eval forward of the source).
    pub fn mean(&self) -> DVector<f64> {
        match self {
            Source::Dropped { u, .. } => DVector::from_column_slice(u),
            Source::Attention { heads, .. } => {
                let rows: Vec<f64> = heads
                    .iter()
                    .flat_map(|h| {
                        (h.v.transpose() * DVector::from_column_slice(&h.a))
                            .data
                            .as_vec()
                            .clone()
                    })
                    .collect();
                DVector::from_vec(rows)
            }
        }
    }

    /// Rule 1 or rule 2 (module docs).
    pub fn moments(&self) -> Moments {
        match self {
            Source::Dropped { u, rate } => {
                let u = DVector::from_column_slice(u);
                let var = u.map(|x| rate.odds() * x * x);
                Moments {
                    mean: u,
                    cov: DMatrix::from_diagonal(&var),
                }
            }
            Source::Attention { heads, rate } => {
                let n = self.width();
                let (mut mean, mut cov) = (DVector::zeros(n), DMatrix::zeros(n, n));
                let mut at = 0;
                for head in heads {
                    let dh = head.v.ncols();
                    for (s, &a) in head.a.iter().enumerate() {
                        let vs = head.v.row(s).transpose();
                        mean.rows_mut(at, dh).axpy(a, &vs, 1.0);
                        let outer = &vs * vs.transpose() * (rate.odds() * a * a);
                        let mut block = cov.view_mut((at, at), (dh, dh));
                        block += outer;
                    }
                    at += dh;
                }
                Moments { mean, cov }
            }
        }
    }
}

impl Moments {
    /// Rule 3: `(W x̄ + b, W Σ Wᵀ)`.
    pub fn linear(&self, w: &DMatrix<f64>, b: &DVector<f64>) -> Moments {
        Moments {
            mean: w * &self.mean + b,
            cov: w * &self.cov * w.transpose(),
        }
    }

    /// Rule 4 for a fixed `h`.
    pub fn add(&self, h: &DVector<f64>) -> Moments {
        Moments {
            mean: &self.mean + h,
            cov: self.cov.clone(),
        }
    }

    /// Rule 4 for an independent random term.
    pub fn add_independent(&self, other: &Moments) -> Moments {
        Moments {
            mean: &self.mean + &other.mean,
            cov: &self.cov + &other.cov,
        }
    }

    /// Rule 5: `Σ_x + (p/q) diag(x̄² + diag Σ_x)`.
    pub fn dropout(&self, rate: Rate) -> Moments {
        let extra = DVector::from_fn(self.mean.len(), |k, _| {
            rate.odds() * (self.mean[k] * self.mean[k] + self.cov[(k, k)])
        });
        Moments {
            mean: self.mean.clone(),
            cov: &self.cov + DMatrix::from_diagonal(&extra),
        }
    }

    /// Width of the vector.
    pub fn dim(&self) -> usize {
        self.mean.len()
    }
}

impl Path {
    /// `source → Linear(w, b) → + h`: a dropout that reaches its norm
    /// through one linear layer and an added term (the audit's and `eval`'s
    /// path of one token).
    pub fn linear_then_add(
        source: Source,
        w: DMatrix<f64>,
        b: DVector<f64>,
        h: DVector<f64>,
    ) -> Path {
        Path {
            source,
            steps: vec![Step::Linear { w, b }, Step::Add(h)],
        }
    }

    /// Checks that every step's width matches the vector it receives;
    /// returns the norm's width `d`.
    pub fn validate(&self) -> Result<usize, Error> {
        if let Source::Attention { heads, .. } = &self.source {
            for head in heads {
                if head.a.len() != head.v.nrows() {
                    return Err(Error::LengthMismatch {
                        what: "attention row (one probability per value row)",
                        expected: head.v.nrows(),
                        got: head.a.len(),
                    });
                }
            }
        }
        let mut width = self.source.width();
        if width == 0 {
            return Err(Error::Empty {
                what: "the path's source",
            });
        }
        for step in &self.steps {
            let (input, output) = match step {
                Step::Linear { w, b } => {
                    if b.len() != w.nrows() {
                        return Err(Error::LengthMismatch {
                            what: "Linear bias",
                            expected: w.nrows(),
                            got: b.len(),
                        });
                    }
                    (w.ncols(), w.nrows())
                }
                Step::Add(h) => (h.len(), h.len()),
                Step::Dropout(_) => (width, width),
            };
            if input != width {
                return Err(Error::LengthMismatch {
                    what: "path step input",
                    expected: width,
                    got: input,
                });
            }
            width = output;
        }
        Ok(width)
    }

    /// The norm input's exact mean and covariance, rule by rule.
    pub fn moments(&self) -> Result<Moments, Error> {
        self.validate()?;
        Ok(self
            .steps
            .iter()
            .fold(self.source.moments(), |m, step| match step {
                Step::Linear { w, b } => m.linear(w, b),
                Step::Add(h) => m.add(h),
                Step::Dropout(rate) => m.dropout(*rate),
            }))
    }
}

/// `tr(C Σ C) = tr Σ − 1ᵀ Σ 1 / d`.
pub fn centered_trace(cov: &DMatrix<f64>) -> f64 {
    cov.trace() - cov.sum() / cov.nrows() as f64
}

/// `V(x)` and `mean(x²)` (population).
fn spread(x: &DVector<f64>) -> (f64, f64) {
    let (mu, s2) = super::mean_and_variance(x.as_slice());
    (s2, s2 + mu * mu)
}

/// `E[V] = V(ȳ) + tr(C Σ C)/d` (exact).
pub fn mean_of_v(m: &Moments) -> f64 {
    spread(&m.mean).0 + centered_trace(&m.cov) / m.dim() as f64
}

/// `E[R²] = mean(ȳ²) + tr(Σ)/d` (exact).
pub fn mean_of_r2(m: &Moments) -> f64 {
    spread(&m.mean).1 + m.cov.trace() / m.dim() as f64
}

/// `sqrt((now + ε)/(now + added + ε))`, a typed error when not finite or
/// when both are 0.
fn factor(now: f64, added: f64, eps: f64) -> Result<f64, Error> {
    check_eps("eps", eps)?;
    let c = ((now + eps) / (now + added + eps)).sqrt();
    if c.is_finite() {
        Ok(c)
    } else {
        Err(Error::Degenerate {
            what: "the norm's input has no spread and ε = 0: the factor is 0/0".into(),
        })
    }
}

/// `c = sqrt((V(ȳ) + ε)/(V(ȳ) + tr(CΣC)/d + ε))` from `V(ȳ)` and the
/// centered trace (the form the live correction uses).
pub fn ln_factor_from_trace(v: f64, centered: f64, d: usize, eps: f64) -> Result<f64, Error> {
    factor(v, centered / d as f64, eps)
}

/// `c_rms = sqrt((mean ȳ² + ε)/(mean ȳ² + tr(Σ)/d + ε))`.
pub fn rms_factor_from_trace(r2: f64, trace: f64, d: usize, eps: f64) -> Result<f64, Error> {
    factor(r2, trace / d as f64, eps)
}

/// `c` of LayerNorm for the path's moments.
pub fn ln_factor(m: &Moments, eps: f64) -> Result<f64, Error> {
    ln_factor_from_trace(spread(&m.mean).0, centered_trace(&m.cov), m.dim(), eps)
}

/// `c_rms` of RMSNorm for the path's moments.
pub fn rms_factor(m: &Moments, eps: f64) -> Result<f64, Error> {
    rms_factor_from_trace(spread(&m.mean).1, m.cov.trace(), m.dim(), eps)
}

/// `β + c (LN(ȳ) − β)`, the leading-order estimate of `E[LN(y)]`.
pub fn ln_corrected(m: &Moments, ln: &impl super::ShiftedNormParams) -> Result<Vec<f64>, Error> {
    let c = ln_factor(m, ln.eps())?;
    let eval = super::layernorm::uncorrected(m.mean.as_slice(), ln)?;
    Ok(super::layernorm::shrink_towards_beta(&eval, ln.beta(), c))
}

/// `c_rms RMS(ȳ)`, the leading-order estimate of `E[RMS(y)]`.
pub fn rms_corrected(m: &Moments, rms: &impl super::NormParams) -> Result<Vec<f64>, Error> {
    let c = rms_factor(m, rms.eps())?;
    let eval = super::rmsnorm::uncorrected(m.mean.as_slice(), rms)?;
    Ok(eval.iter().map(|u| c * u).collect())
}

/// Per column `j` of `W`: `(‖C w_j‖², ‖w_j‖²)`, once per weight.
pub fn column_norms(w: &DMatrix<f64>) -> Vec<(f64, f64)> {
    let d = w.nrows() as f64;
    w.column_iter()
        .map(|col| {
            let sq = col.norm_squared();
            let s = col.sum();
            (sq - s * s / d, sq)
        })
        .collect()
}

/// `(tr(C Σ C), tr Σ)` of `Dropout(u) → Linear(W, ·)` from the column norms
/// ([`column_norms`]): `(p/q) Σ_j u_j² (‖C w_j‖², ‖w_j‖²)`, `O(m)` per token.
pub fn linear_dropout_traces(norms: &[(f64, f64)], u: &[f64], rate: Rate) -> (f64, f64) {
    let (c, t) = norms
        .iter()
        .zip(u)
        .fold((0.0, 0.0), |(c, t), ((nc, nt), x)| {
            (c + x * x * nc, t + x * x * nt)
        });
    (rate.odds() * c, rate.odds() * t)
}

/// `β + c (LN(ȳ) − β)` for `Dropout(u) → Linear(W, b) → (+h)` from the
/// token's `tr(C Σ C)` (`centered`, the first of [`linear_dropout_traces`])
/// and `ȳ = W u + b + h`: the live correction, `O(m + d)` per token once
/// `W`'s column norms are known.
pub fn ln_first_order_linear(
    centered: f64,
    mean: &[f64],
    ln: &impl super::ShiftedNormParams,
) -> Result<Vec<f64>, Error> {
    let v = super::mean_and_variance(mean).1;
    let c = ln_factor_from_trace(v, centered, mean.len(), ln.eps())?;
    let eval = super::layernorm::uncorrected(mean, ln)?;
    Ok(super::layernorm::shrink_towards_beta(&eval, ln.beta(), c))
}

/// `c_rms RMS(ȳ)` for the same path ([`ln_first_order_linear`]) from the
/// token's `tr Σ` (`trace`, the second of [`linear_dropout_traces`]).
pub fn rms_first_order_linear(
    trace: f64,
    mean: &[f64],
    rms: &impl super::NormParams,
) -> Result<Vec<f64>, Error> {
    let r2 = mean.iter().map(|x| x * x).sum::<f64>() / mean.len() as f64;
    let c = rms_factor_from_trace(r2, trace, mean.len(), rms.eps())?;
    let eval = super::rmsnorm::uncorrected(mean, rms)?;
    Ok(eval.iter().map(|x| c * x).collect())
}

#[cfg(test)]
mod tests;
