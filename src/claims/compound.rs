//! The compound family: `dropout → LN1 → LN2`, estimated by
//! `β2 + c2 (LN2(ĉ1) − β2)` (leading order), which must beat the c1-only
//! `LN2(ĉ1)`, which must beat the uncorrected `LN2(LN1(x))`. Derivation:
//! [`crate::formulas::compound`]; machinery: [`super::norm`].

use super::layernorm::{A, B, D, P, gains, shifts};
use super::norm::{Baseline, Config, NormClaim, Stat, two_groups};
use super::{Claim, listed};
use crate::error::Error;
use crate::formulas::compound as f;
use crate::ops::{LayerNorm, Site};

/// The compound site at width `d`: the LayerNorm family's `x`, and LN1's
/// `γ1`, `β1` constant on each group (1.5, 0.2 on the `d/4` units of `A`;
/// 0.8, −0.1 on the others), LN2 plain.
pub fn sweep(d: usize) -> Result<Config, Error> {
    let x = two_groups(d, A, B)?;
    let mut c = Config::plain(Site::plain(&x, P)?)?;
    c.ln = LayerNorm::new(two_groups(d, 1.5, 0.8)?, two_groups(d, 0.2, -0.1)?, 0.0)?;
    Ok(c)
}

/// The claim's configuration at `d = 16`: four values of `x` (2, 0.5, −1,
/// 1, four units each) and per-unit `γ1`, `β1` (shifts up to ±0.75, so the
/// c1 correction matters), `γ2`, `β2`. (With only two
/// values LN2 would see a two-valued vector, which LayerNorm maps to the
/// same output whatever its scale and shift, so the c1-only estimate would
/// coincide with the uncorrected one; four values separate them. The sweep
/// keeps two groups, which the grouped oracle needs to reach `d = 4096`.)
pub fn config() -> Result<Config, Error> {
    let x: Vec<f64> = (0..D).map(|k| [2.0, 0.5, -1.0, 1.0][k / 4]).collect();
    let mut c = Config::plain(Site::plain(&x, P)?)?;
    let wide_shifts = shifts(D).iter().map(|b| 5.0 * b).collect();
    c.ln = LayerNorm::new(gains(D), wide_shifts, 0.0)?;
    let reversed = |v: Vec<f64>| v.into_iter().rev().collect::<Vec<f64>>();
    c.ln2 = LayerNorm::new(reversed(gains(D)), reversed(shifts(D)), 0.0)?;
    Ok(c)
}

const BASELINES: &[Baseline] = &[
    ("c1-only LN2(c1_hat)", |c| {
        let (x, rate) = c.x_and_rate();
        f::c1_only(&x, &c.ln, &c.ln2, rate)
    }),
    ("uncorrected LN2(LN1(x))", |c| {
        f::uncorrected(&c.site.clean(), &c.ln, &c.ln2)
    }),
];

static CLAIMS: std::sync::LazyLock<Vec<NormClaim>> = std::sync::LazyLock::new(|| {
    vec![
        NormClaim::new(
            "compound.output",
            "compound",
            "E[LN2(LN1(z))] ~ beta2 + c2 (LN2(c1_hat) - beta2), c2 = sqrt(q / (q + p rho^2))",
            5_000_000,
            config,
            Stat::LnLn,
            |c| {
                let (x, rate) = c.x_and_rate();
                f::corrected(&x, &c.ln, &c.ln2, rate)
            },
        )
        .leading_order(1, BASELINES, sweep),
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
