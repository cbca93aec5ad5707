//! The RMSNorm family: `E[R²] = mean x²/q` (exact) and `√q · RMS(x)` as the
//! estimate of `E[RMS(z)]` (leading order). Derivations:
//! [`crate::formulas::rmsnorm`]; machinery: [`super::norm`].

use super::layernorm::{A, B, D, P, gains};
use super::norm::{Baseline, Config, NormClaim, Stat, two_groups};
use super::{Claim, listed};
use crate::error::Error;
use crate::formulas::rmsnorm as f;
use crate::ops::{RmsNorm, Site};

/// The LayerNorm family's `x` and `p`, with per-unit gains.
pub fn config() -> Result<Config, Error> {
    let x = two_groups(D, A, B)?;
    let mut c = Config::plain(Site::plain(&x, P)?)?;
    c.rms = RmsNorm::new(gains(D), 0.0)?;
    Ok(c)
}

/// The same shape at width `d`, with plain norms: the LayerNorm family's
/// sweep, whose plain RMSNorm this family reads.
pub use super::layernorm::sweep;

const UNCORRECTED: &[Baseline] = &[("uncorrected RMS(x)", |c| {
    f::uncorrected(&c.site.clean(), &c.rms)
})];

// Same shape as layernorm.rs's table: a normalization family is its
// uncorrected baseline and a data table of `NormClaim::new` entries.
static CLAIMS: std::sync::LazyLock<Vec<NormClaim>> = std::sync::LazyLock::new(|| {
    vec![
        NormClaim::new(
            "rmsnorm.mean_of_r2",
            "rmsnorm",
            "E[R^2] = mean_k x_k^2 / q",
            10_000_000,
            config,
            Stat::R2,
            |c| c.scalar(f::mean_of_r2),
        ),
        NormClaim::new(
            "rmsnorm.output",
            "rmsnorm",
            "E[RMSNorm(z)] ~ sqrt(q) RMSNorm(x)",
            5_000_000,
            config,
            Stat::Rms,
            |c| f::corrected(&c.site.clean(), &c.rms, c.site.terms()[0].1),
        )
        .leading_order(1, UNCORRECTED, sweep),
    ]
});

/// The family's claims in report order (named and described in
/// [`super::families`]).
pub fn claims() -> Vec<&'static dyn Claim> {
    listed(&CLAIMS)
}

/// This family's claims with their concrete type.
pub fn norm_claims() -> &'static [NormClaim] {
    &CLAIMS
}
