//! The LayerNorm family: `E[M]`, `Var M`, `E[V]` (exact) and the corrected
//! estimate `β + c (LN(x) − β)` of `E[LN(z)]` (leading order). Derivations:
//! [`crate::formulas::layernorm`]; machinery: [`super::norm`].

use super::norm::{Baseline, Config, NormClaim, Stat, two_groups};
use super::{Claim, listed};
use crate::error::Error;
use crate::formulas::layernorm as f;
use crate::ops::{LayerNorm, Site};

/// Drop rate of the family.
pub const P: f64 = 0.3;
/// Width of the claims' configuration (full enumeration: 65 536 masks).
pub const D: usize = 16;
/// The two input values: `d/4` units of `A`, `3d/4` of `B` (`μ/σ ≈ 1.35`,
/// so the mean matters: `c = 0.60` against `√q = 0.84`).
pub const A: f64 = 2.0;
pub const B: f64 = 0.5;

/// The claims' configuration: `x` of two values, `γ`, `β` varying per unit.
pub fn config() -> Result<Config, Error> {
    let x = two_groups(D, A, B)?;
    let mut c = Config::plain(Site::plain(&x, P)?)?;
    c.ln = LayerNorm::new(gains(D), shifts(D), 0.0)?;
    Ok(c)
}

/// `γ_k = 1 + (k mod 3)/4`.
pub fn gains(d: usize) -> Vec<f64> {
    (0..d).map(|k| 1.0 + 0.25 * (k % 3) as f64).collect()
}

/// `β_k = (k mod 4)/10 − 0.15`.
pub fn shifts(d: usize) -> Vec<f64> {
    (0..d).map(|k| 0.1 * (k % 4) as f64 - 0.15).collect()
}

/// The same shape at width `d`, with plain LayerNorm.
pub fn sweep(d: usize) -> Result<Config, Error> {
    Config::plain(Site::plain(&two_groups(d, A, B)?, P)?)
}

const UNCORRECTED: &[Baseline] = &[("uncorrected LN(x)", |c| {
    f::uncorrected(&c.site.clean(), &c.ln)
})];

// A data table: each entry is one statement's id, formula, budget, statistic
// and closed form, so consecutive entries share their shape.
static CLAIMS: std::sync::LazyLock<Vec<NormClaim>> = std::sync::LazyLock::new(|| {
    vec![
        NormClaim::new(
            "layernorm.mean_of_m",
            "layernorm",
            "E[M] = mu",
            10_000_000,
            config,
            Stat::M,
            |c| Ok(vec![f::mean_of_m(&c.site.clean())?]),
        ),
        // Masks, two per draw of (M − M')²/2: 10⁷ pairs.
        NormClaim::new(
            "layernorm.var_of_m",
            "layernorm",
            "Var M = p (sigma^2 + mu^2) / (q d)",
            20_000_000,
            config,
            Stat::VarM,
            |c| c.scalar(f::variance_of_m),
        ),
        NormClaim::new(
            "layernorm.mean_of_v",
            "layernorm",
            "E[V] = (sigma^2 + p mu^2)/q - p (sigma^2 + mu^2)/(q d)",
            10_000_000,
            config,
            Stat::V,
            |c| c.scalar(f::mean_of_v),
        ),
        NormClaim::new(
            "layernorm.output",
            "layernorm",
            "E[LN(z)] ~ beta + c (LN(x) - beta), c = sqrt(q / (1 + p (mu/sigma)^2))",
            5_000_000,
            config,
            Stat::Ln,
            |c| {
                let (x, rate) = c.x_and_rate();
                f::corrected(&x, &c.ln, rate)
            },
        )
        .leading_order(1, UNCORRECTED, sweep),
    ]
});

/// The family's claims in report order (named and described in
/// [`super::families`]).
pub fn claims() -> Vec<&'static dyn Claim> {
    listed(&CLAIMS)
}

/// This family's claims with their concrete type (for tests that measure
/// gaps and sweeps).
pub fn norm_claims() -> &'static [NormClaim] {
    &CLAIMS
}
