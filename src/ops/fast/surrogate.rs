//! The control variate of [`super::FastSite`]'s per-channel outputs: the
//! first-order expansion of the norm in the mask, whose expectation is
//! known exactly.
//!
//! # The surrogate
//!
//! Work in the site's shifted coordinates ([`super::site`]): `x' = x − c`
//! the clean input (`c` the clean mean before LayerNorm, `0` before
//! RMSNorm), `y'_b` mask `b`'s input, `δ_b = y'_b − x'`. Per mask the
//! kernel forms (before `γ`, `β`)
//!
//! ```text
//! L_bk = (y'_bk − M'_b) s_b      LayerNorm (M'_b = mean_j y'_bj, s_b = 1/√(V_b + ε))
//! L_bk = y'_bk s_b               RMSNorm   (s_b = 1/√(R²_b + ε))
//! ```
//!
//! Linearise in `δ` at `x'`, at the *expected* scale: with `σ0² = mean_j x'_j²`
//! (the clean input's `V` before LayerNorm, its `R²` before RMSNorm, `x'`
//! being centred in the first case and equal to `x` in the second) and
//! the noise `ν = Σ_j (p_j/q_j) mean_k v_jk²` (times `1 − 1/d` before
//! LayerNorm), `E[V] = σ0² + ν` (up to `x̄'² ≈ 0`), and with
//! `s1 = 1/√(σ0² + ν + ε)`, `∂s/∂x'_j ≈ −s1³ x'_j/d`, the part of `L_bk`
//! linear in `δ` is
//!
//! ```text
//! S_bk = s1 (y'_bk − [LN] M'_b) − x'_k s1³ (P_b − σ0²),
//!        P_b = mean_j x'_j y'_bj                          (x̄' = mean x', 0 up to rounding)
//! ```
//!
//! (`P_b − σ0² = mean_j x'_j δ_bj`). Expanding at `σ0²` instead (`s0 =
//! 1/√(σ0² + ε)`) leaves the mean of `V − σ0²`, `ν`, in the residual: the
//! slope of `L_k` on `δ_k` is `s1`, not `s0`, and the residual keeps a
//! first-order part `(s0 − s1) δ_k` of relative variance about
//! `((p/q) ρ²/2)²` — the gain measured at `p = 0.5` fell to 20 that way.
//! Every mask-dependent piece of `S` is *linear* in the keep bits, and
//! `E[y'_b] = x'` exactly (inverted dropout: `E[m/q] = 1`), so
//! `E[M'_b] = x̄'`, `E[P_b] = σ0²`, and
//!
//! ```text
//! E[S_bk] = s1 (x'_k − [LN] x̄')           exactly (no expansion is involved)
//! ```
//!
//! # The estimator, and why it is unbiased
//!
//! Subtracting, most terms cancel:
//!
//! ```text
//! L_bk − S_bk = (y'_bk − [LN] M'_b)(s_b − s1) + x'_k s1³ (P_b − σ0²)
//! Ê_k        = s1 (x'_k − [LN] x̄') + mean_b (L_bk − S_bk)
//! ```
//!
//! `E[Ê_k] = E[S_k] + E[L_k] − E[S_k] = E[L_k]` for *any* fixed `s1`, `σ0²`
//! (the coefficients are derived from the input, never estimated from the
//! draws, so there is no `O(1/n)` bias of an estimated coefficient; the
//! control variate's own coefficient is 1): the estimator is unbiased by
//! construction whatever the quality of the expansion, which only decides
//! its variance. (The optimal coefficient `Cov(L, S)/Var S` is
//! `1 + O(1/d)` because `L − S` is of second order in `δ`; estimating it
//! would buy an `O(1/d)` fraction of the residual variance at the price of
//! the bias.) Its standard error is the batch-means SE of the residual
//! `L − S` — the kernel runs the residual through the same block sums as
//! the plain estimate did. In the kernel this costs one more masked sum per
//! mask (`P_b`, a table column `w_j ⊙ x'` per term) and `s_b → s_b − s1`
//! in the per-channel sums; the constant `x'_k s1³ Σ_b (P_b − σ0²)` is
//! added per block.
//!
//! # The variance it removes (leading order, one term)
//!
//! Write `a = mean_j x'_j δ_j`, `b = mean δ² − δ̄²` (`E b = ν`), so
//! `V = σ0² + 2a + b` and `s = s1 (1 − s1²(a + (b − ν)/2) + O(δ²/d))`.
//! Then `L_k − S_k ≈ −s1³ (δ_k − δ̄)(a + (b − ν)/2) − x'_k s1³ (b − ν)/2`.
//! With `Var δ_k = (p/q) v_k²`, `Var δ_k² = v_k⁴ p (q − p)²/q³` (so
//! `Var b ≈ p (q − p)² mean(v⁴)/(q³ d)`), `a`, `b` nearly independent of a
//! single `δ_k`, and the `O(1/d²)` terms dropped,
//!
//! ```text
//! Σ_k Var L_k        ≈ d s1² (p/q) mean(v²)
//! ratio r = Σ_k Var(L_k − S_k) / Σ_k Var L_k
//!         ≈ (1/d) [ (p/q) s1⁴ mean(x'² v²)
//!                   + (q − p)²/(4 q²) s1⁴ mean(v⁴) (mean(x'²)/mean(v²) + p/q) ]
//! ```
//!
//! and with `x'²` uncorrelated with `v²`, Gaussian-like `v`
//! (`mean v⁴ = 3 mean(v²)²`), `ρ² = mean(v²)/σ0²`, `u = (p/q) ρ²`, `ε = 0`:
//!
//! ```text
//! r ≈ (ρ²/d) [p/q + 3 (q − p)² (1 + u)/(4 q²)] / (1 + u)²
//! ```
//!
//! a gain `1/r` of about `1100` at `d = 768`, `p = 0.1`, `ρ² = 1`.
//! [`predicted_variance_ratio`] evaluates the first form on a token;
//! docs/performance.md compares it with the measured ratio (a
//! leading-order prediction, not a bound).

