//! The network noise ledger: per token and per coordinate, the mean `v` and
//! the variance `s` of the noise that every dropout upstream has put into a
//! layer's input, carried op by op through a residual network, and the
//! corrected norm that reads it. Each op's rule is one small function here;
//! the derivation of each is below, and the reader's walk-through (with a
//! worked pre-LN block) is `docs/network.md`.
//!
//! # Setting and assumptions
//!
//! One token's activation `y ∈ R^d` under training is `ȳ + n`: `ȳ = E y`
//! (over every dropout mask of the forward) and the noise `n`, with
//! per-coordinate variances `s_i = Var n_i`. The ledger carries `(v, s)`,
//! `v` its value for `ȳ`. Assumed throughout:
//!
//! * **(A1) independent masks:** every dropout draws its own Bernoulli(q)
//!   bits, one per coordinate, independent of each other and of everything
//!   upstream;
//! * **(A2) uncorrelated noise coordinates:** `Cov(n_i, n_j) = 0` for
//!   `i ≠ j` where a rule says so (a dropout's own injection satisfies it
//!   exactly; a dense linear map or a norm breaks it, see each rule);
//! * **(A3) leading order in the noise** for the nonlinear ops (a norm, an
//!   elementwise `φ`): a Taylor expansion about `v`, the first order for
//!   the noise, the second for the mean shift.
//!
//! # Rule 1: dropout of a noisy input (exact under A1)
//!
//! `z = m y / q`, `m ~ Bernoulli(q)` independent of `y` (mean `v`,
//! variance `s`):
//!
//! ```text
//! E z   = E[m]/q · E y = v
//! E z²  = E[m²]/q² · E y² = (1/q)(v² + s)
//! Var z = (1/q)(v² + s) − v² = (p/q) v² + s/q
//! ```
//!
//! The first term is the dropout's own injection, the second the incoming
//! noise amplified by `1/q`. Two coordinates stay uncorrelated when they
//! were (A2 is kept): `Cov(z_i, z_j) = E[m_i]E[m_j]/q² Cov(y_i, y_j)`.
//!
//! # Rule 2: a linear map `W y + b` (exact under A2)
//!
//! `Var (W y)_i = Σ_j W_ij² s_j + Σ_{j≠k} W_ij W_ik Cov(y_j, y_k)`; under
//! A2 the second sum is 0, so `s ← W^∘2 s` (`W^∘2` the entrywise square)
//! and `v ← W v + b`. The output's coordinates are correlated
//! (`Cov = W diag(s) Wᵀ`): A2 holds after a dense map only to the extent
//! the next op reads the diagonal (a dropout does, exactly: rule 1; a norm
//! at leading order in `1/d`: its mean of the noise variances sees the
//! off-diagonal sum `1ᵀΣ1/d²`, which is `O(s/d)`).
//!
//! # Rule 3: a residual add `y + f(y)` (variances and a cross term)
//!
//! With `n` the skip path's noise and `g` the branch's (everything its ops
//! and dropouts add),
//!
//! ```text
//! Var(n_i + g_i) = s_i + Var g_i + 2 Cov(n_i, g_i).
//! ```
//!
//! The cross term **vanishes** when the branch's noise is independent of
//! `n`: a branch reading none of the skip path's noise (its input is
//! noise-free, or a separate stream), or when the last op of the branch is
//! a dropout whose *input* is independent of `n`. It does **not** vanish in
//! general: a dropout at the branch's end keeps it unchanged
//! (`Cov(n_i, m_i f_i/q) = E[m_i]/q · Cov(n_i, f_i)`), and for a branch
//! whose noise is, to first order, `J n` (`J` its Jacobian at `v`),
//!
//! ```text
//! Cov(n_i, (J n)_i) = Σ_j J_ij Cov(n_i, n_j) = J_ii s_i     (under A2).
//! ```
//!
//! For a linear branch `J = B` it is exact: `B_ii s_i`. Through a norm
//! (rule 4) it is first order in the noise. For a dense branch with
//! random weights of scale `1/√d`, `J_ii` is `O(1/√d)` against the `O(1)`
//! of `Σ_j J_ij² s_j`: the "independent injections add" ledger is then
//! leading order, and on the average over coordinates that a norm's `s̄`
//! reads, the signed `J_ii` cancel to `O(1/d)`. [`residual_add`] takes the
//! cross term; [`cross_covariance`] writes it from `J`'s diagonal.
//!
//! # Rule 4: LayerNorm and RMSNorm (first order in the noise, leading order in `1/d`)
//!
//! `LN(y)_i = γ_i (y_i − μ(y))/σ(y) + β_i`. Its Jacobian at `v` is
//! `(γ/σ)(I − 11ᵀ/d − x̂ x̂ᵀ/d)`, `x̂ = (v − μ)/σ`, so the output noise is
//! `(γ_i/σ) (P n)_i`, `P = I − 11ᵀ/d − x̂x̂ᵀ/d`, with variance under A2
//!
//! ```text
//! s_out,i = (γ_i/σ)² Σ_j P_ij² s_j,      P_ij = δ_ij − (1 + x̂_i x̂_j)/d.
//! ```
//!
//! Which `σ`? At first order in the noise, `σ(v)`. But dropout noise is not
//! small (`s ~ (p/q) v²`), and as `d` grows `σ(y)` concentrates at
//! `sqrt(E V(y) + ε)`, with `E V(y) = V(v) + s̄` under A2,
//! `s̄ = (1 − 1/d) mean_i s_i` (the centred mean noise variance:
//! `E V(y) = mean E y_i² − E μ(y)² = V(v) + mean s − Σ s/d²`). So the rule
//! uses `σ² = V(v) + s̄ + ε`: the two agree to first order in `s̄/V`, and
//! this one is the `d → ∞` limit, with an `O(1/d)` error (the
//! fluctuation of `σ(y)`, `O(1/√d)`, enters the variance squared), which the
//! family's order check measures. The mean, at the same order, is the
//! corrected norm of rule 6: `v ← β + c (LN(v) − β)`.
//!
//! RMSNorm, `γ_i y_i / r(y)`, `r² = mean y² + ε`: Jacobian
//! `(γ/r)(I − v vᵀ/(d r²))`, `s_out,i = (γ_i/r)² Σ_j (δ_ij − v_i v_j/(d r²))² s_j`,
//! `r² = mean v² + mean s + ε` by the same argument (no centring).
//!
//! # Rule 5: an elementwise `φ` (first order for the noise, second for the mean)
//!
//! Taylor about `v_i`, `E n_i = 0`:
//!
//! ```text
//! φ(v + n) = φ(v) + φ'(v) n + φ''(v) n²/2 + φ'''(v) n³/6 + …
//! E φ(v + n)   = φ(v) + φ''(v) s/2 + O(E n³)          (the mean shift)
//! Var φ(v + n) = φ'(v)² s + O(E n³)
//! ```
//!
//! For noise that is a sum of `d` independent dropout terms of size
//! `1/d` each (a wide linear map after a dropout), `s = O(1/d)`,
//! `E n³ = O(1/d²)` and `E n⁴ = O(1/d²)`: the mean-shift form's error is
//! `O(1/d²)` where the plain `φ(v)`'s is `O(1/d)`. A quadratic `φ` makes the
//! mean exact. (For ReLU with Gaussian noise the mean has the closed form
//! `v Φ(v/√s) + √s ϕ(v/√s)`; it is not used here.)
//!
//! # Rule 6: the corrected norm
//!
//! Replace `σ(y)` by `sqrt(E V(y) + ε)` in `E[LN(y)]` and use `E[y − μ(y)] = v − μ(v)`:
//!
//! ```text
//! E[LN(y)] ≈ β + c (LN(v) − β),   c² = (V(v) + ε)/(V(v) + s̄ + ε)
//! E[RMSNorm(y)] ≈ γ v / sqrt(mean v² + mean s + ε)
//! ```
//!
//! the per-site correction with the ledger's `s̄` (every dropout upstream)
//! in place of one site's. Error `O(1/d)` as in [`super::layernorm`]
//! (Jensen's gap and the covariance of `y_i − μ` with `V` are `O(1/d)`).

