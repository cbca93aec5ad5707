//! One token of one site: the truth `E[norm(h + dropout(v))]`, the
//! evaluation output `norm(h + v)`, the first- and second-order estimates
//! (and a compound site's `LN2(LN1(·))` versions of each).
//!
//! # What is computed, per form
//!
//! With `x = h + v` the evaluation input (`h = 0` for a plain site):
//!
//! ```text
//! truth   E[norm(h + m ⊙ v / q)]   exact enumeration when d ≤ EXACT_AUDIT_D,
//!                                   else the fast site sampler (with SE)
//! eval    norm(x)
//! first   LayerNorm, plain:  β + c_ε(μ, σ) (LN(x) − β)       formulas::layernorm
//!         LayerNorm, bypass: β + c_damped (LN(x) − β)         formulas::bypass
//!         RMSNorm, either:   γ x / sqrt(E[A] + ε)             (see below)
//! second  formulas::second_order on the units h_k + m_k v_k / q
//! ```
//!
//! The RMSNorm first order: replacing `A = mean_k y_k²` by its exact mean
//! `E[A] = mean_k (x_k² + (p/q) v_k²)` in `γ_k y_k / sqrt(A + ε)` and using
//! `E[y_k] = x_k` gives `γ_k x_k / sqrt(E[A] + ε)`. For a plain site
//! (`v = x`) `E[A] = r²/q` and this is `c_rms · RMS(x)` of
//! [`crate::formulas::rmsnorm::corrected`]; with a bypass it is the same
//! step with the bypass noise `(p/q) v̄²` (the RMSNorm analogue of
//! `c_damped`). `E[A]` is [`NoisyUnits::mean_square`].
//!
//! # The compound site `LN2(LN1(dropout(v)))`
//!
//! ```text
//! truth   E[LN2(LN1(m ⊙ v / q))]   exact enumeration when d ≤ EXACT_AUDIT_D,
//!                                   else the fast compound sampler (with SE)
//! eval    LN2(LN1(v))
//! first   β2 + c2 (LN2(ĉ1) − β2)   formulas::compound::corrected (c1 and c2)
//! c1 only LN2(ĉ1)                  formulas::compound::c1_only (LN1's mean
//!                                   corrected, LN1's noise ignored)
//! second  none: formulas::second_order has no closed form for LN → LN
//! ```

use crate::engine::Budget;
use crate::error::Error;
use crate::exact::site_expectation;
use crate::formulas::second_order::{self as so, NoisyUnits};
use crate::formulas::{bypass, compound, layernorm};
use crate::ops::fast::{FastCompound, FastSite};
use crate::ops::{AnyNorm, LayerNorm, Rate, Site};
use crate::stats::Estimate;

/// The largest width whose truth is enumerated exactly (`2^d` masks).
pub const EXACT_AUDIT_D: usize = 16;

/// The values of one token (each of the site's width).
#[derive(Debug, Clone, PartialEq)]
pub struct TokenValues {
    /// `E[norm(h + dropout(v))]`.
    pub truth: Vec<f64>,
    /// The standard error of `truth` per unit (0 when enumerated).
    pub truth_se: Vec<f64>,
    /// `norm(h + v)`.
    pub eval: Vec<f64>,
    /// The first-order estimate.
    pub first: Vec<f64>,
    /// The second-order estimate (`None` where no closed form exists).
    pub second: Option<Vec<f64>>,
    /// A compound site's c1-only estimate `LN2(ĉ1)`.
    pub c1_only: Option<Vec<f64>>,
    /// A token-level mask's exact two-point expectation
    /// (`super::shared`).
    pub two_point: Option<Vec<f64>>,
    /// `ρ² = v̄²/σ²` of the token (`σ²` the spread of `x`); a compound
    /// site's is LN2's `ρ²` of [`compound::Compound`].
    pub rho2: f64,
}

impl TokenValues {
    /// A token with its truth `(truth, truth_se)`, eval output and first
    /// order only (no second-order, c1-only or two-point estimate): what
    /// every site form fills in its own extras over.
    pub fn first_order(
        (truth, truth_se): (Vec<f64>, Vec<f64>),
        eval: Vec<f64>,
        first: Vec<f64>,
        rho2: f64,
    ) -> TokenValues {
        TokenValues {
            truth,
            truth_se,
            eval,
            first,
            second: None,
            c1_only: None,
            two_point: None,
            rho2,
        }
    }
}

