//! Next-order corrections: `E[LN(z)]`, `E[RMSNorm(z)]` and the bypass site
//! `E[LN(h + dropout(v))]` to `O(1/d²)`.
//!
//! # Why a next order
//!
//! The paper's corrections replace the random denominator `sqrt(V + ε)` by
//! `sqrt(E[V] + ε)` and drop three effects, each of relative size `1/d`: the
//! spread of `V` (by Jensen, `E[1/sqrt V] > 1/sqrt(E V)`), the covariance of
//! the numerator with `V` (a unit's own mask moves both), and `Var M` inside
//! `E[V]`. At the widths of small models (`d` = 32–256) these are visible.
//! This file keeps all three and is left with an `O(1/d²)` residual.
//!
//! # Setting
//!
//! One formulation covers LayerNorm, RMSNorm and the bypass site. Unit `j`
//! is `y_j = h_j + m_j v_j / q`: a fixed part `h_j` (zero without a bypass)
//! plus a dropped-out part. Write `x_j = h_j + v_j` for its mean and
//! `w_j = y_j − x_j` for its noise. The `w_j` are independent with zero mean
//! and, from the two-point law of `m_j` (`w_j = (m_j − q) v_j / q`):
//!
//! ```text
//! s2_j = E[w_j²] = v_j² p / q
//! t3_j = E[w_j³] = v_j³ p (p − q) / q²
//! f4_j = E[w_j⁴] = v_j⁴ p (1 − 3 p q) / q³
//! ```
//!
//! (With `h = 0` these are the central moments behind `E[z³] = x³/q²` and
//! `E[z⁴] = x⁴/q³`.) Let `A = mean_j y_j²`, `M = mean_j y_j`,
//! `V = A − M²`, `μ = mean x`, `σ² = var x`.
//!
//! # Step 1: the moments the expansion needs
//!
//! Each follows from independence across units and `y = x + w`
//! (`E y² = x² + s2`, `E y³ = x³ + 3 x s2 + t3`,
//! `E y⁴ = x⁴ + 6 x² s2 + 4 x t3 + f4`):
//!
//! ```text
//! E[A]          = mean(x² + s2)                                   (exact)
//! Var M         = (1/d²) Σ s2_j                                   (exact)
//! E[V]          = E[A] − μ² − Var M = σ² + (1 − 1/d) mean(s2)     (exact)
//! Cov(y_k, A)   = (1/d) (2 x_k s2_k + t3_k)                       (exact)
//! Var A         = (1/d²) Σ (4 x_j² s2_j + 4 x_j t3_j + f4_j − s2_j²)   (exact)
//! ```
//!
//! For `V` the square `M² = μ² + 2μ(M − μ) + (M − μ)²` is linearised; the
//! dropped `(M − μ)²` moves covariances by `O(1/d²)`:
//!
//! ```text
//! Cov(y_k, V)   = (1/d) (2 (x_k − μ) s2_k + t3_k)               + O(1/d²)
//! Cov(M, V)     = (1/d) mean_j (2 (x_j − μ) s2_j + t3_j)         + O(1/d²)
//! Var V         = (1/d²) Σ (4 (x_j − μ)² s2_j + 4 (x_j − μ) t3_j + f4_j − s2_j²)
//!                                                                 + O(1/d²)
//! ```
//!
//! With `h = 0` these reduce to the familiar
//! `Cov(z_k, V) = (p/(q d)) (x_k³/q − 2 μ x_k²)` and
//! `Var V = (p/(q d)) mean(x⁴/q² − 4 μ x³/q + 4 μ² x²)`.
//!
//! # Step 2: expand the ratio around the means
//!
//! LayerNorm's unit `k` is `g(N, D) = N · D^(−1/2)` with `N = y_k − M` and
//! `D = V + ε`. Around `N̄ = E N = x_k − μ` and `D̄ = E[V] + ε`, Taylor to
//! second order (`g` is linear in `N`, so `g_NN = 0`):
//!
//! ```text
//! g_D  = −½ N D^(−3/2)     g_DD = ¾ N D^(−5/2)     g_ND = −½ D^(−3/2)
//! E[g] = g(N̄, D̄) + ½ g_DD Var D + g_ND Cov(N, D) + R
//!      = N̄ D̄^(−1/2) (1 + 3 Var V / (8 D̄²)) − ½ Cov(y_k − M, V) D̄^(−3/2) + R
//! ```
//!
//! # Step 3: the order of what is dropped
//!
//! `V − E V` is `O(d^(−1/2))`, so third and fourth central moments of `V` are
//! `O(1/d²)`; `N − N̄` is `O(1)` (the unit's own mask) but only its `1/d`
//! share of `V` correlates with it, so `E[(N − N̄)(D − D̄)²] = O(1/d²)`; and
//! the linearisation in step 1 costs `O(1/d²)`. Hence `R = O(1/d²)`, against
//! the paper's `O(1/d)`. The all-dropped mask (probability `p^d`, where
//! `V = 0`) is exponentially rare and outside any power of `1/d`; with `ε > 0`
//! it is harmless, with `ε = 0` the expansion describes the expectation
//! conditioned on not all units being dropped up to that `p^d` term.
//!
//! Setting `Var V` and `Cov(y_k − M, V)` to zero gives back
//! `N̄ / sqrt(E[V] + ε)`; replacing `E[V]` by its leading part
//! `σ² + (p/q) mean v²` gives the paper's first order.
//!
//! # RMSNorm
//!
//! `N = y_k` (no centring), `D = A + ε`, and every moment in step 1 is exact:
//!
//! ```text
//! E[RMS_k] ≈ γ_k [ x_k D̄^(−1/2) (1 + 3 Var A / (8 D̄²)) − ½ Cov(y_k, A) D̄^(−3/2) ],
//! D̄ = E[A] + ε
//! ```
//!
//! # Affine parameters
//!
//! `LN(y)_k = γ_k g + β_k`, so the expectation is `β_k + γ_k E[g]`.
//!
//! # Verification and use
//!
//! * [`crate::claims::second_order`]: claims of kind `LeadingOrder` with
//!   order 2 on the first-order claims' configurations; their note measures
//!   the residual on the grouped exact oracle over `d = 16…4096` (log-log
//!   slope −2.005, −2.004, −2.008 for LN, RMSNorm, bypass, against bounds
//!   ±0.06, ±0.06, ±0.10; see [`crate::claims::order::GapCurve::fit`]).
//! * `tests/second_order.rs`: smaller than the first-order residual at every
//!   `d` tested (by a factor 2–4 at `d = 16`, about 1000 at `d = 4096`), on
//!   the grouped oracle and on full enumeration (`d ≤ 20`).
//! * `crate::eval::second_order`: the `second_order` field of `dropmc eval`
//!   and the sample-size guide [`crate::stats::masks_to_resolve`], which uses the per-draw
//!   spreads [`layer_norm_draw_sd`] and [`rms_norm_draw_sd`].

