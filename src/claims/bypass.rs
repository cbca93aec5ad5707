//! The bypass family: `y = h + dropout(v)` and several dropped terms.
//! `E[V_y]` (exact, one and two terms) and `β + c_damped (LN(x) − β)` as the
//! estimate of `E[LN(y)]` (leading order). Derivations:
//! [`crate::formulas::bypass`]; machinery: [`super::norm`].

use super::layernorm::{D, P, gains, shifts};
use super::norm::{Baseline, Config, NormClaim, Stat, two_groups};
use super::{Claim, listed};
use crate::error::Error;
use crate::formulas::bypass as f;
use crate::ops::{LayerNorm, Site};

/// The bypass site at width `d`: `d/4` units with `h = 1, v = 0.5`, `3d/4`
/// with `h = −0.5, v = 1` (so `x` is 1.5 and 0.5, `ρ² = 2.5`).
pub fn site(d: usize) -> Result<Site, Error> {
    Site::new(
        two_groups(d, 1.0, -0.5)?,
        vec![(two_groups(d, 0.5, 1.0)?, P)],
    )
}

/// The claims' configuration: the bypass site at `d = 16` with per-unit
/// `γ`, `β`.
pub fn config() -> Result<Config, Error> {
    let mut c = Config::plain(site(D)?)?;
    c.ln = LayerNorm::new(gains(D), shifts(D), 0.0)?;
    Ok(c)
}

/// Two independently dropped terms at `d = 8` (16 mask bits in all):
/// `p1 = 0.2`, `p2 = 0.5`.
pub fn several_terms() -> Result<Config, Error> {
    let h = vec![0.5, -1.0, 0.2, 1.5, -0.3, 0.8, 0.0, 1.0];
    let v1 = vec![1.0, 0.4, -0.7, 0.0, 2.0, -1.1, 0.3, 0.6];
    let v2 = vec![-0.5, 1.2, 0.9, 0.4, 0.0, 0.7, -1.5, 0.2];
    Config::plain(Site::new(h, vec![(v1, 0.2), (v2, 0.5)])?)
}

const UNCORRECTED: &[Baseline] = &[("uncorrected LN(x)", |c| f::uncorrected(&c.site, &c.ln))];

static CLAIMS: std::sync::LazyLock<Vec<NormClaim>> = std::sync::LazyLock::new(|| {
    vec![
        NormClaim::new(
            "bypass.mean_of_v",
            "bypass",
            "y = h + dropout(v): E[V_y] = sigma^2 + (p/q) mean(v^2) (1 - 1/d)",
            10_000_000,
            config,
            Stat::V,
            |c| Ok(vec![f::mean_of_v(&c.site)?]),
        ),
        NormClaim::new(
            "bypass.several_terms_mean_of_v",
            "bypass",
            "y = h + sum_j dropout_pj(v_j): E[V_y] = sigma^2 + (1 - 1/d) sum_j (p_j/q_j) mean(v_j^2)",
            10_000_000,
            several_terms,
            Stat::V,
            |c| Ok(vec![f::mean_of_v(&c.site)?]),
        ),
        NormClaim::new(
            "bypass.output",
            "bypass",
            "E[LN(y)] ~ beta + c_damped (LN(x) - beta), c_damped = sqrt(q / (q + p rho^2))",
            5_000_000,
            config,
            Stat::Ln,
            |c| f::corrected(&c.site, &c.ln),
        )
        .leading_order(1, UNCORRECTED, |d| Config::plain(site(d)?)),
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
