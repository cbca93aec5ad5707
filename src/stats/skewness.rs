//! The skewness a mean test's minimum budget reads
//! ([`super::mean_min_samples`]), for the estimator the sampler actually
//! computes, from the exact central moments of one draw.
//!
//! # Three estimators
//!
//! Let `X` be one draw's raw quantity with mean `μ` and central moments
//! `μ_r = E(X − μ)^r`, `r = 2 … 6`.
//!
//! * **A plain mean** of `X` (Student-t on `X̄`): the Cramér rule reads the
//!   skewness `γ = μ₃ / μ₂^{3/2}` ([`CentralMoments::skewness`]).
//! * **The pair form** `Y = (X − X′)²/2` of two independent copies, whose
//!   mean is `Var X`: a plain mean of `Y`. With `D = X − X′` (symmetric, so
//!   its odd moments vanish) and `μ₁ = 0` for the centred copies,
//!
//!   ```text
//!   E D²  = 2 μ₂
//!   E D⁴  = 2 μ₄ + 6 μ₂²                       (binomial expansion, C(4,2) = 6)
//!   E D⁶  = 2 μ₆ + 30 μ₂ μ₄ − 20 μ₃²           (C(6,2) = C(6,4) = 15, C(6,3) = 20)
//!   E Yʳ  = E D^{2r} / 2ʳ
//!   ```
//!
//!   and `γ_Y` follows from those three raw moments
//!   ([`CentralMoments::pair_form_skewness`]).
//! * **The single-draw sample variance** `s²` with the fourth-moment
//!   standard error `√((m₄ − m₂²)/n)` (what [`crate::ops::fast::PowerSums`]
//!   computes). Its t-ratio `T` is a smooth function of means, and the
//!   Cramér exponent of a studentized statistic is `κ₃(T) x³ / 6` to
//!   leading order, `κ₃(T)` the third cumulant of `T` (for Student-t on a
//!   mean `√n κ₃(T) → −2γ`, which gives the rule's `exp(−γ x³/(3√n))`). So
//!   the rule applies with `γ_eff = −√n κ₃(T) / 2`. With `Y = X − μ`,
//!   `W = Y² − μ₂` (variance `τ² = μ₄ − μ₂²`) and the linearizations
//!
//!   ```text
//!   s² − μ₂ ≈ W̄ − Ȳ²                           (centring at X̄)
//!   m₄ − m₂² − τ² ≈ Ū,  U = (Y⁴ − μ₄) − 2 μ₂ W − 4 μ₃ Y
//!   T ≈ √n W̄/τ − √n W̄ Ū/(2τ³) − √n Ȳ²/τ
//!   ```
//!
//!   the three terms' joint cumulants to order `n^{−1/2}` are
//!   `√n κ₃(T) = E W³/τ³ − 3 E[W U]/τ³ − 6 μ₃²/τ³`, and with
//!   `E[W U] = E W³ − 4 μ₃²` (`E W Y⁴ = μ₆ − μ₂ μ₄`, `E W Y = μ₃`,
//!   `E W³ = μ₆ − 3 μ₂ μ₄ + 2 μ₂³`)
//!
//!   ```text
//!   γ_eff = (E W³ − 3 μ₃²) / τ³
//!   ```
//!
//!   ([`CentralMoments::sample_variance_skewness`]). Checks: a normal `X`
//!   has `γ_eff = 8/2^{3/2} = 2√2` (the `χ²₁` value the registry's default
//!   assumed); a Bernoulli(0.7) `X` has `γ_eff = −2.564`, and the exact size
//!   of that test (enumerated over the count, as in
//!   [`super::two_point_variance_t_size`]) gives per-tail exponents
//!   `−2.74 … −2.68` from 10⁵ to 1.6·10⁶ draws (Python, the same rule): the
//!   leading order, not an exact size.
//!
//! * **A ratio** `Ȳ₁ / Ȳ₀` of two means from independent draws, with the
//!   delta-method standard error: to leading order a mean of the
//!   linearization `L = Y₁ − R Y₀` (`R = E Y₁ / E Y₀`), whose skewness is
//!   `(κ₃(Y₁) − R³ κ₃(Y₀)) / (Var Y₁ + R² Var Y₀)^{3/2}` (cumulants add
//!   over independent terms, `κ₃(cY) = c³ κ₃(Y)`;
//!   [`linearized_ratio_skewness`]). The curvature of the ratio and the
//!   estimation of its standard error enter the Cramér exponent too, at the
//!   same order; they are not included.
//!
//! Each is a leading-order input to a leading-order rule; where the
//! statistic is a function of a count, [`super::exact_size`] measures the
//! size exactly instead.

