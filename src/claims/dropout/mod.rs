//! The inverted-dropout family: moments of one unit, of a sum, the kept
//! count, and the original scheme. Derivations: [`crate::formulas::dropout`].
//!
//! On an implementation under test each claim draws, per Monte Carlo sample,
//! two independent training-mode passes `z` and `z'` of the subject's
//! dropout layer over the claim's `x`, and reduces them to the statistic
//! whose expectation is the claimed value (variances through
//! `(t − t')² / 2`, see [`crate::engine::Sampler`]). On the mathematics
//! every claim uses its bit-mask estimator instead ([`DropoutClaim::fast`]):
//! one mask per sample.

mod oracles;
pub(crate) mod range;
mod sampler;
mod sum;

pub use range::sum_mean as sum_null_range;
pub use sampler::{Draw, DrawStatistic, PairSampler, PairScratch};

use super::fn_claim::half_squared_difference;
use super::law::Law;
use super::listed;
use super::{Card, Claim, FastPath, Shape};
use crate::engine::{Budget, estimate};
use crate::error::Error;
use crate::exact::{Oracle, enumerate_masks};
use crate::formulas::dropout as f;
use crate::ops::fast::dropout as fast;
use crate::ops::{Rate, Subject};
use crate::stats::{Estimate, Statistic};
use oracles::{unit_oracle, unit_variance_oracle};
use sum::{SumMoment, sum_claim};

/// The per-unit configuration: mixed signs, a zero unit (whose output must
/// be exactly zero) and a large one.
pub const UNIT_X: [f64; 5] = [0.5, -1.2, 3.0, 0.0, 2.0];
/// Drop rate of the per-unit claims.
pub const UNIT_P: f64 = 0.3;
/// The worked case of the seeds: 512 units equal to one, `p = 0.5`.
pub const WORKED_X: [f64; 512] = [1.0; 512];
/// Drop rate of the worked case.
pub const WORKED_P: f64 = 0.5;
/// The kept-count configuration: `d = 6`, `p = 0.3`. Six units keep the
/// rarest count, `P(K = 0) = 0.3^6 ≈ 7.3·10⁻⁴`, frequent enough for the
/// normal approximation of its z-test from 50 000 draws on (≈ 36 expected).
pub const COUNT_X: [f64; 6] = [1.0; 6];
/// Drop rate of the kept-count claim.
pub const COUNT_P: f64 = 0.3;

/// The family name its claims carry.
const FAMILY: &str = "dropout";

/// The family's claim ids, for code that names one claim (the Python
/// binding's diagnosis and composite nulls, the mutant gallery): each is
/// written once, here.
pub mod ids {
    pub const MEAN: &str = "dropout.mean";
    pub const SECOND_MOMENT: &str = "dropout.second_moment";
    pub const THIRD_MOMENT: &str = "dropout.third_moment";
    pub const FOURTH_MOMENT: &str = "dropout.fourth_moment";
    pub const VARIANCE: &str = "dropout.variance";
    pub const SUM_MEAN: &str = "dropout.sum_mean";
    pub const SUM_VARIANCE: &str = "dropout.sum_variance";
    pub const WORKED_512_MEAN: &str = "dropout.worked_512_mean";
    pub const WORKED_512_VARIANCE: &str = "dropout.worked_512_variance";
    pub const KEPT_COUNT: &str = "dropout.kept_count";
    pub const ORIGINAL_SCHEME: &str = "dropout.original_scheme";
}

/// An exact computation at `(x, rate)`.
pub type OracleFn = fn(&[f64], Rate) -> Result<Oracle, Error>;

/// A fast estimator at `(x, p)` (on the mathematics).
pub type FastFn = fn(&[f64], f64, Budget) -> Result<Vec<Estimate>, Error>;

