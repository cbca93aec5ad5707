//! The skewness a normalization claim's mean test declares, per component,
//! from the exact law of its per-draw quantity over every mask of the site
//! ([`site_expectation`], the enumeration its oracle uses).
//!
//! The quantity is what one draw contributes before averaging: `M`, `V`,
//! `R²`, or unit `k` of the norm's output; for `Var M` the draw is the pair
//! form `(M − M′)²/2` of two independent masks, whose skewness follows from
//! `M`'s central moments ([`CentralMoments::pair_form_skewness`]). The
//! moments come from two passes of the enumeration
//! ([`central_moments_by`]).

use super::norm_config::{Config, Stat};
use crate::error::Error;
use crate::exact::{Pipeline, central_moments_by, site_expectation};
use crate::formulas::mean_and_variance;
use crate::stats::CentralMoments;

/// The per-draw quantity of `stat` at `y`, into `out` (`tmp` a scratch row).
fn quantity(config: &Config, stat: Stat, y: &[f64], tmp: &mut [f64], out: &mut [f64]) {
    match stat {
        Stat::M | Stat::VarM => out[0] = mean_and_variance(y).0,
        Stat::V => out[0] = mean_and_variance(y).1,
        Stat::R2 => out[0] = y.iter().map(|v| v * v).sum::<f64>() / y.len() as f64,
        Stat::Ln => Pipeline::Ln(&config.ln).apply(y, tmp, out),
        Stat::Rms => Pipeline::Rms(&config.rms).apply(y, tmp, out),
        Stat::LnLn => Pipeline::LnLn(&config.ln, &config.ln2).apply(y, tmp, out),
    }
}

/// Per component, the exact central moments of the quantity one mask of
/// the site gives (`M` itself for `Var M`).
pub fn quantity_moments(config: &Config, stat: Stat) -> Result<Vec<CentralMoments>, Error> {
    let d = config.site.dim();
    let dim = match stat {
        Stat::Ln | Stat::Rms | Stat::LnLn => d,
        _ => 1,
    };
    let mut tmp = vec![0.0; d];
    central_moments_by(
        dim,
        |y: &[f64], out: &mut [f64]| quantity(config, stat, y, &mut tmp, out),
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