/// The central moments `μ₂ … μ₆` of one draw's quantity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CentralMoments {
    pub m2: f64,
    pub m3: f64,
    pub m4: f64,
    pub m5: f64,
    pub m6: f64,
}

impl CentralMoments {
    /// `[μ₂, μ₃, μ₄, μ₅, μ₆]`.
    pub fn to_array(&self) -> [f64; 5] {
        [self.m2, self.m3, self.m4, self.m5, self.m6]
    }

    /// From the raw moments `E X^r`, `r = 1 … 6` (`raw[r − 1]`), by the
    /// binomial expansion `μ_r = Σ_j C(r, j) E X^j (−μ)^{r−j}`. Subtractive:
    /// use it where the raw moments are exact in closed form and of the
    /// size of the central ones (a closed-form mixture), else pass the
    /// central powers directly.
    pub fn from_raw(raw: [f64; 6]) -> CentralMoments {
        let mean = raw[0];
        let moment = |r: usize| -> f64 {
            let mut total = 0.0;
            let mut binom = 1.0;
            for j in 0..=r {
                let ej = if j == 0 { 1.0 } else { raw[j - 1] };
                total += binom * ej * (-mean).powi((r - j) as i32);
                binom = binom * (r - j) as f64 / (j + 1) as f64;
            }
            total
        };
        CentralMoments {
            m2: moment(2),
            m3: moment(3),
            m4: moment(4),
            m5: moment(5),
            m6: moment(6),
        }
    }

    /// Of a masked sum `S = Σ_i m_i c_i`, `m_i ~ Bernoulli(keep)`
    /// independent, at any width, in closed form. Cumulants add over
    /// independent terms and scale as `κ_r(c m) = c^r κ_r(m)`; a
    /// Bernoulli(q)'s are, with `v = q(1 − q)`,
    ///
    /// ```text
    /// κ₂ = v      κ₃ = v (1 − 2q)      κ₄ = v (1 − 6v)
    /// κ₅ = v (1 − 2q)(1 − 12v)         κ₆ = v (1 − 30v + 120v²)
    /// ```
    ///
    /// and the central moments follow from `S`'s cumulants:
    /// `μ₄ = κ₄ + 3κ₂²`, `μ₅ = κ₅ + 10κ₃κ₂`,
    /// `μ₆ = κ₆ + 15κ₄κ₂ + 10κ₃² + 15κ₂³` (checked against the enumeration
    /// of every mask in `exact::moments`).
    pub fn of_masked_sum(c: &[f64], keep: f64) -> CentralMoments {
        let v = keep * (1.0 - keep);
        let skew = 1.0 - 2.0 * keep;
        let unit = [
            v,
            v * skew,
            v * (1.0 - 6.0 * v),
            v * skew * (1.0 - 12.0 * v),
            v * (1.0 - 30.0 * v + 120.0 * v * v),
        ];
        let mut k = [0.0; 5];
        for &ci in c {
            let mut power = ci;
            for (kr, u) in k.iter_mut().zip(unit) {
                power *= ci;
                *kr += power * u;
            }
        }
        let [k2, k3, k4, k5, k6] = k;
        CentralMoments {
            m2: k2,
            m3: k3,
            m4: k4 + 3.0 * k2 * k2,
            m5: k5 + 10.0 * k3 * k2,
            m6: k6 + 15.0 * k4 * k2 + 10.0 * k3 * k3 + 15.0 * k2 * k2 * k2,
        }
    }

    /// Of the inverted-dropout sum `S = Σ_i m_i x_i / keep`: the masked sum
    /// of `c_i = x_i / keep` ([`CentralMoments::of_masked_sum`]).
    pub fn of_dropped_sum(x: &[f64], keep: f64) -> CentralMoments {
        let c: Vec<f64> = x.iter().map(|v| v / keep).collect();
        CentralMoments::of_masked_sum(&c, keep)
    }