/// A claim of this family: configuration, closed form, oracle, statistic.
/// Built at any input and rate ([`at`], [`kept_count_at`],
/// [`original_scheme_at`]); the registry's claims are these at the suite's
/// configurations ([`UNIT_X`], [`WORKED_X`], [`COUNT_X`]).
pub struct DropoutClaim {
    /// What it states.
    pub card: Card,
    /// The input the claim is stated at (its own copy).
    pub x: Vec<f64>,
    /// The drop rate it is stated at.
    pub p: f64,
    /// The closed form at `(x, rate)`.
    pub analytic: fn(&[f64], Rate) -> Result<Vec<f64>, Error>,
    /// An independent exact computation, if any.
    pub oracle: Option<OracleFn>,
    /// Writes the per-sample statistic (as many values as `analytic`).
    pub draw_statistic: fn(&Draw, &mut [f64]),
    /// The fast estimator: every claim of this family has one, from the
    /// bit-mask kernels of [`crate::ops::fast::dropout`] (per-unit moments from
    /// keep counts, the sum from one masked sum per mask, `K` from a
    /// histogram). The per-unit variance is the pair form of [`PairSampler`]
    /// (from discordance counts of mask pairs); the sum's variances are
    /// sample variances of single draws (standard error:
    /// `crate::ops::fast::PowerSums`).
    pub fast: FastFn,
    /// The law of the per-draw statistic at `(x, p)` ([`Claim::law`]);
    /// `None`: the one the statistic fixes (the per-unit scaled counts and
    /// the kept count's indicators).
    pub law: Option<LawFn>,
    /// The test of [`DropoutClaim::draw_statistic`] as a plain mean, for a
    /// sampler whose draws are not known to take two values (the Python
    /// binding's passes over the user's layer): a scaled count's
    /// two-point skewness ([`Statistic::on_generic_path`]), a sum's
    /// skewness from its exact moments ([`Statistic::masked_sum`], of the
    /// pair form for its variance).
    pub mean_statistic: Statistic,
    /// The width of each component's interval under the null at `(x,
    /// rate)` ([`Claim::null_range`], derived in `claims::dropout::range`).
    pub range: RangeFn,
}

/// A claim's null range at `(x, rate)`, per component.
pub type RangeFn = fn(&[f64], Rate) -> Vec<f64>;

/// A claim's law at `(x, p)`.
pub type LawFn = fn(&[f64], f64) -> Law;

impl DropoutClaim {
    fn rate(&self) -> Result<Rate, Error> {
        Rate::new(self.p)
    }

    /// Its closed form at its input and rate.
    pub fn analytic_values(&self) -> Result<Vec<f64>, Error> {
        (self.analytic)(&self.x, self.rate()?)
    }
}

impl Claim for DropoutClaim {
    fn card(&self) -> Card {
        self.card
    }
    fn analytic(&self) -> Result<Vec<f64>, Error> {
        self.analytic_values()
    }
    fn oracle(&self) -> Result<Option<Oracle>, Error> {
        let rate = self.rate()?;
        self.oracle.map(|o| o(&self.x, rate)).transpose()
    }
    fn fast_estimate(&self, budget: Budget) -> Option<Result<Vec<Estimate>, Error>> {
        Some((self.fast)(&self.x, self.p, budget))
    }
    fn fast_path(&self) -> Option<FastPath> {
        Some(FastPath::Masks)
    }
    fn law(&self) -> Law {
        self.law.map_or_else(
            || Law::implied_by(self.statistic()),
            |law| law(&self.x, self.p),
        )
    }
    fn null_range(&self) -> Option<Vec<f64>> {
        self.rate().ok().map(|rate| (self.range)(&self.x, rate))
    }
    fn estimate(&self, subject: &Subject, budget: Budget) -> Result<Vec<Estimate>, Error> {
        let sampler = PairSampler {
            layer: subject.dropout,
            x: &self.x,
            p: self.p,
            dim: self.analytic()?.len(),
            pairs: true,
            statistic: &self.draw_statistic,
        };
        Ok(estimate(&sampler, budget)?.estimates())
    }
}

/// A per-unit statistic `g(z_k)` with `g(0) = 0` takes two values: `g(x_k/q)`
/// with probability `q` and 0 (the same for `m_k x_k`): a scaled count, tested
/// exactly on the fast path (on the generic path as a mean with skewness
/// [`crate::stats::two_point_skewness`]`(q)`, 0.87 at `p = 0.3`).
fn unit_statistic(rate: Rate) -> Statistic {
    Statistic::ScaledCount { keep: rate.q() }
}

/// The half squared difference `(z_k − z'_k)²/2` of two independent passes
/// is `x_k²/(2q²)` when exactly one keeps the unit (probability `2pq`) and
/// 0 otherwise: a scaled count with `keep = 2pq` (skewness
/// [`crate::stats::two_point_skewness`]`(2pq)` = 0.32 at `p = 0.3` on the generic path).
/// The fast path runs the same pair form ([`fast::unit_pair_variances`]).
fn unit_half_square_statistic(rate: Rate) -> Statistic {
    Statistic::unit_pair_form(rate.p())
}

fn per_unit(x: &[f64], g: impl Fn(f64) -> f64) -> Vec<f64> {
    x.iter().map(|&a| g(a)).collect()
}

