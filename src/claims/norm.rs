//! Machinery shared by the normalization families ([`super::layernorm`],
//! [`super::rmsnorm`], [`super::bypass`], [`super::compound`]): a claim type
//! over a dropout [`Site`], its sampler, its oracles, and the measurement of
//! a leading-order claim's gap as `d` grows (the fit of that gap's order is
//! [`crate::claims::order`]).
//!
//! Each draw runs the subject's dropout layer through the site
//! (`y = h + Σ_j dropout(v_j)`), once, or twice independently when the
//! statistic is a variance (`(t − t')²/2`, see [`crate::engine::Sampler`]),
//! and then the crate's own LayerNorm / RMSNorm.

use super::norm_config::pair_form;
pub use super::norm_config::{Config, PAIR_DRAWS, Stat};
use super::{Card, Claim, Kind, Shape};
use crate::claims::order::{GapCurve, OrderCheck, OwnGap, Rival, SWEEP_D};
use crate::engine::{Budget, Sampler, Stream, estimate};
use crate::error::Error;
use crate::exact::{
    Oracle, grouped_pipeline, site_expectation, site_pipeline, variance_from_moments,
};
use crate::ops::{DropoutLayer, Site, Subject};
use crate::stats::tolerance;
use crate::stats::{DEFAULT_SKEWNESS, Estimate, Statistic};
use std::sync::OnceLock;