    /// Over a finite law `(weight, value)` (weights summing to one): two
    /// passes, the mean first, then the central powers.
    pub fn of_law(law: impl Iterator<Item = (f64, f64)> + Clone) -> CentralMoments {
        let mean: f64 = law.clone().map(|(w, v)| w * v).sum();
        let mut m = [0.0; 5];
        for (w, v) in law {
            let y = v - mean;
            let mut power = y;
            for slot in &mut m {
                power *= y;
                *slot += w * power;
            }
        }
        CentralMoments {
            m2: m[0],
            m3: m[1],
            m4: m[2],
            m5: m[3],
            m6: m[4],
        }
    }

    /// The cumulants `[κ₂, κ₃, κ₄, κ₅, κ₆]`: `κ₂ = μ₂`, `κ₃ = μ₃`,
    /// `κ₄ = μ₄ − 3μ₂²`, `κ₅ = μ₅ − 10μ₃μ₂`,
    /// `κ₆ = μ₆ − 15μ₄μ₂ − 10μ₃² + 30μ₂³` (the moment–cumulant relations
    /// about the mean, where `κ₁` drops out).
    pub fn cumulants(&self) -> [f64; 5] {
        let [m2, m3, m4, m5, m6] = self.to_array();
        [
            m2,
            m3,
            m4 - 3.0 * m2 * m2,
            m5 - 10.0 * m3 * m2,
            m6 - 15.0 * m4 * m2 - 10.0 * m3 * m3 + 30.0 * m2 * m2 * m2,
        ]
    }

    /// `μ₃ / μ₂^{3/2}` (0 for a constant).
    pub fn skewness(&self) -> f64 {
        ratio(self.m3, self.m2)
    }

    /// The mean, variance and third central moment of `(X − X′)²/2`
    /// (module docs).
    pub fn pair_form_cumulants(&self) -> [f64; 3] {
        let e1 = self.m2;
        let e2 = (2.0 * self.m4 + 6.0 * self.m2 * self.m2) / 4.0;
        let e3 = (2.0 * self.m6 + 30.0 * self.m2 * self.m4 - 20.0 * self.m3 * self.m3) / 8.0;
        [e1, e2 - e1 * e1, e3 - 3.0 * e1 * e2 + 2.0 * e1 * e1 * e1]
    }

    /// The skewness of `(X − X′)²/2` (module docs).
    pub fn pair_form_skewness(&self) -> f64 {
        let [_, var, third] = self.pair_form_cumulants();
        ratio(third, var)
    }

    /// The effective skewness `(E W³ − 3 μ₃²) / τ³` of Student-t on the
    /// single-draw sample variance with the fourth-moment SE (module docs).
    pub fn sample_variance_skewness(&self) -> f64 {
        let tau2 = self.m4 - self.m2 * self.m2;
        let w3 = self.m6 - 3.0 * self.m2 * self.m4 + 2.0 * self.m2 * self.m2 * self.m2;
        ratio(w3 - 3.0 * self.m3 * self.m3, tau2)
    }

    /// The larger `|γ|` of the two variance estimators a claim on `Var X`
    /// may run: the single-draw sample variance on the fast path
    /// ([`CentralMoments::sample_variance_skewness`]), the pair form on the
    /// generic path ([`CentralMoments::pair_form_skewness`]). Declared, it
    /// makes the claim's minimum budget hold on both paths.
    pub fn variance_skewness_on_either_path(&self) -> f64 {
        self.sample_variance_skewness()
            .abs()
            .max(self.pair_form_skewness().abs())
    }
}

/// `third / var^{3/2}`, 0 when `var` is not positive (a constant draw).
fn ratio(third: f64, var: f64) -> f64 {
    if var > 0.0 {
        third / var.powf(1.5)
    } else {
        0.0
    }
}

/// The skewness of the linearized ratio of two independent means, from the
/// `[mean, variance, third central moment]` of numerator and denominator
/// draws (module docs; leading order, without the curvature terms).
pub fn linearized_ratio_skewness(numerator: [f64; 3], denominator: [f64; 3]) -> f64 {
    let r = numerator[0] / denominator[0];
    ratio(
        numerator[2] - r * r * r * denominator[2],
        numerator[1] + r * r * denominator[1],
    )
}