/// A claim per unit of `x` at `rate` (10⁶ draws).
#[allow(clippy::too_many_arguments)]
fn unit_claim(
    id: &'static str,
    formula: &'static str,
    x: &[f64],
    rate: Rate,
    statistic: Statistic,
    analytic: fn(&[f64], Rate) -> Result<Vec<f64>, Error>,
    oracle: OracleFn,
    draw_statistic: fn(&Draw, &mut [f64]),
    fast: FastFn,
    range: RangeFn,
) -> DropoutClaim {
    DropoutClaim {
        card: Card::new(id, FAMILY, formula, Shape::Vector, 1_000_000).with_statistic(statistic),
        x: x.to_vec(),
        p: rate.p(),
        analytic,
        oracle: Some(oracle),
        draw_statistic,
        fast,
        law: None,
        mean_statistic: statistic.on_generic_path(),
        range,
    }
}

/// `E[z_k^r]` per unit, `r ≤ 4`.
fn raw_moment_claim(
    id: &'static str,
    formula: &'static str,
    r: i32,
    x: &[f64],
    rate: Rate,
) -> DropoutClaim {
    unit_claim(
        id,
        formula,
        x,
        rate,
        unit_statistic(rate),
        match r {
            1 => |x, _| Ok(per_unit(x, f::unit_mean)),
            2 => |x, rate| Ok(per_unit(x, |a| f::unit_raw_moment(a, rate, 2))),
            3 => |x, rate| Ok(per_unit(x, |a| f::unit_raw_moment(a, rate, 3))),
            _ => |x, rate| Ok(per_unit(x, |a| f::unit_raw_moment(a, rate, 4))),
        },
        match r {
            1 => |x, rate| Ok(unit_oracle(x, rate, |z| z)),
            2 => |x, rate| Ok(unit_oracle(x, rate, |z| z * z)),
            3 => |x, rate| Ok(unit_oracle(x, rate, |z| z * z * z)),
            _ => |x, rate| Ok(unit_oracle(x, rate, |z| z * z * z * z)),
        },
        match r {
            1 => |d, out| out.copy_from_slice(d.z),
            2 => |d, out| power_into(d.z, 2, out),
            3 => |d, out| power_into(d.z, 3, out),
            _ => |d, out| power_into(d.z, 4, out),
        },
        match r {
            1 => |x, p, b| fast::unit_raw_moments(x, p, 1, b),
            2 => |x, p, b| fast::unit_raw_moments(x, p, 2, b),
            3 => |x, p, b| fast::unit_raw_moments(x, p, 3, b),
            _ => |x, p, b| fast::unit_raw_moments(x, p, 4, b),
        },
        match r {
            1 => |x, rate| range::unit_power(x, rate, 1),
            2 => |x, rate| range::unit_power(x, rate, 2),
            3 => |x, rate| range::unit_power(x, rate, 3),
            _ => |x, rate| range::unit_power(x, rate, 4),
        },
    )
}

fn power_into(z: &[f64], r: i32, out: &mut [f64]) {
    for (o, v) in out.iter_mut().zip(z) {
        *o = crate::formulas::ipow(*v, r.max(0) as u32);
    }
}

/// `m_k x_k` per unit: the original scheme's training output.
fn kept_units(x: &[f64], mask: &[bool], out: &mut [f64]) {
    for ((o, &m), &a) in out.iter_mut().zip(mask).zip(x) {
        *o = if m { a } else { 0.0 };
    }
}

/// The indicator of the kept count: 1 at `#kept`, 0 elsewhere (`d + 1`
/// slots).
fn kept_count_indicator(mask: &[bool], out: &mut [f64]) {
    out.fill(0.0);
    out[mask.iter().filter(|m| **m).count()] = 1.0;
}