use nalgebra::DMatrix;

use super::{Rate, ShiftedNormParams, mean_and_variance};

/// One activation as the ledger sees it: per coordinate, the mean `v` and
/// the variance `s` of the noise every dropout upstream put there.
#[derive(Debug, Clone, PartialEq)]
pub struct Noisy {
    pub mean: Vec<f64>,
    pub var: Vec<f64>,
}

impl Noisy {
    /// A noise-free activation (no dropout upstream).
    pub fn clean(x: &[f64]) -> Noisy {
        Noisy {
            mean: x.to_vec(),
            var: vec![0.0; x.len()],
        }
    }
}

/// Rule 1: `v ← v`, `s ← (p/q) v² + s/q` (exact under A1).
pub fn dropout(y: &Noisy, rate: Rate) -> Noisy {
    let var = y
        .mean
        .iter()
        .zip(&y.var)
        .map(|(v, s)| rate.odds() * v * v + s / rate.q())
        .collect();
    Noisy {
        mean: y.mean.clone(),
        var,
    }
}

/// Rule 2: `v ← W v + b`, `s ← W^∘2 s` (exact under A2).
pub fn linear(w: &DMatrix<f64>, b: &[f64], y: &Noisy) -> Noisy {
    let row =
        |i: usize, f: &dyn Fn(f64, usize) -> f64| (0..w.ncols()).map(|j| f(w[(i, j)], j)).sum();
    Noisy {
        mean: (0..w.nrows())
            .map(|i| row(i, &|wij, j| wij * y.mean[j]) + b[i])
            .collect(),
        var: (0..w.nrows())
            .map(|i| row(i, &|wij, j| wij * wij * y.var[j]))
            .collect(),
    }
}

