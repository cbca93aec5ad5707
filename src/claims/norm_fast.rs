//! The normalization claims on the fast path: each [`Stat`] of a
//! [`Config`] as one run of [`FastSite`] (the bit-mask kernel of the site
//! and its norm); `LN2(LN1(y))` as one run of [`FastCompound`] (plain
//! dropout sites only).
//!
//! A statistic falls back to the per-element path ([`super::norm::SiteSampler`])
//! exactly when the kernel returns `None` (see [`FastSite::estimate`]: too
//! few masks for batch means, an overflowing input, or a mask whose `V + ε`
//! is too close to zero for the table sums to resolve it, which includes a
//! constant `y` with several dropped terms and `ε = 0`).

use super::norm_config::{Config, Stat};
use crate::engine::Budget;
use crate::error::Error;
use crate::ops::AnyNorm;
use crate::ops::fast::{FastCompound, FastSite};
use crate::stats::Estimate;

/// The fast estimate of `stat` on `config`, or `None` where the fast path
/// does not apply.
pub fn fast_estimates(
    config: &Config,
    stat: Stat,
    budget: Budget,
) -> Result<Option<Vec<Estimate>>, Error> {
    let (norm, per_channel) = match stat {
        Stat::M | Stat::VarM | Stat::V => (AnyNorm::Layer(config.ln.clone()), false),
        Stat::R2 => (AnyNorm::Rms(config.rms.clone()), false),
        Stat::Ln => (AnyNorm::Layer(config.ln.clone()), true),
        Stat::Rms => (AnyNorm::Rms(config.rms.clone()), true),
        Stat::LnLn => return compound(config, budget),
    };
    let Some(e) = FastSite::new(&config.site, &norm, per_channel)?.estimate(budget)? else {
        return Ok(None);
    };
    Ok(Some(match stat {
        Stat::M => vec![e.mean],
        Stat::VarM => vec![e.var_of_mean],
        Stat::V => vec![e.var],
        Stat::R2 => vec![e.r2],
        _ => e.out,
    }))
}

/// `E[LN2(LN1(y))]` on the compound kernel (`y` plain dropout, `h = 0`, one
/// term), else `None`.
fn compound(config: &Config, budget: Budget) -> Result<Option<Vec<Estimate>>, Error> {
    let site = &config.site;
    let [(x, rate)] = site.terms() else {
        return Ok(None);
    };
    if site.h().iter().any(|&h| h != 0.0) {
        return Ok(None);
    }
    let zeros = vec![0.0; site.dim()];
    let kernel = FastCompound::new(x, rate.p(), &config.ln, &config.ln2, &zeros, &zeros)?;
    Ok(kernel.estimate(budget)?.map(|e| e.out))
}