/// The claims on two training passes over `x` at `rate`: the four raw
/// moments and the variance of each unit, the mean and the variance of the
/// sum `S`, in report order (10⁶ draws each).
pub fn at(x: &[f64], rate: Rate) -> Vec<DropoutClaim> {
    vec![
        raw_moment_claim(ids::MEAN, "E[z_k] = x_k", 1, x, rate),
        raw_moment_claim(ids::SECOND_MOMENT, "E[z_k^2] = x_k^2 / q", 2, x, rate),
        raw_moment_claim(ids::THIRD_MOMENT, "E[z_k^3] = x_k^3 / q^2", 3, x, rate),
        raw_moment_claim(ids::FOURTH_MOMENT, "E[z_k^4] = x_k^4 / q^3", 4, x, rate),
        unit_claim(
            ids::VARIANCE,
            "Var z_k = x_k^2 p / q",
            x,
            rate,
            unit_half_square_statistic(rate),
            |x, rate| Ok(per_unit(x, |a| f::unit_variance(a, rate))),
            unit_variance_oracle,
            |d, out| {
                for ((o, a), b) in out.iter_mut().zip(d.z).zip(d.z_alt) {
                    *o = half_squared_difference(*a, *b);
                }
            },
            fast::unit_pair_variances,
            range::unit_pair_form,
        ),
        sum_claim(
            ids::SUM_MEAN,
            "E[S] = sum_k x_k",
            x,
            rate,
            1_000_000,
            SumMoment::Mean,
        ),
        sum_claim(
            ids::SUM_VARIANCE,
            "Var S = (p/q) sum_k x_k^2",
            x,
            rate,
            1_000_000,
            SumMoment::Variance,
        ),
    ]
}

/// The worked case of the seeds ([`WORKED_X`], [`WORKED_P`]): the sum's
/// mean and variance, 2·10⁵ draws each.
fn worked_512(rate: Rate) -> [DropoutClaim; 2] {
    [
        sum_claim(
            ids::WORKED_512_MEAN,
            "d=512, x=1, p=0.5: E[S] = 512",
            &WORKED_X,
            rate,
            200_000,
            SumMoment::Mean,
        ),
        sum_claim(
            ids::WORKED_512_VARIANCE,
            "d=512, x=1, p=0.5: Var S = 512 (sd 22.63 = 4.42 % of E[S])",
            &WORKED_X,
            rate,
            200_000,
            SumMoment::Variance,
        ),
    ]
}

/// The kept count of `d` units equal to one at `rate`: its law
/// `Binomial(d, q)`, one indicator per count (10⁶ draws).
pub fn kept_count_at(d: usize, rate: Rate) -> DropoutClaim {
    let statistic = Statistic::Indicator { trials: 1 };
    DropoutClaim {
        card: Card::new(
            ids::KEPT_COUNT,
            FAMILY,
            "K = #kept ~ Binomial(d, q): P(K=k) = C(d,k) q^k p^(d-k)",
            Shape::Vector,
            1_000_000,
        )
        .with_statistic(statistic),
        x: vec![1.0; d],
        p: rate.p(),
        analytic: |x, rate| f::kept_count_pmf(x.len() as u64, rate),
        oracle: Some(|x, rate| enumerate_masks(x.len(), rate, x.len() + 1, kept_count_indicator)),
        draw_statistic: |d, out| kept_count_indicator(d.mask, out),
        fast: |x, p, b| fast::kept_count_pmf(x.len(), p, b),
        law: None,
        mean_statistic: statistic,
        range: range::indicators,
    }
}

/// The original (non-inverted) scheme's training output `m_k x_k` at `x`
/// and `rate`: its mean `q x_k`, the eval output (10⁶ draws).
pub fn original_scheme_at(x: &[f64], rate: Rate) -> DropoutClaim {
    unit_claim(
        ids::ORIGINAL_SCHEME,
        "original scheme: E_train[m_k x_k] = q x_k = eval output",
        x,
        rate,
        unit_statistic(rate),
        |x, rate| Ok(per_unit(x, |a| f::original_scheme_mean(a, rate))),
        |x, rate| enumerate_masks(x.len(), rate, x.len(), |mask, out| kept_units(x, mask, out)),
        |d, out| kept_units(d.x, d.mask, out),
        fast::original_scheme_means,
        range::original_units,
    )
}

/// The suite's rates are valid constants.
fn suite_rate(p: f64) -> Rate {
    Rate::new(p).expect("the suite's drop rates lie in [0, 1)")
}

/// The registry's claims: [`at`] the per-unit configuration, the worked
/// case, [`kept_count_at`] and [`original_scheme_at`] their configurations.
static CLAIMS: std::sync::LazyLock<Vec<DropoutClaim>> = std::sync::LazyLock::new(|| {
    let unit = suite_rate(UNIT_P);
    let mut claims = at(&UNIT_X, unit);
    claims.extend(worked_512(suite_rate(WORKED_P)));
    claims.push(kept_count_at(COUNT_X.len(), suite_rate(COUNT_P)));
    claims.push(original_scheme_at(&UNIT_X, unit));
    claims
});

/// The family's claims in report order (named and described in
/// [`super::families`]).
pub fn claims() -> Vec<&'static dyn Claim> {
    listed(&CLAIMS)
}