use super::DropoutSite;
use super::Rate;
use super::representable;
use crate::error::{Error, check_finite_vec, check_len};

/// Per-unit mean and noise moments of `y_j = h_j + m_j v_j / q`.
#[derive(Debug, Clone, PartialEq)]
pub struct NoisyUnits {
    /// `x_j = h_j + v_j`, the mean of unit `j`.
    pub mean: Vec<f64>,
    /// `E[w_j²] = v_j² p / q`.
    pub s2: Vec<f64>,
    /// `E[w_j³] = v_j³ p (p − q) / q²`.
    pub t3: Vec<f64>,
    /// `E[w_j⁴] = v_j⁴ p (1 − 3pq) / q³`.
    pub f4: Vec<f64>,
}

impl NoisyUnits {
    /// Units `h_j + dropout(v_j)`; `h` and `v` must have the same non-zero
    /// length and finite entries.
    pub fn bypass(h: &[f64], v: &[f64], rate: Rate) -> Result<Self, Error> {
        check_finite_vec("v", v)?;
        check_len("h", h, v.len())?;
        check_finite_vec("h", h)?;
        let (p, q) = (rate.p(), rate.q());
        Ok(NoisyUnits {
            mean: h.iter().zip(v).map(|(a, b)| a + b).collect(),
            s2: v.iter().map(|b| b * b * p / q).collect(),
            t3: v
                .iter()
                .map(|b| super::ipow(*b, 3) * p * (p - q) / (q * q))
                .collect(),
            f4: v
                .iter()
                .map(|b| super::ipow(*b, 4) * p * (1.0 - 3.0 * p * q) / super::ipow(q, 3))
                .collect(),
        })
    }

