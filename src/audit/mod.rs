//! Auditing a model's dropout→norm sites on captured activations.
//!
//! A *site* is a dropout whose output reaches a LayerNorm or RMSNorm
//! directly (`plain`: `norm(dropout(v))`), through one residual add
//! (`bypass`: `norm(h + dropout(v))`), or through a LayerNorm whose output
//! feeds a second LayerNorm directly (`compound`: `LN2(LN1(dropout(v)))`).
//! The capture holds, per token, the pre-dropout vector `v` and the bypass
//! `h` (zero for a plain or compound site), and the norm's `γ`, `β`, `ε`
//! (both norms' for a compound site). Per token [`token::token_values`]
//! (or [`token::compound_token_values`]) computes the truth, the evaluation
//! output and the first- and second-order estimates; [`audit_site`] runs the
//! tokens in parallel (one derived seed per token, so the bits do not depend
//! on the thread count) and [`gap::Gap`] summarises each estimate's distance
//! to the truth. [`audit_site_tokens`] audits a seeded uniform sample of the
//! tokens instead ([`budget`]: the gap's SE then includes the sampling
//! error), and [`audit_sites_within`] fits the sites into a time budget and
//! tells a [`progress`] observer.
//! `attention` audits the attention-dropout sites (dropout on a softmax
//! row) with the attention family's quantities.

pub(crate) mod attention;
pub mod budget;
mod capture;
pub mod estimate;
pub(crate) mod gap;
pub mod linear;
pub mod linear_attention;
#[cfg(feature = "cli")]
pub mod npz;
pub mod progress;
pub mod report;
pub(crate) mod shared;
pub(crate) mod token;

use rayon::prelude::*;
use serde::Serialize;

use crate::engine::{Budget, derive_seed};
use crate::error::Error;
use crate::ops::Rate;
pub use attention::{
    AttentionAudit, AttentionCapture, DEFAULT_ATTENTION_ROWS, DEFAULT_ATTENTION_SAMPLES,
    audit_attention_sites_rows,
};
pub use budget::{DEFAULT_TOKENS, Tokens};
pub use capture::{Form, SiteCapture};
pub use gap::Gap;
use progress::Progress;
pub use token::{EXACT_AUDIT_D, TokenValues, compound_token_values, token_values};

/// Masks per token of the audit's sampled sites by default, also the Python
/// audit's `DEFAULT_SAMPLES` (`python/dropmc/audit/__init__.py` reads it from the
/// extension as `_dropmc.AUDIT_DEFAULT_SAMPLES`): 2¹², 32 times fewer than
/// the 2¹⁷ that resolved every site's uncorrected gap of the 6-layer
/// d = 512 encoder of docs/audit.md without a control variate. The plain and
/// bypass sites' truth now carries the first-order control variate of
/// `ops::fast::surrogate`, which divides the per-mask variance by about
/// `d / (ρ² (p/q + 3 (q − p)²/(4 q²)))` (≈ 1000 at d = 768, p = 0.1,
/// ρ² = 1; docs/performance.md), so the truth's standard error at 2¹² is
/// still several times below the old one at 2¹⁷. A compound site has no
/// control variate: its resolution at 2¹² is that of 2¹² plain masks.
pub const DEFAULT_SAMPLES: u64 = 1 << 12;

/// The audit of one site.
#[derive(Debug, Clone, Serialize)]
pub struct SiteAudit {
    pub name: String,
    pub form: Form,
    pub norm: &'static str,
    pub p: f64,
    pub d: usize,
    /// Tokens audited (`tokens_total` when every token was).
    pub tokens: usize,
    /// The site's tokens.
    pub tokens_total: usize,
    /// The audited tokens' indices among the site's when they are a sample
    /// ([`budget`]); absent when every token was audited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_indices: Option<Vec<usize>>,
    /// Whether the truth was enumerated (at most `EXACT_AUDIT_D` mask
    /// bits) or sampled.
    pub exact: bool,
    /// Masks drawn per token: the samples asked for, or 0 where the truth
    /// was enumerated (no mask drawn, whatever was asked).
    pub samples: u64,
    /// The RMS gap of the evaluation output, the first and the second order
    /// (`None`, JSON `null`, where the site's form has no second-order
    /// closed form: the compound site).
    pub uncorrected: Gap,
    pub first_order: Gap,
    pub second_order: Option<Gap>,
    /// A compound site's c1-only estimate `LN2(ĉ1)` (corrects LN1's mean,
    /// ignores LN1's noise): what the first order improves on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub c1_only: Option<Gap>,
    /// A token-level mask's exact two-point expectation (what a correction
    /// applies there; its gap is rounding alone).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub two_point: Option<Gap>,
    /// How the mask is shared over the channels (absent: elementwise).
    /// Tokens that share a draw are correlated in one training forward;
    /// each token's truth here is its own expectation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mask: Option<String>,
    /// Whether the eval column is the model's own output (a corrected
    /// model's) rather than `norm(h + v)` recomputed from the capture.
    pub eval_from_model: bool,
    /// `uncorrected / first_order`: the factor the correction removes (a
    /// lower bound, from the first order's upper bound, when that gap is
    /// not resolved).
    pub factor: f64,
    pub factor_is_lower_bound: bool,
    /// The mean over tokens of `ρ² = v̄²/σ²` (a compound site: LN2's
    /// noise-to-signal `ρ²` of [`crate::formulas::compound`]).
    pub rho2: f64,
    /// The truth's RMS standard error per unit: the Monte Carlo resolution.
    pub resolution: f64,
    pub warnings: Vec<String>,
    /// The truth per token and unit (`tokens × d`), and its standard errors.
    #[serde(skip)]
    pub truth: Vec<f64>,
    #[serde(skip)]
    pub truth_se: Vec<f64>,
}

