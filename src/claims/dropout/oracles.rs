//! The exact values the claims are checked against: per unit by the
//! two-point law of a dropped-out unit, for a sum by the masks or, when
//! every unit is equal, by the kept count's binomial law.

use super::per_unit;
use crate::error::Error;
use crate::exact::{Oracle, sum_oracle, unit_expectation};
use crate::formulas::dropout as f;
use crate::ops::Rate;
use crate::stats::tolerance;

/// Roundings of the per-unit oracle `q · g(a/q) + p · g(0)` for the raw
/// moments `g(z) = z^r`, `r ≤ 4`: the division `a/q` (1), the power (at most
/// 3 multiplications, [`crate::formulas::ipow`]-style), the product by `q`
/// (1); `g(0) = 0`, so `p · g(0)` and the addition are exact. A chain of 5
/// roundings, charged as 6: relative error `γ_6` (Higham, Lemma 3.1).
const UNIT_ORACLE_ROUNDINGS: f64 = 6.0;

/// Roundings of the per-unit variance oracle `m2 − m1²`: `m2` carries `γ_6`,
/// `m1²` twice `m1`'s `γ_6` plus its own rounding, and the subtraction one
/// more; every term is at most `|m2|` (`m1² ≤ m2`), so the sum is at most
/// `(6 + 12 + 1 + 1) u |m2| = γ_20 |m2|` to first order.
const UNIT_VARIANCE_ROUNDINGS: f64 = 20.0;

pub(super) fn unit_oracle(x: &[f64], rate: Rate, g: impl Fn(f64) -> f64) -> Oracle {
    let values = per_unit(x, |a| unit_expectation(a, rate, &g));
    let rounding = values
        .iter()
        .map(|v| tolerance::bound(UNIT_ORACLE_ROUNDINGS, *v))
        .collect();
    Oracle { values, rounding }
}

/// The per-unit variance's exact value `m2 − m1²` from the raw-moment
/// oracles (rounding [`UNIT_VARIANCE_ROUNDINGS`]).
pub(super) fn unit_variance_oracle(x: &[f64], rate: Rate) -> Result<Oracle, Error> {
    let m1 = unit_oracle(x, rate, |z| z);
    let m2 = unit_oracle(x, rate, |z| z * z);
    let values: Vec<f64> = m2
        .values
        .iter()
        .zip(&m1.values)
        .map(|(b, a)| b - a * a)
        .collect();
    let rounding = m2
        .values
        .iter()
        .map(|v| tolerance::bound(UNIT_VARIANCE_ROUNDINGS, *v))
        .collect();
    Ok(Oracle { values, rounding })
}

/// The exact `E[S]` (or `Var S` when `variance`) of the sum of dropped-out
/// `x`: by the kept count alone when all units are equal (the worked case,
/// whose `2^512` masks cannot be enumerated), by enumerating the masks
/// ([`sum_oracle`]) otherwise.
pub(super) fn masked_sum_oracle(x: &[f64], rate: Rate, variance: bool) -> Result<Oracle, Error> {
    match x.first() {
        Some(&a) if x.iter().all(|&v| v == a) => equal_units_sum_oracle(x, a, rate, variance),
        _ => sum_oracle(x, rate, variance),
    }
}

/// All units equal `a`, so `S = K a / q` with `K ~ Binomial(d, q)`, and
/// `E[g(S)] = Σ_k P(K = k) g(k a / q)`.
pub(super) fn equal_units_sum_oracle(
    x: &[f64],
    a: f64,
    rate: Rate,
    variance: bool,
) -> Result<Oracle, Error> {
    let pmf = f::kept_count_pmf(x.len() as u64, rate)?;
    let (mut m1, mut m2, mut mag) = (0.0, 0.0, 0.0);
    for (k, w) in pmf.iter().enumerate() {
        let s = k as f64 * a / rate.q();
        m1 += w * s;
        m2 += w * s * s;
        mag += w * s * s;
    }
    // Each weight carries its own relative error; the sums over the
    // `d + 1` terms add the enumeration's count.
    let roundings =
        tolerance::enumeration_roundings(pmf.len() as f64, tolerance::EQUAL_UNITS_TERM_ROUNDINGS);
    let relative = tolerance::binomial_pmf_relative_error(x.len() as u64, rate.q())
        + tolerance::gamma_upper(roundings);
    let rounding = relative * mag.max(m1.abs());
    let raw = Oracle {
        values: vec![m1, m2],
        rounding: vec![rounding, rounding],
    };
    Ok(raw.mean_or_variance(variance))
}