use super::run::Isa;
use super::tables::SubsetTables;

/// The surrogate's constants for one site (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct Surrogate {
    /// `s1 = 1/√(σ0² + ν + ε)`.
    pub s1: f64,
    /// `s1³`.
    pub s1_cubed: f64,
    /// `σ0² = mean x'²`, the exact mean of `P_b`.
    pub mean_square: f64,
    /// `x'`, the shifted clean input.
    pub shifted: Vec<f64>,
    /// `[LN] x̄'`.
    pub centre: f64,
    /// `Σ_k x'_k h'_k`: the constant part of `d P_b`.
    pub base: f64,
}

impl Surrogate {
    /// The surrogate for the clean input `x` (`shift` = `c`, `h_shifted` =
    /// `h'`) with noise `ν = Σ_j (p_j/q_j) mean v_j²` before a norm with
    /// `eps`; `None` when `σ0² + ν + ε` is not positive and finite (every
    /// mask gives a constant input: nothing to expand).
    pub fn new(
        x: &[f64],
        h_shifted: &[f64],
        shift: f64,
        layer: bool,
        eps: f64,
        noise: f64,
    ) -> Option<Self> {
        let d = x.len() as f64;
        let shifted: Vec<f64> = x.iter().map(|a| a - shift).collect();
        let mean_square = shifted.iter().map(|a| a * a).sum::<f64>() / d;
        let expected_v = mean_square
            + if layer {
                noise * (1.0 - 1.0 / d)
            } else {
                noise
            };
        let denom = expected_v + eps;
        if !(denom > 0.0 && denom.is_finite()) {
            return None;
        }
        let s1 = 1.0 / denom.sqrt();
        Some(Surrogate {
            s1,
            s1_cubed: s1 * s1 * s1,
            mean_square,
            centre: if layer {
                shifted.iter().sum::<f64>() / d
            } else {
                0.0
            },
            base: shifted.iter().zip(h_shifted).map(|(a, h)| a * h).sum(),
            shifted,
        })
    }

    /// `E[S_k] = s1 (x'_k − [LN] x̄')` per channel (before `γ`, `β`).
    pub fn known_mean(&self) -> Vec<f64> {
        self.shifted
            .iter()
            .map(|a| (a - self.centre) * self.s1)
            .collect()
    }

    /// Per term `j` the table column `w_j ⊙ x'` of `d P_b`.
    pub fn column(&self, w: &[f64]) -> Vec<f64> {
        w.iter().zip(&self.shifted).map(|(w, a)| w * a).collect()
    }
}

/// The leading-order ratio `Σ_k Var(L_k − S_k) / Σ_k Var L_k` of the module
/// docs for one term `v` at rate `p` on the clean input `x` (`x'` its
/// shifted form, `eps` the norm's): the factor by which the control
/// variate divides the per-channel variance is its inverse. (Test-only:
/// the `variance_reduction_table` experiment prints it next to the
/// measured ratio.)
#[cfg(test)]
pub fn predicted_variance_ratio(shifted: &[f64], v: &[f64], p: f64, eps: f64) -> f64 {
    let d = v.len() as f64;
    let q = 1.0 - p;
    let mean = |f: &dyn Fn(usize) -> f64| (0..v.len()).map(f).sum::<f64>() / d;
    let sigma2 = mean(&|k| shifted[k] * shifted[k]);
    let v2 = mean(&|k| v[k] * v[k]);
    let v4 = mean(&|k| v[k].powi(4));
    let xv = mean(&|k| shifted[k] * shifted[k] * v[k] * v[k]);
    let s1_sq = 1.0 / (sigma2 + (p / q) * v2 + eps);
    let s1_4 = s1_sq * s1_sq;
    ((p / q) * s1_4 * xv + (q - p).powi(2) / (4.0 * q * q) * s1_4 * v4 * (sigma2 / v2 + p / q)) / d
}