    /// Units `dropout(x_j)` (no bypass).
    pub fn dropout(x: &[f64], rate: Rate) -> Result<Self, Error> {
        Self::bypass(&vec![0.0; x.len()], x, rate)
    }

    /// The units of a site with one dropped term, `y = h + dropout(v)`.
    /// A site with several terms is an error: the fourth moment of a sum of
    /// dropped terms is not the sum of their fourth moments.
    pub fn from_site(site: &impl DropoutSite) -> Result<Self, Error> {
        match site.terms() {
            [(v, rate)] => Self::bypass(site.h(), v, *rate),
            terms => Err(Error::Unsupported {
                what: format!(
                    "the second-order forms take one dropped term, not {}",
                    terms.len()
                ),
            }),
        }
    }

    fn d(&self) -> f64 {
        self.mean.len() as f64
    }

    /// `μ = mean x`.
    pub fn mu(&self) -> f64 {
        self.mean.iter().sum::<f64>() / self.d()
    }

    /// `σ² = var x` (population).
    pub fn sigma2(&self) -> f64 {
        let mu = self.mu();
        self.mean.iter().map(|x| (x - mu) * (x - mu)).sum::<f64>() / self.d()
    }

    /// `E[A] = mean(x² + s2)` (exact).
    pub fn mean_square(&self) -> f64 {
        self.mean
            .iter()
            .zip(&self.s2)
            .map(|(x, s)| x * x + s)
            .sum::<f64>()
            / self.d()
    }

    /// `E[V] = σ² + (1 − 1/d) mean(s2)` (exact).
    pub fn expected_v(&self) -> f64 {
        let mean_s2 = self.s2.iter().sum::<f64>() / self.d();
        self.sigma2() + (1.0 - 1.0 / self.d()) * mean_s2
    }

    /// `Var A` (exact).
    pub fn var_a(&self) -> f64 {
        self.sum_over(|x, s2, t3, f4| 4.0 * x * x * s2 + 4.0 * x * t3 + f4 - s2 * s2)
            / (self.d() * self.d())
    }

    /// `Cov(y_k, A)` for every `k` (exact).
    pub fn cov_unit_a(&self) -> Vec<f64> {
        (0..self.mean.len())
            .map(|k| (2.0 * self.mean[k] * self.s2[k] + self.t3[k]) / self.d())
            .collect()
    }

    /// `Var V` to leading order (`O(1/d)`, error `O(1/d²)`).
    pub fn var_v(&self) -> f64 {
        let mu = self.mu();
        self.sum_over(|x, s2, t3, f4| {
            let c = x - mu;
            4.0 * c * c * s2 + 4.0 * c * t3 + f4 - s2 * s2
        }) / (self.d() * self.d())
    }

    /// `Cov(y_k − M, V)` for every `k`, to leading order.
    pub fn cov_centred_unit_v(&self) -> Vec<f64> {
        let mu = self.mu();
        let d = self.d();
        let unit: Vec<f64> = (0..self.mean.len())
            .map(|k| (2.0 * (self.mean[k] - mu) * self.s2[k] + self.t3[k]) / d)
            .collect();
        let cov_m_v = unit.iter().sum::<f64>() / d;
        unit.iter().map(|c| c - cov_m_v).collect()
    }

    fn sum_over(&self, f: impl Fn(f64, f64, f64, f64) -> f64) -> f64 {
        (0..self.mean.len())
            .map(|j| f(self.mean[j], self.s2[j], self.t3[j], self.f4[j]))
            .sum()
    }
}

