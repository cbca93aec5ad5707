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
//! to the truth.
//! `attention` audits the attention-dropout sites (dropout on a softmax
//! row) with the attention family's quantities.

pub(crate) mod attention;
mod capture;
pub(crate) mod gap;
pub mod linear;
pub mod linear_attention;
#[cfg(feature = "cli")]
pub mod npz;
pub mod report;
pub(crate) mod shared;
pub(crate) mod token;

use rayon::prelude::*;
use serde::Serialize;

use crate::engine::{Budget, derive_seed};
use crate::error::Error;
use crate::formulas::shared_mask::MaskGroups;
use crate::ops::Rate;
pub use attention::{
    AttentionAudit, AttentionCapture, DEFAULT_ATTENTION_SAMPLES, audit_attention_sites,
};
pub use capture::{Form, SiteCapture};
pub use gap::Gap;
pub use token::{EXACT_AUDIT_D, TokenValues, compound_token_values, token_values};

/// Masks per token of the audit's sampled sites by default, also the Python
/// audit's `DEFAULT_SAMPLES` (`python/dropmc/audit.py` reads it from the
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
    pub tokens: usize,
    /// Whether the truth was enumerated (`d ≤ EXACT_AUDIT_D`) or sampled.
    pub exact: bool,
    /// Samples (masks) per token.
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

/// Audits one site: every token in parallel, each from the seed derived from
/// `seed`, the site's name and the token's index (so the batches of
/// [`TOKEN_BATCH`] tokens, between which a cancellation is honoured, do not
/// change the bits).
pub fn audit_site(capture: &SiteCapture, samples: u64, seed: u64) -> Result<SiteAudit, Error> {
    let rate = Rate::new(capture.p)?;
    let d = capture.d;
    let site_seed = derive_seed(seed, &capture.name);
    let tokens = capture.tokens();
    let mut values: Vec<TokenValues> = Vec::with_capacity(tokens);
    for first in (0..tokens).step_by(TOKEN_BATCH) {
        crate::engine::cancel::checkpoint()?;
        let batch: Vec<TokenValues> = (first..(first + TOKEN_BATCH).min(tokens))
            .into_par_iter()
            .map(|t| {
                let budget = Budget::new(samples, derive_seed(site_seed, &t.to_string()))?;
                capture.token(t, rate, budget)
            })
            .collect::<Result<_, Error>>()?;
        values.extend(batch);
    }
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
        exact: capture.mask_groups.as_ref().map_or(d, MaskGroups::count) <= EXACT_AUDIT_D,
        samples,
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
    if !a.first_order.resolved {
        w.push(format!(
            "first-order gap not resolved at {} samples per token (an upper bound)",
            a.samples
        ));
    }
    w
}