/// The raw moments `E X^r`, `r = 1 … 6`, of `X ~ N(a, v)`:
/// `a`, `a² + v`, `a³ + 3av`, `a⁴ + 6a²v + 3v²`, `a⁵ + 10a³v + 15av²`,
/// `a⁶ + 15a⁴v + 45a²v² + 15v³` (Hermite expansion, `E N^{2j} = (2j − 1)!!`).
pub fn normal_raw_moments(a: f64, v: f64) -> [f64; 6] {
    let (a2, v2) = (a * a, v * v);
    [
        a,
        a2 + v,
        a * (a2 + 3.0 * v),
        a2 * a2 + 6.0 * a2 * v + 3.0 * v2,
        a * (a2 * a2 + 10.0 * a2 * v + 15.0 * v2),
        a2 * a2 * a2 + 15.0 * a2 * a2 * v + 45.0 * a2 * v2 + 15.0 * v2 * v,
    ]
}

/// The raw moments of `m X / q`, `m ~ Bernoulli(q)` independent of `X`
/// (a dropped-out unit): `E (mX/q)^r = q E X^r / q^r`.
pub fn dropped_raw_moments(raw: [f64; 6], q: f64) -> [f64; 6] {
    let mut out = raw;
    for (r, v) in out.iter_mut().enumerate() {
        *v *= q / q.powi(r as i32 + 1);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tolerance of these checks: moments up to `5⁶ ≈ 1.6·10⁴` (or
    /// `(4 + 1.5²)³ ≈ 250` for the normal case) from at most seven terms,
    /// each rounded once, so an absolute error below `10⁴ · 16 u ≈ 4·10⁻¹¹`
    /// on the moments and `10⁻¹²` on their ratios of order one.
    const RATIO_ROUNDING: f64 = 1e-12;

    #[test]
    fn a_normal_gives_the_chi_square_values() {
        let c = CentralMoments::from_raw(normal_raw_moments(1.5, 4.0));
        assert!(c.skewness().abs() < RATIO_ROUNDING, "{c:?}");
        let chi2 = 2.0 * std::f64::consts::SQRT_2;
        // (N − N′)²/2 is σ² χ²₁; (N − μ)² − σ² as a sample variance: 2√2.
        assert!(
            (c.pair_form_skewness() - chi2).abs() < RATIO_ROUNDING,
            "{c:?}"
        );
        assert!(
            (c.sample_variance_skewness() - chi2).abs() < RATIO_ROUNDING,
            "{c:?}"
        );
    }

    #[test]
    fn the_pair_form_matches_its_enumerated_law() {
        // X uniform on {0, 1, 5}: enumerate (x − x′)²/2 over the 9 pairs.
        let xs = [0.0, 1.0, 5.0];
        let one = CentralMoments::of_law(xs.iter().map(|&x| (1.0 / 3.0, x)));
        let pairs = xs.iter().flat_map(|&a| {
            xs.iter()
                .map(move |&b| (1.0 / 9.0, 0.5 * (a - b) * (a - b)))
        });
        let direct = CentralMoments::of_law(pairs).skewness();
        assert!(
            (one.pair_form_skewness() - direct).abs() < RATIO_ROUNDING,
            "{direct}"
        );
        // And the raw-moment route agrees with the two-pass one.
        let raw: Vec<f64> = (1..=6)
            .map(|r| xs.iter().map(|x: &f64| x.powi(r) / 3.0).sum())
            .collect();
        let from_raw = CentralMoments::from_raw(raw.try_into().unwrap());
        assert!(
            (from_raw.m6 - one.m6).abs() < RATIO_ROUNDING * one.m6,
            "{from_raw:?}"
        );
    }

    #[test]
    fn a_bernoulli_sample_variance_has_the_derived_effective_skewness() {
        // r = 0.7: E W³ / τ³ = 0.8729 (W two-point), μ₃ = −0.084,
        // τ² = 0.0336: γ_eff = (0.005376 − 3 · 0.007056) / 0.0336^{3/2}.
        let c = CentralMoments::of_law([(0.7, 1.0), (0.3, 0.0)].into_iter());
        let want = (0.005376 - 3.0 * 0.007056) / 0.0336f64.powf(1.5);
        assert!(
            (c.sample_variance_skewness() - want).abs() < RATIO_ROUNDING,
            "{c:?}"
        );
        // −2.56406 (Python, the same expression), to the digits quoted.
        assert!((want + 2.564).abs() < 5e-4);
    }
}
