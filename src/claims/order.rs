//! The order-of-error fit: how fast a leading-order claim's gap to its
//! exact oracle falls as the width `d` grows.
//!
//! A claim of order `n` promises `gap(d) = A/d^n + B/d^(n+1) + …`. Given the
//! gaps measured on an exact oracle at the widths [`SWEEP_D`] (the
//! measurement is the claim's own, [`NormClaim::gap_curve`]), [`GapCurve::fit`]
//! fits the log-log slope and the two-term model, and
//! [`GapCurve::check_order`] decides whether the curve falls like `1/d^n`.
//!
//! [`OrderCheck::judge`] turns a curve into the second half of a
//! leading-order claim's verdict (the first half is the z-test of the sampler
//! against the exact oracle): the closed form's error must be of the order the
//! claim states, and the closed form must beat the weaker estimate it
//! corrects.
//!
//! This module is a leaf: it reads nothing of the crate but the numbers it is
//! given (and the tolerances of [`crate::stats::tolerance`]), so the claims may use
//! it without an edge back to the verifier's outputs.
//!
//! [`NormClaim::gap_curve`]: crate::claims::norm::NormClaim::gap_curve

/// The widths of the gap measurement: `16, 32, …, 4096`.
pub const SWEEP_D: [usize; 9] = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096];
/// Index into [`SWEEP_D`] from which the slope is fitted (`d ≥ 512`).
pub const FIT_FROM: usize = 5;

use serde::Serialize;

use crate::stats::tolerance::{ORDER_REMAINDER_FACTOR, ORDER_SLOPE_RESOLUTION};

/// A leading-order claim's gap to the exact (grouped) oracle as `d` grows.
// Same shape as `ClaimResult`'s fields and `VariantResult` (series, then
// scalars), because each is a different record with no field in common.
#[derive(Debug, Clone)]
pub struct GapCurve {
    pub d: Vec<usize>,
    /// `mean_k |estimate_k − exact_k|` at each `d`.
    pub gap: Vec<f64>,
    /// Bound on the oracle's rounding in the same measure.
    pub rounding: Vec<f64>,
    /// `log2(gap(2d)/gap(d))`, between consecutive widths.
    pub local_slopes: Vec<f64>,
    /// Least-squares slope of `ln gap` on `ln d` over `d[fit_from..]`.
    pub slope: f64,
    pub fit_from: usize,
    /// `A`, `B` of the two-term model `d^n · gap(d) = A + B/d` (`n` the
    /// claim's order), fitted by least squares over the same widths as the
    /// slope.
    pub a: f64,
    pub b: f64,
    /// How far the fitted slope may sit from `−n` (see [`GapCurve::fit`]).
    pub tolerance: f64,
    /// The claim's order `n`: the gap should fall like `1/d^n`.
    pub order: u32,
}

impl GapCurve {
    /// The order test: `Ok` when the curve falls like `1/d^n` (`n` =
    /// [`order`](Self::order)), else the first reason it does not.
    ///
    /// * The bound must tell `−n` from the neighbouring simple rates
    ///   (`d^(−n ± 1/2)` are 1/2 away): it must be below half that distance,
    ///   and the fitted slope must sit within it of `−n`.
    /// * The two-term model `d^n · gap = A + B/d` must hold on the fitted
    ///   range: what it leaves (the `O(1/d²)` part of `d^n · gap`) is smaller
    ///   than its own correction `B/d₀` at the range's start.
    /// * The local slopes must converge to `−n`: each doubling of `d` brings
    ///   the local slope strictly closer (an `O(1/d)` deviation halves per
    ///   doubling).
    pub fn check_order(&self) -> Result<(), String> {
        let n = self.order as f64;
        if self.tolerance >= ORDER_SLOPE_RESOLUTION {
            return Err(format!(
                "slope {:.3} vs -{n}: the bound ±{:.3} is too wide to tell rates apart \
                 (the gap does not follow A/d^{n} + B/d^{})",
                self.slope,
                self.tolerance,
                self.order + 1
            ));
        }
        if (self.slope + n).abs() > self.tolerance {
            return Err(format!(
                "slope {} outside −{n} ± {}",
                self.slope, self.tolerance
            ));
        }
        let d0 = self.d[self.fit_from] as f64;
        for (&d, g) in self.d[self.fit_from..]
            .iter()
            .zip(&self.gap[self.fit_from..])
        {
            let d = d as f64;
            let residual = d.powi(self.order as i32) * g - (self.a + self.b / d);
            if residual.abs() > (self.b / d0).abs() {
                return Err(format!(
                    "at d = {d}: residual {residual:e} > B/d0 = {:e}",
                    self.b / d0
                ));
            }
        }
        let deviations: Vec<f64> = self.local_slopes.iter().map(|s| (s + n).abs()).collect();
        if !deviations.windows(2).all(|w| w[1] < w[0]) {
            return Err(format!(
                "local slopes {:?} do not converge",
                self.local_slopes
            ));
        }
        Ok(())
    }