/// A named alternative estimate of a leading-order claim (the uncorrected
/// output, the c1-only estimate).
pub type Baseline = (&'static str, fn(&Config) -> Result<Vec<f64>, Error>);

/// A claim of a normalization family.
pub struct NormClaim {
    /// What it states.
    pub card: Card,
    pub config: fn() -> Result<Config, Error>,
    pub stat: Stat,
    /// The closed form (the leading-order estimate for a leading-order claim).
    pub analytic: fn(&Config) -> Result<Vec<f64>, Error>,
    /// Weaker estimates the closed form must beat, best first.
    pub baselines: &'static [Baseline],
    /// The configuration of the same shape at width `d` (a multiple of 4),
    /// for measuring the gap as `d` grows on the grouped oracle.
    pub sweep: Option<fn(usize) -> Result<Config, Error>>,
    /// The order check, computed once per claim (it enumerates the
    /// grouped oracle up to `d = 4096`); see [`NormClaim::order_check`].
    order: OnceLock<Result<OrderCheck, String>>,
    /// The skewness its mean test declares, computed once
    /// ([`NormClaim::declared_skewness`]).
    skewness: OnceLock<f64>,
}

/// A clone starts with no order check cached, so a clone whose closed form
/// is then replaced (see [`NormClaim::with_closed_form`]) is judged afresh.
impl Clone for NormClaim {
    fn clone(&self) -> Self {
        NormClaim {
            card: self.card,
            config: self.config,
            stat: self.stat,
            analytic: self.analytic,
            baselines: self.baselines,
            sweep: self.sweep,
            order: OnceLock::new(),
            skewness: OnceLock::new(),
        }
    }
}

impl NormClaim {
    /// An exact claim: the mean of `stat` over draws of `config()`'s site
    /// is `analytic`, per unit for the output statistics and one number
    /// otherwise; no baselines, no sweep (see
    /// [`leading_order`](NormClaim::leading_order)).
    pub fn new(
        id: &'static str,
        family: &'static str,
        formula: &'static str,
        samples: u64,
        config: fn() -> Result<Config, Error>,
        stat: Stat,
        analytic: fn(&Config) -> Result<Vec<f64>, Error>,
    ) -> Self {
        let shape = match stat {
            Stat::Ln | Stat::Rms | Stat::LnLn => Shape::Vector,
            _ => Shape::Scalar,
        };
        NormClaim {
            card: Card::new(id, family, formula, shape, samples),
            config,
            stat,
            analytic,
            baselines: &[],
            sweep: None,
            order: OnceLock::new(),
            skewness: OnceLock::new(),
        }
    }

    /// The same claim with another closed form (a variant formula, or a
    /// planted wrong one in a test of the verdict); its order check is
    /// measured afresh. Set the closed form this way rather than through
    /// the field, whose change would not reach an order check already
    /// computed.
    pub fn with_closed_form(self, analytic: fn(&Config) -> Result<Vec<f64>, Error>) -> Self {
        NormClaim {
            analytic,
            order: OnceLock::new(),
            ..self
        }
    }

    /// The same claim as a leading-order statement with error
    /// `O(1/d^order)`, whose gap is measured against `baselines` and along
    /// `sweep`.
    pub fn leading_order(
        self,
        order: u32,
        baselines: &'static [Baseline],
        sweep: fn(usize) -> Result<Config, Error>,
    ) -> Self {
        NormClaim {
            card: self.card.leading_order(order),
            baselines,
            sweep: Some(sweep),
            order: OnceLock::new(),
            ..self
        }
    }

    /// The configuration.
    pub fn configuration(&self) -> Result<Config, Error> {
        (self.config)()
    }

    /// The largest absolute skewness over the components of the statistic
    /// the estimator averages, from the exact law at the claim's own
    /// configuration ([`super::norm_moments::statistic_skewness`]); the
    /// registry default [`DEFAULT_SKEWNESS`] only if that enumeration
    /// fails (then the oracle fails too, and the claim with it).
    pub fn declared_skewness(&self) -> f64 {
        *self.skewness.get_or_init(|| {
            self.configuration()
                .and_then(|c| super::norm_moments::statistic_skewness(&c, self.stat))
                .map(|per| per.into_iter().fold(0.0_f64, |m, g| m.max(g.abs())))
                .unwrap_or(DEFAULT_SKEWNESS)
        })
    }

    /// The exact value by full enumeration of the masks.
    pub fn exact(&self, config: &Config) -> Result<Oracle, Error> {
        let site = &config.site;
        if let Some(pipeline) = config.pipeline(self.stat) {
            return site_pipeline(site, pipeline);
        }
        // A scalar statistic: its mean and its square's, for `Var M`.
        let mut t = [0.0];
        let raw = site_expectation(site, 2, |y, out| {
            config.per_draw(self.stat, y, &mut [], &mut t);
            out[0] = t[0];
            out[1] = t[0] * t[0];
        })?;
        // Each statistic's own rounding per mask (a reduction over d units)
        // is at most own · Σ w |f|, and the enumeration's bound is at least
        // ε Σ w |f|, so inflating that bound by 1 + own/ε covers both.
        let own = tolerance::first_order(tolerance::norm_statistic_roundings(site.dim()));
        let widen = 1.0 + own / tolerance::gamma_upper(1.0);
        let (r0, r1) = (raw.rounding[0] * widen, raw.rounding[1] * widen);
        if self.stat == Stat::VarM {
            let (m1, m2) = (raw.values[0], raw.values[1]);
            let (value, rounding) = variance_from_moments(m1, r0, m2, r1);
            return Ok(Oracle {
                values: vec![value],
                rounding: vec![rounding],
            });
        }
        Ok(Oracle {
            values: vec![raw.values[0]],
            rounding: vec![r0],
        })
    }

    /// The gap to the grouped oracle at each width in `ds`, fitted for the
    /// claim's order (see [`GapCurve::fit`]).
    pub fn gap_curve(&self, ds: &[usize]) -> Result<GapCurve, Error> {
        Ok(self.sweep_gaps(ds)?.0)
    }

    /// [`gap_curve`](Self::gap_curve) and the first baseline's gaps on the
    /// same oracles, in one enumeration per width.
    fn sweep_gaps(&self, ds: &[usize]) -> Result<(GapCurve, Vec<f64>), Error> {
        let sweep = self.sweep.ok_or_else(|| Error::Degenerate {
            what: format!("{} has no sweep configuration", self.card.id),
        })?;
        let order = match self.card.kind {
            Kind::LeadingOrder { order } => order,
            Kind::Exact => 1,
        };
        let mut gap = Vec::with_capacity(ds.len());
        let mut rounding = Vec::with_capacity(ds.len());
        let mut rival = Vec::with_capacity(ds.len());
        for &d in ds {
            let config = sweep(d)?;
            let oracle = self.grouped(&config)?;
            let approx = (self.analytic)(&config)?;
            gap.push(mean_abs_gap(&approx, &oracle.values));
            rounding.push(oracle.rounding.iter().sum::<f64>() / d as f64);
            if let Some((_, f)) = self.baselines.first() {
                rival.push(mean_abs_gap(&f(&config)?, &oracle.values));
            }
        }
        Ok((GapCurve::fit(ds, gap, rounding, order), rival))
    }

    /// The order half of a leading-order claim's verdict
    /// ([`OrderCheck::judge`]): on the sweep [`SWEEP_D`] the gap falls like
    /// `1/d^order`, and at the claim's own configuration and the fitted
    /// widths the closed form beats its first baseline. `None` for an
    /// exact claim or one without a sweep; computed once per claim.
    pub fn order_check(&self) -> Option<Result<OrderCheck, String>> {
        if !matches!(self.card.kind, Kind::LeadingOrder { .. }) || self.sweep.is_none() {
            return None;
        }
        Some(
            self.order
                .get_or_init(|| self.measure_order().map_err(|e| e.to_string()))
                .clone(),
        )
    }

    fn measure_order(&self) -> Result<OrderCheck, Error> {
        let (curve, rival_sweep) = self.sweep_gaps(&SWEEP_D)?;
        let config = self.configuration()?;
        let exact = self.exact(&config)?;
        let d = config.site.dim();
        let own = OwnGap {
            d,
            gap: mean_abs_gap(&(self.analytic)(&config)?, &exact.values),
            rounding: exact.rounding.iter().sum::<f64>() / exact.rounding.len() as f64,
        };
        let rival = match self.baselines.first() {
            Some((name, f)) => Some(Rival {
                name,
                gap_at_d: mean_abs_gap(&f(&config)?, &exact.values),
                gap: rival_sweep,
            }),
            None => None,
        };
        Ok(OrderCheck::judge(&curve, own, rival.as_ref()))
    }

    /// The exact value by grouped enumeration of kept counts (per-unit
    /// statistics of one-term sites only).
    pub fn grouped(&self, config: &Config) -> Result<Oracle, Error> {
        match config.pipeline(self.stat) {
            Some(pipeline) => grouped_pipeline(&config.site, pipeline),
            None => Err(Error::Degenerate {
                what: format!("{} has no grouped oracle", self.card.id),
            }),
        }
    }
}

impl Claim for NormClaim {
    fn card(&self) -> Card {
        self.card.with_statistic(Statistic::Mean {
            skewness: self.declared_skewness(),
        })
    }
    /// `Var M` is tested on pairs: one per draw on the generic path, but
    /// `⌊n/2⌋` of `n` masks on the fast path, so the pair form's minimum
    /// budget counts twice the masks (conservative by 2 on the generic
    /// path).
    fn min_samples(&self) -> u64 {
        let pairs = self.statistic().min_samples();
        match self.stat {
            Stat::VarM => PAIR_DRAWS * pairs,
            _ => pairs,
        }
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
    fn order_check(&self) -> Option<Result<OrderCheck, String>> {
        NormClaim::order_check(self)
    }
    /// Every normalization quantity has the site kernels' fast path.
    fn fast_path(&self) -> Option<super::FastPath> {
        Some(super::FastPath::NormSite)
    }
    /// Per component, the skewness of the statistic's exact law over every
    /// mask of the site ([`super::norm_moments::statistic_skewness`]); `Var
    /// M` is the mean of the fast path's `⌊n/2⌋` mask pairs.
    fn law(&self) -> super::Law {
        use super::{Draw, Estimator, Law};
        let estimator = match self.stat {
            Stat::VarM => Estimator::MeanOverPairs,
            _ => Estimator::Mean,
        };
        match self
            .configuration()
            .and_then(|c| super::norm_moments::statistic_skewness(&c, self.stat))
        {
            Ok(per) => Law::Draws {
                components: per.into_iter().map(Draw::Skewness).collect(),
                estimator,
            },
            Err(_) => Law::NoLaw {
                why: "the site's configuration or its enumeration over masks failed",
            },
        }
    }
    fn note(&self) -> Option<String> {
        if !matches!(self.card.kind, Kind::LeadingOrder { .. }) {
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
    Ok(text)
}

fn sci(v: f64) -> String {
    format!("{v:.2e}")
}

/// `mean_k |a_k − b_k|`, the gap measure of the leading-order claims.
pub fn mean_abs_gap(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).sum::<f64>() / a.len() as f64
}

/// Draws the site through the subject's dropout and applies the statistic.
pub struct SiteSampler<'a> {
    pub subject: &'a Subject<'a>,
    pub config: &'a Config,
    pub stat: Stat,
}

/// The buffers of one draw of a site through a dropout layer: the site's
/// output `y`, and the layer's output and mask for each term in turn.
pub struct SiteBuffers {
    y: Vec<f64>,
    term: Vec<f64>,
    mask: Vec<bool>,
}

impl SiteBuffers {
    /// Buffers for a site of width `d`.
    pub fn new(d: usize) -> Self {
        SiteBuffers {
            y: vec![0.0; d],
            term: vec![0.0; d],
            mask: vec![false; d],
        }
    }

    /// Draws `site` through `layer` (see [`Site::draw`]) and returns its
    /// output `y`.
    pub fn draw(
        &mut self,
        site: &Site,
        layer: &dyn DropoutLayer,
        rng: &mut Stream,
    ) -> Result<&[f64], Error> {
        site.draw(layer, rng, &mut self.y, &mut self.term, &mut self.mask)?;
        Ok(&self.y)
    }
}

/// Working buffers of [`SiteSampler`]: the draw's and the norm's.
pub struct SiteScratch {
    site: SiteBuffers,
    tmp: Vec<f64>,
}

impl Sampler for SiteSampler<'_> {
    type Scratch = SiteScratch;
    fn dim(&self) -> usize {
        self.stat.dim(self.config.site.dim())
    }
    fn scratch(&self) -> SiteScratch {
        let d = self.config.site.dim();
        SiteScratch {
            site: SiteBuffers::new(d),
            tmp: vec![0.0; d],
        }
    }
    fn draw(&self, rng: &mut Stream, s: &mut SiteScratch, out: &mut [f64]) -> Result<(), Error> {
        let (layer, site) = (self.subject.dropout, &self.config.site);
        let (config, stat) = (self.config, self.stat);
        config.per_draw(stat, s.site.draw(site, layer, rng)?, &mut s.tmp, out);
        if stat == Stat::VarM {
            let m = out[0];
            config.per_draw(stat, s.site.draw(site, layer, rng)?, &mut s.tmp, out);
            out[0] = pair_form(m, out[0]);
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
