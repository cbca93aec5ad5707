//! The order-of-error fit: how fast a leading-order claim's gap to its
//! exact oracle falls as the width `d` grows.
//!
//! A claim of order `n` promises `gap(d) = A/d^n + B/d^(n+1) + …`. Given the
//! gaps measured on an exact oracle at the widths [`SWEEP_D`] (the
//! measurement is the claim's own, [`NormClaim::gap_curve`]), [`GapCurve::fit`]
//! fits the log-log slope and the two-term model, and
//! [`GapCurve::check_order`] decides whether the curve falls like `1/d^n`.
//!
//! This module is a leaf: it reads nothing of the crate but the numbers it is
//! given, so the claims' notes may use it without an edge back to the
//! verifier's outputs.
//!
//! [`NormClaim::gap_curve`]: crate::claims::norm::NormClaim::gap_curve

/// The widths of the gap measurement: `16, 32, …, 4096`.
pub const SWEEP_D: [usize; 9] = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096];
/// Index into [`SWEEP_D`] from which the slope is fitted (`d ≥ 512`).
pub const FIT_FROM: usize = 5;

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
        if self.tolerance >= 0.25 {
            return Err(format!(
                "bound {} too wide to tell rates apart",
                self.tolerance
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
    /// slope is too. The tolerance is twice that (the factor 2 covers the
    /// `O(1/d²)` remainder, which the tests check is small by requiring the
    /// two-term model to fit), plus the rounding's share: a relative error `r`
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
        let tolerance = 2.0 * (b / a).abs() / ds[fit_from] as f64 + 2.0 * worst_rel_rounding / span;
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