/// Rule 3: the skip path plus the branch, `s ← s_skip + s_branch + 2 cross`
/// with `cross_i = Cov(n_i, g_i)` ([`cross_covariance`]; zeros when the
/// branch's noise is independent of the skip path's).
pub fn residual_add(skip: &Noisy, branch: &Noisy, cross: &[f64]) -> Noisy {
    Noisy {
        mean: skip
            .mean
            .iter()
            .zip(&branch.mean)
            .map(|(a, b)| a + b)
            .collect(),
        var: skip
            .var
            .iter()
            .zip(&branch.var)
            .zip(cross)
            .map(|((a, b), c)| a + b + 2.0 * c)
            .collect(),
    }
}

/// Rule 3's cross term `Cov(n_i, (J n)_i) = J_ii s_i` from the diagonal of
/// the branch's Jacobian (exact for a linear branch under A2).
pub fn cross_covariance(jacobian_diagonal: &[f64], s: &[f64]) -> Vec<f64> {
    jacobian_diagonal
        .iter()
        .zip(s)
        .map(|(j, s)| j * s)
        .collect()
}

/// `s̄ = (1 − 1/d) mean_i s_i`: what uncorrelated noise adds to `E V(y)`.
pub fn centred_mean_noise(s: &[f64]) -> f64 {
    let d = s.len() as f64;
    (1.0 - 1.0 / d) * s.iter().sum::<f64>() / d
}

/// Rule 4's scale `σ = sqrt(V(v) + s̄ + ε)` of a LayerNorm whose input
/// carries `y`'s noise, and `μ(v)`.
fn noisy_scale(y: &Noisy, eps: f64) -> (f64, f64) {
    let (mu, var) = mean_and_variance(&y.mean);
    (mu, (var + centred_mean_noise(&y.var) + eps).sqrt())
}

/// Rule 4's Jacobian diagonal `(γ_i/σ) P_ii`, `P_ii = 1 − (1 + x̂_i²)/d`
/// (for a branch's [`cross_covariance`]).
pub fn layernorm_jacobian_diagonal(y: &Noisy, ln: &impl ShiftedNormParams) -> Vec<f64> {
    let (mu, sigma) = noisy_scale(y, ln.eps());
    let d = y.mean.len() as f64;
    y.mean
        .iter()
        .zip(ln.gamma())
        .map(|(v, g)| {
            let x = (v - mu) / sigma;
            g / sigma * (1.0 - (1.0 + x * x) / d)
        })
        .collect()
}

