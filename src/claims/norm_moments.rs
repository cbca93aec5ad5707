//! The skewness a normalization claim's mean test declares, per component,
//! from the exact law of its per-draw quantity over every mask of the site
//! ([`site_expectation`], the enumeration its oracle uses), of the one
//! per-draw function the sampler uses (`Config::per_draw`).
//!
//! The quantity is what one draw contributes before averaging: `M`, `V`,
//! `R²`, or unit `k` of the norm's output; for `Var M` the draw is the pair
//! form `(M − M′)²/2` of two independent masks, whose skewness follows from
//! `M`'s central moments ([`CentralMoments::pair_form_skewness`]). The
//! moments come from two passes of the enumeration
//! ([`central_moments_by`]).

use super::norm_config::{Config, Stat};
use crate::error::Error;
use crate::exact::{central_moments_by, site_expectation};
use crate::stats::CentralMoments;

/// Per component, the exact central moments of the quantity one mask of
/// the site gives (`M` itself for `Var M`).
pub fn quantity_moments(config: &Config, stat: Stat) -> Result<Vec<CentralMoments>, Error> {
    let d = config.site.dim();
    let mut tmp = vec![0.0; d];
    central_moments_by(
        stat.dim(d),
        |y: &[f64], out: &mut [f64]| config.per_draw(stat, y, &mut tmp, out),
        |dim, f| site_expectation(&config.site, dim, f),
    )
}

/// Per component, the skewness of the statistic the claim's estimator
/// averages: the quantity's own, or its pair form's for `Var M`.
pub fn statistic_skewness(config: &Config, stat: Stat) -> Result<Vec<f64>, Error> {
    Ok(quantity_moments(config, stat)?
        .iter()
        .map(|c| match stat {
            Stat::VarM => c.pair_form_skewness(),
            _ => c.skewness(),
        })
        .collect())
}
