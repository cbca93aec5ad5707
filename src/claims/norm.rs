//! Machinery shared by the normalization families ([`super::layernorm`],
//! [`super::rmsnorm`], [`super::bypass`], [`super::compound`]): a claim type
//! over a dropout [`Site`], its sampler, its oracles, and the measurement of
//! a leading-order claim's gap as `d` grows.
//!
//! Each draw runs the subject's dropout layer through the site
//! (`y = h + Σ_j dropout(v_j)`), once, or twice independently when the
//! statistic is a variance (`(t − t')²/2`, see [`crate::engine::Sampler`]),
//! and then the crate's own LayerNorm / RMSNorm.

use super::{Claim, Kind, Shape};
use crate::engine::{Budget, Sampler, Stream, estimate};
use crate::error::Error;
use crate::exact::{Oracle, Pipeline, grouped_pipeline, site_expectation, site_pipeline};
use crate::ops::{LayerNorm, RmsNorm, Site, Subject, mean_and_variance};
use crate::stats::Estimate;

/// A configuration: the site and the norms applied after it.
#[derive(Debug, Clone)]
pub struct Config {
    pub site: Site,
    /// LayerNorm (LN1 for the compound site).
    pub ln: LayerNorm,
    /// LN2 of the compound site (unused elsewhere).
    pub ln2: LayerNorm,
    pub rms: RmsNorm,
}

impl Config {
    /// A configuration with plain norms (`γ = 1`, `β = 0`, `ε = 0`).
    pub fn plain(site: Site) -> Result<Self, Error> {
        let d = site.dim();
        Ok(Config {
            site,
            ln: LayerNorm::plain(d, 0.0)?,
            ln2: LayerNorm::plain(d, 0.0)?,
            rms: RmsNorm::new(vec![1.0; d], 0.0)?,
        })
    }

    fn pipeline(&self, stat: Stat) -> Option<Pipeline<'_>> {
        match stat {
            Stat::Ln => Some(Pipeline::Ln(&self.ln)),
            Stat::Rms => Some(Pipeline::Rms(&self.rms)),
            Stat::LnLn => Some(Pipeline::LnLn(&self.ln, &self.ln2)),
            _ => None,
        }
    }
}

/// The per-draw statistic of a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stat {
    /// `M = mean_k y_k`.
    M,
    /// `(M − M')²/2`, whose mean is `Var M`.
    VarM,
    /// `V = mean_k (y_k − M)²`.
    V,
    /// `R² = mean_k y_k²`.
    R2,
    /// `LN(y)`, per unit.
    Ln,
    /// `RMS(y)`, per unit.
    Rms,
    /// `LN2(LN1(y))`, per unit.
    LnLn,
}

impl Stat {
    fn dim(self, d: usize) -> usize {
        match self {
            Stat::Ln | Stat::Rms | Stat::LnLn => d,
            _ => 1,
        }
    }
}