/// The second-order value of `E[N / sqrt(D)]`: `N̄ D̄^(−1/2) (1 + 3 Var D /
/// (8 D̄²)) − ½ Cov(N, D) D̄^(−3/2)`.
fn ratio_second_order(numerator_mean: f64, cov_n_d: f64, d_mean: f64, var_d: f64) -> f64 {
    numerator_mean / d_mean.sqrt() * (1.0 + 3.0 * var_d / (8.0 * d_mean * d_mean))
        - 0.5 * cov_n_d / (d_mean * d_mean.sqrt())
}

fn positive_denominator(what: &str, value: f64) -> Result<f64, Error> {
    if value > 0.0 && value.is_finite() {
        Ok(value)
    } else {
        Err(Error::Degenerate {
            what: format!("{what} = {value} (the normalizer has no spread)"),
        })
    }
}

/// Second-order `E[LN(y)]_k = β_k + γ_k E[(y_k − M)/sqrt(V + ε)]`, for
/// `y = h + dropout(v)` (use [`NoisyUnits::dropout`] for plain LayerNorm).
pub fn layer_norm_expectation(
    units: &NoisyUnits,
    gamma: &[f64],
    beta: &[f64],
    eps: f64,
) -> Result<Vec<f64>, Error> {
    let d = units.mean.len();
    check_len("gamma", gamma, d)?;
    check_len("beta", beta, d)?;
    let d_mean = positive_denominator("E[V] + eps", units.expected_v() + eps)?;
    let (mu, var_v, cov) = (units.mu(), units.var_v(), units.cov_centred_unit_v());
    representable(
        "second-order E[LN]",
        (0..d)
            .map(|k| {
                beta[k] + gamma[k] * ratio_second_order(units.mean[k] - mu, cov[k], d_mean, var_v)
            })
            .collect(),
    )
}

/// Second-order `E[RMSNorm(y)]_k = γ_k E[y_k / sqrt(A + ε)]`.
pub fn rms_norm_expectation(
    units: &NoisyUnits,
    gamma: &[f64],
    eps: f64,
) -> Result<Vec<f64>, Error> {
    let d = units.mean.len();
    check_len("gamma", gamma, d)?;
    let d_mean = positive_denominator("E[R^2] + eps", units.mean_square() + eps)?;
    let (var_a, cov) = (units.var_a(), units.cov_unit_a());
    representable(
        "second-order E[RMSNorm]",
        (0..d)
            .map(|k| gamma[k] * ratio_second_order(units.mean[k], cov[k], d_mean, var_a))
            .collect(),
    )
}

/// Per-draw standard deviation of `LN(y)_k`, to leading order:
/// `|γ_k| sqrt(Var(y_k − M) / D̄)` with
/// `Var(y_k − M) = s2_k (1 − 2/d) + Var M` and `D̄ = E[V] + ε`.
///
/// This is the spread a Monte Carlo estimate of `E[LN(y)_k]` averages over:
/// its standard error after `n` masks is this divided by `√n`.
pub fn layer_norm_draw_sd(units: &NoisyUnits, gamma: &[f64], eps: f64) -> Result<Vec<f64>, Error> {
    let d = units.mean.len();
    check_len("gamma", gamma, d)?;
    let d_mean = positive_denominator("E[V] + eps", units.expected_v() + eps)?;
    let var_m = units.s2.iter().sum::<f64>() / (units.d() * units.d());
    representable(
        "the per-draw sd of LN",
        (0..d)
            .map(|k| {
                let var_n = units.s2[k] * (1.0 - 2.0 / units.d()) + var_m;
                gamma[k].abs() * (var_n.max(0.0) / d_mean).sqrt()
            })
            .collect(),
    )
}

/// Per-draw standard deviation of `RMSNorm(y)_k`, to leading order:
/// `|γ_k| sqrt(s2_k / (E[A] + ε))`.
pub fn rms_norm_draw_sd(units: &NoisyUnits, gamma: &[f64], eps: f64) -> Result<Vec<f64>, Error> {
    let d = units.mean.len();
    check_len("gamma", gamma, d)?;
    let d_mean = positive_denominator("E[R^2] + eps", units.mean_square() + eps)?;
    representable(
        "the per-draw sd of RMSNorm",
        (0..d)
            .map(|k| gamma[k].abs() * (units.s2[k] / d_mean).sqrt())
            .collect(),
    )
}