    /// Fits the curve through `gap` (with the oracle's `rounding` in the
    /// same measure) at the widths `ds`, for a claim of order `order`.
    ///
    /// # The tolerance on the slope
    ///
    /// The oracle is exact (no sampling noise), so the only reasons the
    /// log-log slope differs from −1 are the next terms of the expansion and the
    /// oracle's rounding. With `gap(d) = A/d + B/d² + O(1/d³)`, the local slope
    /// is `−1 − (B/A)/d + O(1/d²)`; over the fitted range `d ≥ d₀` every local
    /// slope is within `|B/A|/d₀` of −1 to first order, so the least-squares
    /// slope is too. The tolerance is twice that
    /// ([`ORDER_REMAINDER_FACTOR`]: the factor 2 covers the `O(1/d²)`
    /// remainder, which [`check_order`](Self::check_order) checks is small by
    /// requiring the two-term model to fit), plus the rounding's share: a relative error `r`
    /// in each gap moves a slope fitted over a log-range `L` by at most `2r/L`.
    pub fn fit(ds: &[usize], gap: Vec<f64>, rounding: Vec<f64>, order: u32) -> GapCurve {
        let logd: Vec<f64> = ds.iter().map(|&d| (d as f64).ln()).collect();
        let logg: Vec<f64> = gap.iter().map(|g| g.ln()).collect();
        let local_slopes = (1..ds.len())
            .map(|i| (logg[i] - logg[i - 1]) / (logd[i] - logd[i - 1]))
            .collect();
        let fit_from = FIT_FROM.min(ds.len().saturating_sub(2));
        let slope = least_squares(&logd[fit_from..], &logg[fit_from..]).1;
        let inv: Vec<f64> = ds.iter().map(|&d| 1.0 / d as f64).collect();
        let scaled: Vec<f64> = ds
            .iter()
            .zip(&gap)
            .map(|(&d, g)| (d as f64).powi(order as i32) * g)
            .collect();
        let (a, b) = least_squares(&inv[fit_from..], &scaled[fit_from..]);
        let span = logd[logd.len() - 1] - logd[fit_from];
        let worst_rel_rounding = rounding
            .iter()
            .zip(&gap)
            .map(|(r, g)| r / g)
            .fold(0.0, f64::max);
        let tolerance = ORDER_REMAINDER_FACTOR * (b / a).abs() / ds[fit_from] as f64
            + 2.0 * worst_rel_rounding / span;
        GapCurve {
            d: ds.to_vec(),
            gap,
            rounding,
            local_slopes,
            slope,
            fit_from,
            a,
            b,
            tolerance,
            order,
        }
    }
}

/// The gaps of the weaker estimate a leading-order closed form corrects (the
/// uncorrected output for a first-order claim, the first-order formula for a
/// second-order one, the c1-only estimate for the compound claim), measured
/// against the same oracles as the claim's own gaps.
#[derive(Debug, Clone)]
pub struct Rival {
    pub name: &'static str,
    /// Its gap at the claim's own configuration.
    pub gap_at_d: f64,
    /// Its gap at each width of the sweep (the curve's `d`).
    pub gap: Vec<f64>,
}

/// The closed form's gap at the claim's own configuration (full enumeration).
#[derive(Debug, Clone, Copy)]
pub struct OwnGap {
    pub d: usize,
    /// `mean_k |closed form_k − exact_k|`.
    pub gap: f64,
    /// Bound on the oracle's rounding in the same measure.
    pub rounding: f64,
}

/// Pass or fail of an order check (it is exact arithmetic on exact oracles:
/// there is no inconclusive case).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OrderVerdict {
    Pass,
    Fail,
}

impl OrderVerdict {
    /// The name used in reports and JSON.
    pub fn label(self) -> &'static str {
        match self {
            OrderVerdict::Pass => "pass",
            OrderVerdict::Fail => "fail",
        }
    }
}

/// The order half of a leading-order claim's verdict (serialized as the
/// report's `order` object).
// Same shape as `GapCurve` (series, then scalars, then the verdict): a
// different record with no field in common.
#[derive(Debug, Clone, Serialize)]
pub struct OrderCheck {
    /// The stated order `n`: the error is `O(1/d^n)`.
    pub order: u32,
    /// The fitted log-log slope of the gap on the sweep (`d ≥ fit_from`).
    pub slope: f64,
    /// How far the slope may sit from `−n` ([`GapCurve::fit`]).
    pub bound: f64,
    /// The smallest width of the slope fit.
    pub fit_from: usize,
    /// The sweep's widths, first and last, with the gap at each.
    pub sweep_d: [usize; 2],
    pub sweep_gap: [f64; 2],
    /// The claim's own width and the closed form's gap there.
    pub d: usize,
    pub gap_at_d: f64,
    /// The weaker estimate the closed form must beat, and its gap at `d`.
    pub rival: Option<&'static str>,
    pub rival_gap_at_d: Option<f64>,
    pub verdict: OrderVerdict,
    /// The first reason the check fails.
    pub reason: Option<String>,
}