/// A named alternative estimate of a leading-order claim (the uncorrected
/// output, the c1-only estimate).
pub type Baseline = (&'static str, fn(&Config) -> Result<Vec<f64>, Error>);

/// A claim of a normalization family.
pub struct NormClaim {
    pub id: &'static str,
    pub family: &'static str,
    pub formula: &'static str,
    pub kind: Kind,
    pub samples: u64,
    pub config: fn() -> Result<Config, Error>,
    pub stat: Stat,
    /// The closed form (the leading-order estimate for a leading-order claim).
    pub analytic: fn(&Config) -> Result<Vec<f64>, Error>,
    /// Weaker estimates the closed form must beat, best first.
    pub baselines: &'static [Baseline],
    /// The configuration of the same shape at width `d` (a multiple of 4),
    /// for measuring the gap as `d` grows on the grouped oracle.
    pub sweep: Option<fn(usize) -> Result<Config, Error>>,
}

impl NormClaim {
    /// The configuration.
    pub fn configuration(&self) -> Result<Config, Error> {
        (self.config)()
    }

    /// The exact value by full enumeration of the masks.
    pub fn exact(&self, config: &Config) -> Result<Oracle, Error> {
        let site = &config.site;
        if let Some(pipeline) = config.pipeline(self.stat) {
            return site_pipeline(site, pipeline);
        }
        let d = site.dim() as f64;
        let scalar = |f: fn(&[f64]) -> f64| -> Result<Oracle, Error> {
            let raw = site_expectation(site, 2, |y, out| {
                let t = f(y);
                out[0] = t;
                out[1] = t * t;
            })?;
            Ok(raw)
        };
        let raw = match self.stat {
            Stat::M | Stat::VarM => scalar(|y| mean_and_variance(y).0)?,
            Stat::V => scalar(|y| mean_and_variance(y).1)?,
            _ => scalar(|y| y.iter().map(|v| v * v).sum::<f64>() / y.len() as f64)?,
        };
        // Each statistic's own rounding per mask (a reduction over d units)
        // is at most own · Σ w |f|, and the enumeration's bound is at least
        // ε Σ w |f|, so inflating that bound by 1 + own/ε covers both.
        let own = (2.0 * d + 8.0) * f64::EPSILON;
        let widen = 1.0 + own / f64::EPSILON;
        let (r0, r1) = (raw.rounding[0] * widen, raw.rounding[1] * widen);
        if self.stat == Stat::VarM {
            let (m1, m2) = (raw.values[0], raw.values[1]);
            // E[M²] − E[M]²: both roundings, the square's, the subtraction's.
            let rounding = r1 + (2.0 * m1.abs() + r0) * r0 + 4.0 * f64::EPSILON * m2.abs();
            return Ok(Oracle {
                values: vec![m2 - m1 * m1],
                rounding: vec![rounding],
            });
        }
        Ok(Oracle {
            values: vec![raw.values[0]],
            rounding: vec![r0],
        })
    }

    /// The exact value by grouped enumeration of kept counts (per-unit
    /// statistics of one-term sites only).
    pub fn grouped(&self, config: &Config) -> Result<Oracle, Error> {
        match config.pipeline(self.stat) {
            Some(pipeline) => grouped_pipeline(&config.site, pipeline),
            None => Err(Error::Degenerate {
                what: format!("{} has no grouped oracle", self.id),
            }),
        }
    }
}

impl Claim for NormClaim {
    fn id(&self) -> &'static str {
        self.id
    }
    fn family(&self) -> &'static str {
        self.family
    }
    fn formula(&self) -> &'static str {
        self.formula
    }
    fn kind(&self) -> Kind {
        self.kind
    }
    fn shape(&self) -> Shape {
        match self.stat {
            Stat::Ln | Stat::Rms | Stat::LnLn => Shape::Vector,
            _ => Shape::Scalar,
        }
    }
    fn default_samples(&self) -> u64 {
        self.samples
    }
    fn analytic(&self) -> Result<Vec<f64>, Error> {
        (self.analytic)(&self.configuration()?)
    }
    fn oracle(&self) -> Result<Option<Oracle>, Error> {
        Ok(Some(self.exact(&self.configuration()?)?))
    }
    fn estimate(&self, subject: &Subject, budget: Budget) -> Result<Vec<Estimate>, Error> {
        let config = self.configuration()?;
        let sampler = SiteSampler {
            subject,
            config: &config,
            stat: self.stat,
        };
        Ok(estimate(&sampler, budget)?.estimates())
    }
    fn fast_estimate(&self, budget: Budget) -> Option<Result<Vec<Estimate>, Error>> {
        self.configuration()
            .and_then(|config| super::norm_fast::fast_estimates(&config, self.stat, budget))
            .transpose()
    }
    fn note(&self) -> Option<String> {
        if !matches!(self.kind, Kind::LeadingOrder { .. }) {
            return None;
        }
        Some(match leading_order_note(self) {
            Ok(text) => text,
            Err(e) => format!("gap not measured: {e}"),
        })
    }
}

fn leading_order_note(claim: &NormClaim) -> Result<String, Error> {
    let config = claim.configuration()?;
    let exact = claim.exact(&config)?;
    let mut text = format!(
        "gap at d = {}: {}",
        config.site.dim(),
        sci(mean_abs_gap(&(claim.analytic)(&config)?, &exact.values))
    );
    for (name, f) in claim.baselines {
        text.push_str(&format!(
            ", {name} {}",
            sci(mean_abs_gap(&f(&config)?, &exact.values))
        ));
    }
    if claim.sweep.is_some() {
        let curve = gap_curve(claim, &SWEEP_D)?;
        text.push_str(&format!(
            "; two-group sweep d = {}…{}: gap {} → {}, slope {:.3} (fit d ≥ {}, bound ±{:.3})",
            curve.d[0],
            curve.d[curve.d.len() - 1],
            sci(curve.gap[0]),
            sci(curve.gap[curve.gap.len() - 1]),
            curve.slope,
            curve.d[curve.fit_from],
            curve.tolerance
        ));
    }
    Ok(text)
}