/// Below this many kept units per token (`d q`) the leading order is weak:
/// its error is `O(1/(d q))` of the correction (the mask-count fluctuation
/// `Var(kept)/E[kept]² = p/(d q)` enters at second order).
pub const FEW_KEPT_UNITS: f64 = 32.0;

/// Above this `(p/q) ρ²` the added noise exceeds the signal's spread and the
/// expansion in the noise-to-signal ratio is not small.
pub const LARGE_NOISE_TO_SIGNAL: f64 = 1.0;

/// Tokens per batch of [`audit_site`]: the calling thread asks the
/// cancellation hook ([`crate::engine::cancel`]) between batches, so Ctrl-C
/// in the Python binding stops a site within one batch (a few tenths of a
/// second at d = 768 and the default budget on two cores).
pub const TOKEN_BATCH: usize = 16;

/// Audits one site on every token: [`audit_site_tokens`] with
/// [`Tokens::All`].
pub fn audit_site(capture: &SiteCapture, samples: u64, seed: u64) -> Result<SiteAudit, Error> {
    audit_site_tokens(capture, samples, Tokens::All, seed)
}

/// Audits one site on the tokens `tokens` picks ([`budget`]: every token,
/// or a seeded uniform sample whose error the gaps' SEs include), in
/// parallel, each from the seed derived from `seed`, the site's name and the
/// token's index (so neither the sample, nor the batches of [`TOKEN_BATCH`]
/// tokens between which a cancellation is honoured, change a token's bits).
pub fn audit_site_tokens(
    capture: &SiteCapture,
    samples: u64,
    tokens: Tokens,
    seed: u64,
) -> Result<SiteAudit, Error> {
    let work = site_work(capture, samples, tokens);
    audit_site_within(
        capture,
        samples,
        tokens,
        None,
        &mut Progress::new(1, work),
        seed,
    )
}

/// A site's planned work in mask-units ([`progress`]).
fn site_work(capture: &SiteCapture, samples: u64, tokens: Tokens) -> f64 {
    (tokens.count(capture.tokens()) * capture.d) as f64 * samples as f64
}

/// [`audit_site_tokens`], stopping (when `seconds` is given, after the
/// first batch) before a batch that would end past `seconds` were it as
/// long as the batch before it: the tokens are visited in the seeded
/// random order of [`budget::order`], so the audited ones are a uniform
/// sample whatever their number (the table states it). Each batch is told
/// to `progress`.
fn audit_site_within(
    capture: &SiteCapture,
    samples: u64,
    tokens: Tokens,
    seconds: Option<f64>,
    progress: &mut Progress,
    seed: u64,
) -> Result<SiteAudit, Error> {
    let rate = Rate::new(capture.p)?;
    let d = capture.d;
    let site_seed = derive_seed(seed, &capture.name);
    let total = capture.tokens();
    let mut visit = if tokens == Tokens::All && seconds.is_none() {
        (0..total).collect()
    } else {
        budget::order(total, derive_seed(site_seed, "token sample"))
    };
    visit.truncate(tokens.count(total));
    let start = progress.elapsed();
    let mut done: Vec<(usize, TokenValues)> = Vec::with_capacity(visit.len());
    let mut last_batch = 0.0;
    for batch in visit.chunks(TOKEN_BATCH) {
        let batch_start = progress.elapsed();
        if seconds.is_some_and(|s| !done.is_empty() && batch_start - start + last_batch >= s) {
            break;
        }
        crate::engine::cancel::checkpoint()?;
        let carry = crate::engine::cancel::carry();
        let batch: Vec<(usize, TokenValues)> = batch
            .par_iter()
            .map(|&t| {
                let budget = Budget::new(samples, derive_seed(site_seed, &t.to_string()))?;
                Ok((t, carry.run(|| capture.token(t, rate, budget))?))
            })
            .collect::<Result<_, Error>>()?;
        progress.advance((batch.len() * d) as f64 * samples as f64, false);
        last_batch = progress.elapsed() - batch_start;
        done.extend(batch);
    }
    done.sort_unstable_by_key(|(t, _)| *t);
    let chosen: Vec<usize> = done.iter().map(|(t, _)| *t).collect();
    let values: Vec<TokenValues> = done.into_iter().map(|(_, v)| v).collect();
    let uncorrected = Gap::over(&values, |t| &t.eval);
    let first_order = Gap::over(&values, |t| &t.first);
    let second_order = Gap::over_optional(&values, |t| t.second.as_deref());
    let c1_only = Gap::over_optional(&values, |t| t.c1_only.as_deref());
    let two_point = Gap::over_optional(&values, |t| t.two_point.as_deref());
    let rho2 = values.iter().map(|t| t.rho2).sum::<f64>() / values.len() as f64;
    let resolution = (values
        .iter()
        .flat_map(|t| t.truth_se.iter().map(|s| s * s))
        .sum::<f64>()
        / (values.len() * d) as f64)
        .sqrt();
    let mut audit = SiteAudit {
        name: capture.name.clone(),
        form: capture.form,
        norm: capture.norm_name(),
        p: capture.p,
        d,
        tokens: values.len(),
        tokens_total: total,
        token_indices: (chosen.len() < total).then_some(chosen),
        exact: capture.truth_enumerated(),
        samples: if capture.truth_enumerated() {
            0
        } else {
            samples
        },
        factor: uncorrected.rms
            / if first_order.resolved {
                first_order.rms
            } else {
                first_order.upper
            },
        factor_is_lower_bound: !first_order.resolved,
        uncorrected,
        first_order,
        second_order,
        c1_only,
        two_point,
        mask: capture.mask_sharing(),
        eval_from_model: capture.eval_output.is_some(),
        rho2,
        resolution,
        warnings: Vec::new(),
        truth: values
            .iter()
            .flat_map(|t| t.truth.iter().copied())
            .collect(),
        truth_se: values
            .iter()
            .flat_map(|t| t.truth_se.iter().copied())
            .collect(),
    };
    audit.warnings = warnings(&audit, rate);
    Ok(audit)
}