/// The token `y = h + dropout_p(v)` through `norm`; `bypass` says which
/// first-order form applies (a plain site has `h = 0`).
pub fn token_values(
    h: &[f64],
    v: &[f64],
    rate: Rate,
    norm: &AnyNorm,
    is_bypass: bool,
    budget: Budget,
) -> Result<TokenValues, Error> {
    let d = v.len();
    let site = Site::new(h.to_vec(), vec![(v.to_vec(), rate.p())])?;
    let x = site.clean();
    let units = NoisyUnits::from_site(&site)?;
    let mut eval = vec![0.0; d];
    norm.forward(&x, &mut eval)?;
    let (first, second) = match norm {
        AnyNorm::Layer(ln) => {
            let first = if is_bypass {
                bypass::corrected(&site, ln)?
            } else {
                layernorm::corrected(&x, ln, rate)?
            };
            let second = so::layer_norm_expectation(&units, ln.gamma(), ln.beta(), ln.eps())?;
            (first, second)
        }
        AnyNorm::Rms(rms) => {
            let scale = (units.mean_square() + rms.eps()).sqrt();
            let first: Vec<f64> = x
                .iter()
                .zip(rms.gamma())
                .map(|(a, g)| g * a / scale)
                .collect();
            let first = crate::formulas::representable("the corrected RMSNorm output", first)?;
            let second = so::rms_norm_expectation(&units, rms.gamma(), rms.eps())?;
            (first, second)
        }
    };
    let truth = truth(&site, norm, budget)?;
    let (_, s2) = crate::ops::mean_and_variance(&x);
    let v2 = v.iter().map(|a| a * a).sum::<f64>() / d as f64;
    let rho2 = if s2 > 0.0 { v2 / s2 } else { f64::INFINITY };
    Ok(TokenValues {
        second: Some(second),
        ..TokenValues::first_order(truth, eval, first, rho2)
    })
}

/// The token `LN2(LN1(dropout_p(v)))` of a compound site (module docs).
pub fn compound_token_values(
    v: &[f64],
    rate: Rate,
    ln1: &LayerNorm,
    ln2: &LayerNorm,
    budget: Budget,
) -> Result<TokenValues, Error> {
    let d = v.len();
    let parts = compound::compound(v, ln1, ln2, rate)?;
    let first = compound::corrected(v, ln1, ln2, rate)?;
    let c1_only = compound::c1_only(v, ln1, ln2, rate)?;
    let eval = compound::uncorrected(v, ln1, ln2)?;
    let truth = if d <= EXACT_AUDIT_D {
        let site = Site::new(vec![0.0; d], vec![(v.to_vec(), rate.p())])?;
        let mut u = vec![0.0; d];
        let oracle = site_expectation(&site, d, |y, out| {
            // The inputs were validated: both norms of a finite vector are defined.
            let _ = ln1.forward(y, &mut u);
            let _ = ln2.forward(&u, out);
        })?;
        (oracle.values, vec![0.0; d])
    } else {
        let zeros = vec![0.0; d];
        match FastCompound::new(v, rate.p(), ln1, ln2, &zeros, &zeros)?.estimate(budget)? {
            Some(e) => sampled_truth(&e.out),
            None => return Err(unsampleable()),
        }
    };
    Ok(TokenValues {
        c1_only: Some(c1_only),
        ..TokenValues::first_order(truth, eval, first, parts.rho2)
    })
}

/// A sampled truth `(truth, truth_se)` from its per-unit estimates.
pub fn sampled_truth(estimates: &[Estimate]) -> (Vec<f64>, Vec<f64>) {
    (
        estimates.iter().map(|e| e.value).collect(),
        estimates.iter().map(|e| e.stderr).collect(),
    )
}

/// A token the fast samplers refuse.
fn unsampleable() -> Error {
    Error::Unsupported {
        what: "a token whose masks the fast sampler cannot run (a near-constant input \
               or fewer than 129 samples): raise samples or drop the token"
            .into(),
    }
}

/// `E[norm(y)]` per unit and its standard error: enumerated for
/// `d ≤ EXACT_AUDIT_D`, else the fast site sampler.
fn truth(site: &Site, norm: &AnyNorm, budget: Budget) -> Result<(Vec<f64>, Vec<f64>), Error> {
    let d = site.dim();
    if d <= EXACT_AUDIT_D {
        let oracle = site_expectation(site, d, |y, out| {
            // The site's inputs were validated: the norm of a finite vector is defined.
            let _ = norm.forward(y, out);
        })?;
        return Ok((oracle.values, vec![0.0; d]));
    }
    let kernel = FastSite::new(site, norm, true)?.with_control_variate(site);
    match kernel.estimate(budget)? {
        Some(e) => Ok(sampled_truth(&e.out)),
        None => Err(unsampleable()),
    }
}