/// The surrogate and its `P_b` tables (one column `w_j ⊙ x'` per term), as
/// the kernel runs it block by block.
#[derive(Debug, Clone)]
pub struct ControlVariate {
    pub surrogate: Surrogate,
    tables: Vec<SubsetTables<1>>,
}

impl ControlVariate {
    /// `scaled` the terms' `w_j = v_j/q_j`.
    pub fn new(surrogate: Surrogate, scaled: &[Vec<f64>]) -> Self {
        let tables = scaled
            .iter()
            .map(|w| SubsetTables::new([&surrogate.column(w)[..]]))
            .collect();
        ControlVariate { surrogate, tables }
    }

    /// For a block of `nb` masks (`words` each term's block, word-major):
    /// turns the scales `s_b` into `s_b − s1` and returns the block's
    /// `s1³ Σ_b (P_b − σ0²)`.
    pub fn block(&self, isa: Isa, words: &[u64], nb: usize, scale: &mut [f64; 64]) -> f64 {
        let s = &self.surrogate;
        let stride = words.len() / self.tables.len();
        let mut p = [s.base; 64];
        let mut one = [[0.0f64; 64]; 1];
        for (t, w) in self.tables.iter().zip(words.chunks_exact(stride)) {
            t.block_sums(isa, w, &mut one);
            for (p, x) in p.iter_mut().zip(&one[0]) {
                *p += x;
            }
        }
        for s_b in &mut scale[..nb] {
            *s_b -= s.s1;
        }
        let inv_d = 1.0 / s.shifted.len() as f64;
        let extra: f64 = p[..nb].iter().map(|p| p * inv_d - s.mean_square).sum();
        s.s1_cubed * extra
    }

