//! Auditing a model's dropout→norm sites on captured activations.
//!
//! A *site* is a dropout whose output reaches a LayerNorm or RMSNorm
//! directly (`plain`: `norm(dropout(v))`) or through one residual add
//! (`bypass`: `norm(h + dropout(v))`). The capture holds, per token, the
//! pre-dropout vector `v` and the bypass `h` (zero for a plain site), and the
//! norm's `γ`, `β`, `ε`. Per token [`token::token_values`] computes the truth
//! `E[norm(h + dropout(v))]`, the evaluation output and the first- and
//! second-order estimates; [`audit_site`] runs the tokens in parallel (one
//! derived seed per token, so the bits do not depend on the thread count) and
//! [`gap::Gap`] summarises each estimate's distance to the truth.
//! [`attention`] audits the attention-dropout sites (dropout on a softmax
//! row) with the attention family's quantities.

pub mod attention;
pub mod gap;
pub mod npz;
pub mod report;
pub mod token;

use rayon::prelude::*;
use serde::Serialize;

use crate::engine::{Budget, derive_seed};
use crate::error::{Error, check_len};
use crate::ops::{LayerNorm, Rate, RmsNorm};
pub use attention::{
    AttentionAudit, AttentionCapture, DEFAULT_ATTENTION_SAMPLES, audit_attention_sites,
};
pub use gap::Gap;
pub use token::{AuditNorm, EXACT_AUDIT_D, TokenValues, token_values};

/// Masks per token of the audit's sampled sites by default, the Python
/// audit's `DEFAULT_SAMPLES` (`python/dropmc/audit.py`): 2¹⁷, which resolved
/// every site's uncorrected gap of the 6-layer d = 512 encoder of
/// docs/audit.md.
pub const DEFAULT_SAMPLES: u64 = 1 << 17;

/// How the dropout reaches the norm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Form {
    /// `norm(dropout(v))`.
    Plain,
    /// `norm(h + dropout(v))`.
    Bypass,
}

impl Form {
    pub fn name(self) -> &'static str {
        match self {
            Form::Plain => "plain",
            Form::Bypass => "bypass",
        }
    }
}

/// One site's capture: `tokens` rows of width `d`, row-major.
#[derive(Debug, Clone)]
pub struct SiteCapture {
    /// The site's name (the dropout's and the norm's module names).
    pub name: String,
    pub form: Form,
    pub p: f64,
    pub d: usize,
    /// `v`, `tokens × d`.
    pub v: Vec<f64>,
    /// `h`, `tokens × d` (ignored, and may be empty, for a plain site).
    pub h: Vec<f64>,
    pub norm: AuditNorm,
}

impl SiteCapture {
    /// A capture from its parts; `norm` is `"layer"` (with `beta`) or `"rms"`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        name: String,
        form: Form,
        p: f64,
        d: usize,
        v: Vec<f64>,
        h: Vec<f64>,
        layer: bool,
        gamma: Vec<f64>,
        beta: Vec<f64>,
        eps: f64,
    ) -> Result<Self, Error> {
        Rate::new(p)?;
        if d == 0 || v.is_empty() || !v.len().is_multiple_of(d) {
            return Err(Error::InvalidOption {
                what: format!(
                    "site {name}: v holds {} values, not a whole number of rows of width {d}",
                    v.len()
                ),
            });
        }
        let h = match form {
            Form::Plain => vec![0.0; v.len()],
            Form::Bypass => {
                check_len("h", &h, v.len())?;
                h
            }
        };
        let norm = if layer {
            AuditNorm::Layer(LayerNorm::new(gamma, beta, eps)?)
        } else {
            AuditNorm::Rms(RmsNorm::new(gamma, eps)?)
        };
        let width = match &norm {
            AuditNorm::Layer(ln) => ln.dim(),
            AuditNorm::Rms(rms) => rms.dim(),
        };
        if width != d {
            return Err(Error::InvalidOption {
                what: format!("site {name}: the norm has width {width}, the activations {d}"),
            });
        }
        Ok(SiteCapture {
            name,
            form,
            p,
            d,
            v,
            h,
            norm,
        })
    }

    pub fn tokens(&self) -> usize {
        self.v.len() / self.d
    }

    pub fn norm_name(&self) -> &'static str {
        match self.norm {
            AuditNorm::Layer(_) => "LayerNorm",
            AuditNorm::Rms(_) => "RMSNorm",
        }
    }
}

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
    /// The RMS gap of the evaluation output, the first and the second order.
    pub uncorrected: Gap,
    pub first_order: Gap,
    pub second_order: Gap,
    /// `uncorrected / first_order`: the factor the correction removes (a
    /// lower bound, from the first order's upper bound, when that gap is
    /// not resolved).
    pub factor: f64,
    pub factor_is_lower_bound: bool,
    /// The mean over tokens of `ρ² = v̄²/σ²`.
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

/// Audits one site: every token in parallel, each from the seed derived from
/// `seed`, the site's name and the token's index.
pub fn audit_site(capture: &SiteCapture, samples: u64, seed: u64) -> Result<SiteAudit, Error> {
    let rate = Rate::new(capture.p)?;
    let d = capture.d;
    let site_seed = derive_seed(seed, &capture.name);
    let values: Vec<TokenValues> = (0..capture.tokens())
        .into_par_iter()
        .map(|t| {
            let budget = Budget::new(samples, derive_seed(site_seed, &t.to_string()))?;
            let rows = t * d..(t + 1) * d;
            token_values(
                &capture.h[rows.clone()],
                &capture.v[rows],
                rate,
                &capture.norm,
                capture.form == Form::Bypass,
                budget,
            )
        })
        .collect::<Result<_, Error>>()?;
    let uncorrected = Gap::over(&values, |t| &t.eval);
    let first_order = Gap::over(&values, |t| &t.first);
    let second_order = Gap::over(&values, |t| &t.second);
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
        exact: d <= EXACT_AUDIT_D,
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
    if a.second_order.farther_than(&a.first_order) {
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