fn sci(v: f64) -> String {
    format!("{v:.2e}")
}

/// `mean_k |a_k − b_k|`, the gap measure of the leading-order claims.
pub fn mean_abs_gap(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).sum::<f64>() / a.len() as f64
}

/// The widths of the gap measurement: `16, 32, …, 4096`.
pub const SWEEP_D: [usize; 9] = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096];
/// Index into [`SWEEP_D`] from which the slope is fitted (`d ≥ 512`).
pub const FIT_FROM: usize = 5;

/// A leading-order claim's gap to the exact (grouped) oracle as `d` grows.
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
    /// How far the fitted slope may sit from `−n` (see [`gap_curve`]).
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
}

/// Measures `claim`'s gap at each width in `ds` on the grouped oracle.
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
pub fn gap_curve(claim: &NormClaim, ds: &[usize]) -> Result<GapCurve, Error> {
    let sweep = claim.sweep.ok_or_else(|| Error::Degenerate {
        what: format!("{} has no sweep configuration", claim.id),
    })?;
    let order = match claim.kind {
        Kind::LeadingOrder { order } => order,
        Kind::Exact => 1,
    };
    let mut gap = Vec::with_capacity(ds.len());
    let mut rounding = Vec::with_capacity(ds.len());
    for &d in ds {
        let config = sweep(d)?;
        let oracle = claim.grouped(&config)?;
        let approx = (claim.analytic)(&config)?;
        gap.push(mean_abs_gap(&approx, &oracle.values));
        rounding.push(oracle.rounding.iter().sum::<f64>() / d as f64);
    }
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
    Ok(GapCurve {
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
    })
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

/// Draws the site through the subject's dropout and applies the statistic.
pub struct SiteSampler<'a> {
    pub subject: &'a Subject<'a>,
    pub config: &'a Config,
    pub stat: Stat,
}

/// Working buffers of [`SiteSampler`].
pub struct SiteScratch {
    y: Vec<f64>,
    y_alt: Vec<f64>,
    buf: Vec<f64>,
    tmp: Vec<f64>,
    mask: Vec<bool>,
}

impl Sampler for SiteSampler<'_> {
    type Scratch = SiteScratch;
    fn dim(&self) -> usize {
        self.stat.dim(self.config.site.dim())
    }
    fn scratch(&self) -> SiteScratch {
        let d = self.config.site.dim();
        SiteScratch {
            y: vec![0.0; d],
            y_alt: vec![0.0; d],
            buf: vec![0.0; d],
            tmp: vec![0.0; d],
            mask: vec![false; d],
        }
    }
    fn draw(&self, rng: &mut Stream, s: &mut SiteScratch, out: &mut [f64]) -> Result<(), Error> {
        let layer = self.subject.dropout;
        let site = &self.config.site;
        site.draw(layer, rng, &mut s.y, &mut s.buf, &mut s.mask)?;
        match self.stat {
            Stat::M => out[0] = mean_and_variance(&s.y).0,
            Stat::VarM => {
                site.draw(layer, rng, &mut s.y_alt, &mut s.buf, &mut s.mask)?;
                let diff = mean_and_variance(&s.y).0 - mean_and_variance(&s.y_alt).0;
                out[0] = 0.5 * diff * diff;
            }
            Stat::V => out[0] = mean_and_variance(&s.y).1,
            Stat::R2 => out[0] = s.y.iter().map(|v| v * v).sum::<f64>() / s.y.len() as f64,
            Stat::Ln => Pipeline::Ln(&self.config.ln).apply(&s.y, &mut s.tmp, out),
            Stat::Rms => Pipeline::Rms(&self.config.rms).apply(&s.y, &mut s.tmp, out),
            Stat::LnLn => {
                Pipeline::LnLn(&self.config.ln, &self.config.ln2).apply(&s.y, &mut s.tmp, out)
            }
        }
        Ok(())
    }
}

/// `d/4` units of `a` followed by `3d/4` units of `b` (`d` a multiple of 4,
/// at least 4): the two-group shape every sweep uses.
pub fn two_groups(d: usize, a: f64, b: f64) -> Result<Vec<f64>, Error> {
    if d < 4 || !d.is_multiple_of(4) {
        return Err(Error::Degenerate {
            what: format!("a sweep width must be a positive multiple of 4, not {d}"),
        });
    }
    Ok((0..d).map(|k| if k < d / 4 { a } else { b }).collect())
}