impl OrderCheck {
    /// Judges a closed form of order `n` from its sweep `curve`, its gap at
    /// its own configuration and the gaps of the `rival` it corrects.
    ///
    /// # The rule
    ///
    /// 1. **The order.** [`GapCurve::check_order`]: the fitted slope is
    ///    within [`GapCurve::tolerance`] of `−n`, the two-term model
    ///    `d^n · gap = A + B/d` holds on the fitted range, and the local
    ///    slopes converge to `−n`. A closed form whose error is `O(1/d^m)`
    ///    with `m ≠ n` (a missing or mis-scaled correction leaves an
    ///    `O(1)` or `O(1/d)` error) has a slope near `−m`, at least
    ///    1/2 away from `−n` for `m` an integer or half-integer, which the
    ///    bound (below [`ORDER_SLOPE_RESOLUTION`]) tells apart.
    /// 2. **It beats what it corrects.** At the claim's own width and at
    ///    every fitted width of the sweep (`d ≥ fit_from`, where rule 1 has
    ///    shown the expansion in its asymptotic regime, so the `A/d^n` term
    ///    dominates both the closed form's and the rival's gap), the
    ///    closed form's gap is below the rival's. Both gaps are measured
    ///    against the same oracle `ẽ` with `mean_k |ẽ_k − e_k| ≤ r` (its
    ///    rounding bound), so each measured gap is within `r` of the true
    ///    one, and `g̃ + r < g̃_rival − r` proves `g < g_rival`. A closed form
    ///    equal to its rival (the correction dropped) fails this at once.
    ///
    /// The closed forms' own rounding (a few ulp of values of order one)
    /// is far below the smallest gap compared (≈ 5·10⁻⁸ at `d = 4096` for
    /// second order), and is not charged.
    pub fn judge(curve: &GapCurve, own: OwnGap, rival: Option<&Rival>) -> OrderCheck {
        let last = curve.d.len() - 1;
        let reason = curve.check_order().err().or_else(|| {
            let r = rival?;
            if own.gap + own.rounding >= r.gap_at_d - own.rounding {
                return Some(format!(
                    "at d = {}: gap {:.3e} does not beat {} {:.3e}",
                    own.d, own.gap, r.name, r.gap_at_d
                ));
            }
            (curve.fit_from..curve.d.len()).find_map(|k| {
                let (g, rg, rnd) = (curve.gap[k], r.gap[k], curve.rounding[k]);
                (g + rnd >= rg - rnd).then(|| {
                    format!(
                        "at sweep d = {}: gap {g:.3e} does not beat {} {rg:.3e}",
                        curve.d[k], r.name
                    )
                })
            })
        });
        OrderCheck {
            order: curve.order,
            slope: curve.slope,
            bound: curve.tolerance,
            fit_from: curve.d[curve.fit_from],
            sweep_d: [curve.d[0], curve.d[last]],
            sweep_gap: [curve.gap[0], curve.gap[last]],
            d: own.d,
            gap_at_d: own.gap,
            rival: rival.map(|r| r.name),
            rival_gap_at_d: rival.map(|r| r.gap_at_d),
            verdict: if reason.is_some() {
                OrderVerdict::Fail
            } else {
                OrderVerdict::Pass
            },
            reason,
        }
    }

    /// True when the check passes.
    pub fn passed(&self) -> bool {
        self.verdict == OrderVerdict::Pass
    }

    /// One line for the report: the slope against its bound on the sweep,
    /// what the closed form beats, and the verdict (the gaps at the claim's
    /// own width are in the claim's note).
    pub fn summary(&self) -> String {
        let beats = match self.rival {
            Some(name) => format!(
                ", must beat {name} at d = {} and d ≥ {}",
                self.d, self.fit_from
            ),
            None => String::new(),
        };
        let verdict = match &self.reason {
            None => "pass".to_string(),
            Some(why) => format!("FAIL ({why})"),
        };
        format!(
            "order check O(1/d^{n}): slope {:.3} on d = {}…{} (bound -{n} ± {:.3}), sweep gap {:.2e} → {:.2e}{beats}: {verdict}",
            self.slope,
            self.fit_from,
            self.sweep_d[1],
            self.bound,
            self.sweep_gap[0],
            self.sweep_gap[1],
            n = self.order,
        )
    }
}

/// `(intercept, slope)` of the least-squares line through `(x, y)`.
fn least_squares(x: &[f64], y: &[f64]) -> (f64, f64) {
    let n = x.len() as f64;
    let mx = x.iter().sum::<f64>() / n;
    let my = y.iter().sum::<f64>() / n;
    let sxy: f64 = x.iter().zip(y).map(|(a, b)| (a - mx) * (b - my)).sum();
    let sxx: f64 = x.iter().map(|a| (a - mx) * (a - mx)).sum();
    let slope = sxy / sxx;
    (my - slope * mx, slope)
}