/// Audits every site (in order).
pub fn audit_sites(
    captures: &[SiteCapture],
    samples: u64,
    seed: u64,
) -> Result<Vec<SiteAudit>, Error> {
    captures
        .iter()
        .map(|c| audit_site(c, samples, seed))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capture(d: usize, tokens: usize) -> SiteCapture {
        let v: Vec<f64> = (0..d * tokens)
            .map(|i| ((i * 37 % 11) as f64 - 5.0) / 3.0)
            .collect();
        let h: Vec<f64> = (0..d * tokens)
            .map(|i| ((i * 13 % 7) as f64 - 3.0) / 2.0)
            .collect();
        SiteCapture::new(
            "s".into(),
            Form::Bypass,
            0.2,
            d,
            v,
            h,
            true,
            vec![1.0; d],
            vec![0.0; d],
            1e-5,
        )
        .unwrap()
    }

    #[test]
    fn same_bits_on_any_thread_count() {
        let c = capture(64, 6);
        let on = |threads: usize| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| audit_site(&c, 4096, 9).unwrap())
        };
        let (one, two) = (on(1), on(2));
        assert_eq!(one.truth, two.truth);
        assert_eq!(one.truth_se, two.truth_se);
        assert!(!one.exact && one.truth_se.iter().all(|s| *s > 0.0));
    }

    #[test]
    fn enumerated_truth_has_no_noise_and_the_correction_helps() {
        let a = audit_site(&capture(12, 4), 4096, 1).unwrap();
        assert!(a.exact && a.truth_se.iter().all(|s| *s == 0.0));
        assert!(a.first_order.rms < a.uncorrected.rms);
    }

    #[test]
    fn a_compound_site_is_enumerated_with_c2_and_has_no_second_order() {
        let plain = capture(16, 4);
        let v = plain.v.clone();
        let compound = SiteCapture::new(
            "c".into(),
            Form::Plain,
            0.2,
            16,
            v,
            vec![],
            true,
            (0..16).map(|k| 0.5 + k as f64 / 16.0).collect(),
            vec![0.1; 16],
            1e-5,
        )
        .and_then(|c| {
            c.into_compound(
                vec![1.5; 16],
                (0..16).map(|k| k as f64 / 8.0).collect(),
                1e-5,
            )
        })
        .unwrap();
        let a = audit_site(&compound, 4096, 2).unwrap();
        assert_eq!((a.form, a.norm), (Form::Compound, "LN→LN"));
        assert!(a.exact && a.second_order.is_none());
        let c1 = a.c1_only.unwrap();
        assert!(a.first_order.rms < c1.rms && c1.rms < a.uncorrected.rms);
        // Only a plain LayerNorm site can become compound.
        assert!(
            plain
                .into_compound(vec![1.0; 16], vec![0.0; 16], 0.0)
                .is_err()
        );
    }

    #[test]
    fn a_token_mask_site_is_exact_and_its_two_point_form_leaves_rounding_alone() {
        let c = capture(64, 5).with_mask_groups(&[3; 64]).unwrap();
        let a = audit_site(&c, 4096, 4).unwrap();
        // One group: two masks, enumerated whatever d.
        assert!(a.exact && a.truth_se.iter().all(|s| *s == 0.0));
        let two_point = a.two_point.unwrap();
        // Both the enumeration and the two-point form evaluate the norm at
        // the same two inputs and weight them by q and p: they differ by the
        // rounding of two norm evaluations and a weighted sum.
        use crate::stats::tolerance::{AFFINE_ROUNDINGS, bound, norm_statistic_roundings};
        let largest = a.truth.iter().fold(0.0f64, |m, t| m.max(t.abs()));
        let rounding = bound(
            2.0 * (norm_statistic_roundings(64) + AFFINE_ROUNDINGS) + 4.0,
            largest,
        );
        assert!(two_point.rms <= rounding, "{} > {rounding}", two_point.rms);
        let table = report::table(&[a]);
        assert!(table.contains("gap 2-point") && table.contains("mask: s: shared, token"));
        // The elementwise truth of the same activations differs: the mask's
        // structure changes the expectation.
        let elementwise = audit_site(&capture(64, 5), 4096, 4).unwrap();
        let shared = audit_site(&c, 4096, 4).unwrap();
        let differ = elementwise
            .truth
            .iter()
            .zip(&elementwise.truth_se)
            .zip(&shared.truth)
            .any(|((e, s), t)| (e - t).abs() > crate::stats::critical_z() * s);
        assert!(differ);
    }

    #[test]
    fn the_model_eval_output_replaces_the_recomputed_one() {
        let c = capture(12, 3);
        let plain = audit_site(&c, 4096, 1).unwrap();
        // Handing back the truth itself as the model's eval output: its gap is 0.
        let from_model = audit_site(
            &c.clone().with_eval_output(plain.truth.clone()).unwrap(),
            4096,
            1,
        )
        .unwrap();
        assert!(from_model.eval_from_model && from_model.uncorrected.rms == 0.0);
        assert!(plain.uncorrected.rms > 0.0);
        assert!(capture(12, 3).with_eval_output(vec![f64::NAN; 36]).is_err());
        assert!(capture(12, 3).with_mask_groups(&[0; 11]).is_err());
    }

    #[test]
    fn bad_captures_are_typed_errors() {
        let bad_rows = SiteCapture::new(
            "s".into(),
            Form::Plain,
            0.1,
            4,
            vec![1.0; 6],
            vec![],
            true,
            vec![1.0; 4],
            vec![0.0; 4],
            0.0,
        );
        assert!(matches!(bad_rows, Err(Error::InvalidOption { .. })));
        let bad_p = SiteCapture::new(
            "s".into(),
            Form::Plain,
            1.5,
            2,
            vec![1.0, 2.0],
            vec![],
            true,
            vec![1.0; 2],
            vec![0.0; 2],
            0.0,
        );
        assert!(bad_p.is_err());
    }
}