/// Where the model's activations make the leading order weak, or the budget
/// too small to see the corrected gap.
fn warnings(a: &SiteAudit, rate: Rate) -> Vec<String> {
    let mut w = Vec::new();
    let kept = a.d as f64 * rate.q();
    if kept < FEW_KEPT_UNITS {
        w.push(format!(
            "few kept units (d q = {kept:.1} < {FEW_KEPT_UNITS}): the leading order is weak"
        ));
    }
    let noise = rate.odds() * a.rho2;
    if noise > LARGE_NOISE_TO_SIGNAL {
        w.push(format!(
            "large (p/q) rho^2 = {noise:.3} > {LARGE_NOISE_TO_SIGNAL}: the dropout noise \
             exceeds the signal's spread"
        ));
    }
    if a.second_order
        .is_some_and(|second| second.farther_than(&a.first_order))
    {
        w.push("the second order is farther from the truth than the first".into());
    }
    if let Some(why) = unresolved_reason(a) {
        w.push(why);
    }
    w
}

/// Why a site's first-order gap is only bounded, in the terms of what was
/// done: one token leaves no spread over tokens to take its standard error
/// from (the bound is infinite); an enumerated truth drew no mask, so only
/// more tokens could resolve it; a sampled one names its budget.
fn unresolved_reason(a: &SiteAudit) -> Option<String> {
    if a.first_order.resolved {
        return None;
    }
    Some(if a.tokens < 2 {
        "one token audited: no second token to estimate the gaps' standard error from, so \
         every gap is only bounded (by infinity); audit a site with two tokens or more"
            .into()
    } else if a.exact {
        format!(
            "first-order gap not resolved over {} tokens (the truth is enumerated, no mask was \
             sampled: the spread of the tokens' gaps bounds it, more tokens would resolve it, \
             not more samples)",
            a.tokens
        )
    } else {
        format!(
            "first-order gap not resolved at {} samples per token over {} tokens (an upper bound)",
            a.samples, a.tokens
        )
    })
}

/// Audits every site (in order) on every token, without a time budget.
pub fn audit_sites(
    captures: &[SiteCapture],
    samples: u64,
    seed: u64,
) -> Result<Vec<SiteAudit>, Error> {
    audit_sites_within(captures, samples, Tokens::All, None, seed)
}

/// Audits every site (in order) on the tokens `tokens` picks, within
/// `seconds` (when given): each site gets the
/// share of the time left that its planned work is of the work left, and
/// stops after the batch of tokens that ends past it (at least one batch,
/// `audit_site_within`), so a site may audit fewer tokens than `tokens`
/// (its row says how many). The progress observer ([`progress`]) is told
/// each batch. With a time budget the token counts depend on the machine's
/// speed; the bits of each audited token do not.
pub fn audit_sites_within(
    captures: &[SiteCapture],
    samples: u64,
    tokens: Tokens,
    seconds: Option<f64>,
    seed: u64,
) -> Result<Vec<SiteAudit>, Error> {
    progress::audit_in_turn(
        captures,
        |c| site_work(c, samples, tokens),
        seconds,
        |c, share, progress| {
            let audit = audit_site_within(c, samples, tokens, share, progress, seed)?;
            let done = (audit.tokens * c.d) as f64 * samples as f64;
            Ok((audit, Some(done)))
        },
    )
}

#[cfg(test)]
mod tests;