    /// Adds the block's `x'_k s1³ Σ_b (P_b − σ0²)` to the channels' block
    /// sums (already `Σ_b (y'_bk − [LN] M'_b)(s_b − s1)`).
    pub fn add(&self, extra: f64, block: &mut [f64]) {
        for (t, x) in block.iter_mut().zip(&self.surrogate.shifted) {
            *t += x * extra;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::FastSite;
    use super::*;
    use crate::engine::Budget;
    use crate::exact::site_expectation;
    use crate::ops::{AnyNorm, LayerNorm, RmsNorm, Site};
    use crate::stats::critical_z;

    fn site(d: usize, terms: usize) -> Site {
        let h = (0..d).map(|k| ((k * 13 % 7) as f64 - 3.0) / 2.0).collect();
        let terms = (0..terms)
            .map(|j| {
                let v = (0..d)
                    .map(|k| (((k + 3 * j) * 37 % 11) as f64 - 5.0) / 3.0)
                    .collect();
                (v, 0.2 + 0.1 * j as f64)
            })
            .collect();
        Site::new(h, terms).unwrap()
    }

    fn norms(d: usize) -> [AnyNorm; 2] {
        let gamma: Vec<f64> = (0..d).map(|k| 0.5 + k as f64 / d as f64).collect();
        let beta: Vec<f64> = (0..d).map(|k| k as f64 / 8.0 - 0.5).collect();
        [
            AnyNorm::Layer(LayerNorm::new(gamma.clone(), beta, 1e-5).unwrap()),
            AnyNorm::Rms(RmsNorm::new(gamma, 0.0).unwrap()),
        ]
    }

    /// The control-variate estimate of every channel (and of a functional)
    /// against the enumerated truth: unbiased by construction, so each is
    /// within `critical_z()` standard errors. A wrong known mean (a biased
    /// surrogate) fails here.
    #[test]
    fn the_control_variate_estimate_is_unbiased_against_enumeration() {
        for (d, terms) in [(12, 1), (7, 2)] {
            let site = site(d, terms);
            for norm in norms(d) {
                let exact = site_expectation(&site, d, |y, out| {
                    let _ = norm.forward(y, out);
                })
                .unwrap();
                let a: Vec<f64> = (0..d).map(|k| 1.0 + (k % 3) as f64).collect();
                let e = FastSite::new(&site, &norm, true)
                    .unwrap()
                    .with_functional(&a)
                    .unwrap()
                    .with_control_variate(&site)
                    .estimate(Budget::new(1 << 20, 7).unwrap())
                    .unwrap()
                    .unwrap();
                for (k, (got, want)) in e.out.iter().zip(&exact.values).enumerate() {
                    // A channel with x_k = v_k = 0 before RMSNorm is 0 on every mask.
                    let z = if got.value == *want {
                        0.0
                    } else {
                        (got.value - want) / got.stderr
                    };
                    assert!(
                        z.abs() < critical_z(),
                        "d {d} channel {k}: z = {z} {got:?} {want}"
                    );
                }
                let beta = norm.beta().map_or(vec![0.0; d], <[f64]>::to_vec);
                let want: f64 = (0..d).map(|k| a[k] * (exact.values[k] - beta[k])).sum();
                let f = e.functionals[0];
                assert!(((f.value - want) / f.stderr).abs() < critical_z());
            }
        }
    }

    /// At a width beyond enumeration, the control-variate and the plain
    /// estimates of the same masks agree within their joint standard error
    /// (taken as independent: conservative, as they are positively
    /// correlated), and the control variate's is the smaller.
    #[test]
    fn with_and_without_the_control_variate_agree_at_d_256() {
        let site = site(256, 1);
        for norm in norms(256) {
            let budget = Budget::new(1 << 13, 3).unwrap();
            let plain = FastSite::new(&site, &norm, true).unwrap();
            let cv = plain.clone().with_control_variate(&site);
            let plain = plain.estimate(budget).unwrap().unwrap();
            let cv = cv.estimate(budget).unwrap().unwrap();
            for (a, b) in plain.out.iter().zip(&cv.out) {
                if a.stderr == 0.0 {
                    // x_k = v_k = 0 before RMSNorm: 0 on every mask, both ways.
                    assert_eq!((a.value, b.value, b.stderr), (0.0, 0.0, 0.0));
                    continue;
                }
                let z = (a.value - b.value) / a.stderr.hypot(b.stderr);
                assert!(z.abs() < critical_z(), "z = {z} {a:?} {b:?}");
                assert!(b.stderr < a.stderr);
            }
        }
    }

    /// The measured variance reduction at equal masks next to the leading
    /// order prediction, on BERT-like synthetic tokens (`d = 768`,
    /// `p = 0.1`, LayerNorm, `h ~ N(0, 1)`, `v ~ N(0, ρ²)` from a fixed
    /// seed): the table of docs/performance.md. An experiment, not a test
    /// (`cargo test --release --lib -- --ignored variance_reduction_table
    /// --nocapture`).
    #[test]
    #[ignore]
    fn variance_reduction_table() {
        use rand_distr::Distribution;
        let mut rng = crate::engine::stream(5, 0);
        let mut normal = move || -> f64 { rand_distr::StandardNormal.sample(&mut rng) };
        println!("| d | p | rho^2 | predicted gain | measured gain |");
        println!("|---|---|---|---|---|");
        for (d, p, rho) in [
            (768, 0.1, 0.1),
            (768, 0.1, 0.5),
            (768, 0.1, 1.0),
            (768, 0.1, 3.0),
            (256, 0.1, 1.0),
            (768, 0.3, 1.0),
            (768, 0.5, 1.0),
        ] {
            let h: Vec<f64> = (0..d).map(|_| normal()).collect();
            let v: Vec<f64> = (0..d).map(|_| rho * normal()).collect();
            let site = Site::new(h, vec![(v.clone(), p)]).unwrap();
            let ln = AnyNorm::Layer(LayerNorm::new(vec![1.0; d], vec![0.0; d], 1e-12).unwrap());
            let budget = Budget::new(1 << 14, 1).unwrap();
            let plain = FastSite::new(&site, &ln, true).unwrap();
            let cv = plain.clone().with_control_variate(&site);
            let var = |k: FastSite| -> f64 {
                let e = k.estimate(budget).unwrap().unwrap();
                e.out.iter().map(|e| e.stderr * e.stderr).sum()
            };
            let measured = var(plain) / var(cv);
            let x = site.clean();
            let c = x.iter().sum::<f64>() / d as f64;
            let shifted: Vec<f64> = x.iter().map(|a| a - c).collect();
            let rho2 =
                v.iter().map(|a| a * a).sum::<f64>() / shifted.iter().map(|a| a * a).sum::<f64>();
            let predicted = 1.0 / predicted_variance_ratio(&shifted, &v, p, 1e-12);
            println!("| {d} | {p} | {rho2:.3} | {predicted:.0} | {measured:.0} |");
        }
    }

    #[test]
    fn a_constant_clean_input_without_eps_has_no_surrogate() {
        assert!(Surrogate::new(&[1.0; 4], &[0.0; 4], 1.0, true, 0.0, 0.0).is_none());
        assert!(Surrogate::new(&[1.0; 4], &[0.0; 4], 1.0, true, 1e-5, 0.0).is_some());
    }
}