/// Rule 4 and rule 6 for LayerNorm: the output's mean
/// `β + c (LN(v) − β)` and noise `(γ_i/σ)² Σ_j P_ij² s_j`, summed in
/// `O(d)`: `P_ij² = δ_ij (1 − 2(1 + x̂_i²)/d) + (1 + x̂_i x̂_j)²/d²`, so
/// `Σ_j P_ij² s_j = s_i (1 − 2(1 + x̂_i²)/d) + (S₀ + 2 x̂_i S₁ + x̂_i² S₂)/d²`
/// with `S_r = Σ_j x̂_j^r s_j`.
pub fn layernorm(y: &Noisy, ln: &impl ShiftedNormParams) -> Noisy {
    let (mu, sigma) = noisy_scale(y, ln.eps());
    let d = y.mean.len() as f64;
    let x: Vec<f64> = y.mean.iter().map(|v| (v - mu) / sigma).collect();
    let [s0, s1, s2] = [0, 1, 2].map(|r| {
        x.iter()
            .zip(&y.var)
            .map(|(x, s)| x.powi(r) * s)
            .sum::<f64>()
    });
    let var = x
        .iter()
        .zip(&y.var)
        .zip(ln.gamma())
        .map(|((x, s), g)| {
            let spread =
                s * (1.0 - 2.0 * (1.0 + x * x) / d) + (s0 + 2.0 * x * s1 + x * x * s2) / (d * d);
            (g / sigma).powi(2) * spread
        })
        .collect();
    let mean = x
        .iter()
        .zip(ln.gamma().iter().zip(ln.beta()))
        .map(|(x, (g, b))| b + g * x)
        .collect();
    Noisy { mean, var }
}

/// Rule 6's `c = sqrt((V(v) + ε)/(V(v) + s̄ + ε))`.
pub fn layernorm_shrink(y: &Noisy, eps: f64) -> f64 {
    let (_, var) = mean_and_variance(&y.mean);
    ((var + eps) / (var + centred_mean_noise(&y.var) + eps)).sqrt()
}

/// Rule 4 and rule 6 for RMSNorm (gains `γ`): mean `γ v / r`, noise
/// `(γ_i/r)² Σ_j (δ_ij − w_i w_j/d)² s_j = (γ_i/r)² (s_i (1 − 2 w_i²/d) +
/// w_i² Σ_j w_j² s_j/d²)`, `w = v/r`, `r² = mean v² + mean s + ε`.
pub fn rmsnorm(y: &Noisy, gamma: &[f64], eps: f64) -> Noisy {
    let d = y.mean.len() as f64;
    let sum_sq = |v: &[f64]| v.iter().map(|a| a * a).sum::<f64>();
    let r = (sum_sq(&y.mean) / d + y.var.iter().sum::<f64>() / d + eps).sqrt();
    let w: Vec<f64> = y.mean.iter().map(|v| v / r).collect();
    let s2: f64 = w.iter().zip(&y.var).map(|(w, s)| w * w * s).sum();
    let var = w
        .iter()
        .zip(&y.var)
        .zip(gamma)
        .map(|((w, s), g)| (g / r).powi(2) * (s * (1.0 - 2.0 * w * w / d) + w * w * s2 / (d * d)))
        .collect();
    let mean = w.iter().zip(gamma).map(|(w, g)| g * w).collect();
    Noisy { mean, var }
}

/// An elementwise nonlinearity with its first two derivatives.
#[derive(Debug, Clone, Copy)]
pub struct Elementwise {
    pub name: &'static str,
    pub value: fn(f64) -> f64,
    pub first: fn(f64) -> f64,
    pub second: fn(f64) -> f64,
}

/// Rule 5: `v ← φ(v) + φ''(v) s/2` (second order), `s ← φ'(v)² s` (first).
pub fn elementwise(y: &Noisy, phi: Elementwise) -> Noisy {
    Noisy {
        mean: y
            .mean
            .iter()
            .zip(&y.var)
            .map(|(&v, s)| (phi.value)(v) + mean_shift(phi, v, *s))
            .collect(),
        var: y
            .mean
            .iter()
            .zip(&y.var)
            .map(|(&v, s)| (phi.first)(v).powi(2) * s)
            .collect(),
    }
}

/// Rule 5's mean shift `φ''(v) s/2`.
pub fn mean_shift(phi: Elementwise, v: f64, s: f64) -> f64 {
    (phi.second)(v) * s / 2.0
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// SiLU `x σ(x)`: `φ' = σ (1 + x (1 − σ))`, `φ'' = σ (1 − σ)(2 + x (1 − 2σ))`.
pub const SILU: Elementwise = Elementwise {
    name: "silu",
    value: |x| x * sigmoid(x),
    first: |x| {
        let s = sigmoid(x);
        s * (1.0 + x * (1.0 - s))
    },
    second: |x| {
        let s = sigmoid(x);
        s * (1.0 - s) * (2.0 + x * (1.0 - 2.0 * s))
    },
};

#[cfg(test)]
mod tests;
