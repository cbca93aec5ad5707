//! `dropmc.check_norm_site`: the user's dropout followed by the user's
//! LayerNorm or RMSNorm — with gains `γ`, shifts `β`, `ε`, and optionally
//! the bypass form `norm(h + dropout(v))` — against dropmc's reference.
//!
//! # Two references
//!
//! * **Exact** (`d ≤` [`MAX_EXACT_D`], and an enumeration exists for the
//!   site: plain LayerNorm or RMSNorm, or LayerNorm after a bypass): the full
//!   enumeration of the `2^d` masks (`eval ln | rms | bypass`'s `exact`),
//!   with the crate's convention for the all-dropped row (`ε → 0⁺`:
//!   LayerNorm returns `β`, RMSNorm 0). Each component of the mean of the
//!   user's rows is z-tested against it by the suite's mean test
//!   ([`Card::new`], Student-t at the per-assertion level
//!   [`dropmc::stats::critical_z`]) through the suite's [`check`]. The
//!   first-order formula and the second-order one are reported beside it,
//!   with their gaps to the exact value.
//! * **Sampled** (every other site, `d ≤` [`MAX_D`]): no closed form is
//!   exact there, so each user row is paired with one independent row of the
//!   crate's reference pipeline (exact Bernoulli(q) masks from dropmc's own
//!   stream, the crate's [`LayerNorm`]/[`RmsNorm`] in `f64`), and the claim
//!   tests the mean of the per-row difference `user − reference` against 0:
//!
//!   ```text
//!   D_i = u_i − r_i,   E[D] = E[u] − E[r],   Var D = Var u + Var r
//!   ```
//!
//!   (`u_i`, `r_i` independent), so the same Student-t mean test has its
//!   stated size with both sampling errors in its standard error, and its
//!   MDE (reported) is the smallest bias of the user's pipeline the budget
//!   resolves. The result says which reference it used.

use dropmc::Error;
use dropmc::claims::{Card, Claim, Shape, check};
use dropmc::engine::{Budget, derive_seed, stream};
use dropmc::eval::{EvalResult, LayerNormParams, Values};
use dropmc::ops::{AnyNorm, LayerNorm, Normalization, RmsNorm, Site, Subject};
use dropmc::stats::{Estimate, MeanAccumulator};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde_json::json;

use crate::claims::{PyClaim, family_of};
use crate::forward::PyForward;
use crate::{dtype, rate, run_on_one_thread, summary, to_py};

/// Rows of the user's pipeline at the default budget: well above the mean
/// test's minimum budget at the default skewness bound (≈ 3.7·10⁴).
pub const NORM_SITE_SAMPLES: u64 = 200_000;

/// The largest `d` the exact enumeration takes.
pub const MAX_EXACT_D: usize = dropmc::eval::norm::EXACT_LIMIT;

/// The largest `d` checked at all (the sampled reference): the widths
/// models use, up to 4 096.
pub const MAX_D: usize = 4096;

/// The normalization of the site, as the user declared it.
struct NormSpec {
    kind: Normalization,
    gamma: Option<Vec<f64>>,
    beta: Option<Vec<f64>>,
    eps: f64,
}

/// The kind of norm from the Python string `"layernorm"` / `"rmsnorm"`.
fn parse_kind(kind: &str) -> Result<Normalization, Error> {
    match kind {
        "layernorm" => Ok(Normalization::LayerNorm),
        "rmsnorm" => Ok(Normalization::RmsNorm),
        other => Err(Error::InvalidOption {
            what: format!("kind must be \"layernorm\" or \"rmsnorm\", got {other:?}"),
        }),
    }
}

/// The Python string of a kind of norm (what [`parse_kind`] reads).
fn kind_name(kind: Normalization) -> &'static str {
    match kind {
        Normalization::LayerNorm => "layernorm",
        Normalization::RmsNorm => "rmsnorm",
    }
}

/// The crate's norm of the spec, applied to one row.
fn reference_norm(spec: &NormSpec, d: usize) -> Result<AnyNorm, Error> {
    Ok(match spec.kind {
        Normalization::LayerNorm => AnyNorm::Layer(LayerNorm::with_defaults(
            d,
            spec.gamma.clone(),
            spec.beta.clone(),
            spec.eps,
        )?),
        Normalization::RmsNorm => {
            AnyNorm::Rms(RmsNorm::with_defaults(d, spec.gamma.clone(), spec.eps)?)
        }
    })
}

/// The `eval` result holding the exact `E[norm(…)]` with its first and
/// second order, where an enumeration exists for the site; `None` when it
/// does not (`d` too large, or RMSNorm after a bypass).
fn exact_reference(
    spec: &NormSpec,
    v: &[f64],
    h: Option<&[f64]>,
    p: f64,
    seed: u64,
) -> Result<Option<EvalResult>, Error> {
    if v.len() > MAX_EXACT_D {
        return Ok(None);
    }
    // Two draws: only the closed forms and the enumeration are used.
    let budget = Budget::new(2, seed)?;
    let params = LayerNormParams {
        gamma: spec.gamma.clone(),
        beta: spec.beta.clone(),
        eps: spec.eps,
    };
    let (output, name) = match (spec.kind, h) {
        (Normalization::LayerNorm, None) => {
            (dropmc::eval::norm::ln(v, p, params, budget)?, "E[LN(z)]")
        }
        (Normalization::LayerNorm, Some(h)) => (
            dropmc::eval::norm::bypass_with(h, v, p, params, budget)?,
            "E[LN(y)]",
        ),
        (Normalization::RmsNorm, None) => (
            dropmc::eval::norm::rms(v, p, spec.gamma.clone(), spec.eps, budget)?,
            "E[RMSNorm(z)]",
        ),
        (Normalization::RmsNorm, Some(_)) => return Ok(None),
    };
    let result = output.results.into_iter().find(|r| r.name == name);
    Ok(result.filter(|r| r.exact.is_some()))
}

/// The width of the interval each output component of the site's norm
/// lies in, for any input row (the null range of the mean of the user's
/// rows, [`dropmc::claims::Claim::null_range`]): step by step,
///
/// 1. LayerNorm: with `c = z − mean(z)`, `Σ c_j = 0` and `Σ c_j² = d σ²`,
///    so `c_k² ≤ (d − 1)/d · Σ c_j² = (d − 1) σ²` (Cauchy–Schwarz on the
///    other `d − 1` deviations, which sum to `−c_k`); then
///    `|y_k − β_k| = |γ_k| |c_k| / √(σ² + ε) ≤ |γ_k| √(d − 1)`: width
///    `2 |γ_k| √(d − 1)`.
/// 2. RMSNorm: `z_k² ≤ Σ z_j² = d · ms`, so `|y_k| = |γ_k| |z_k| / √(ms + ε)
///    ≤ |γ_k| √d`: width `2 |γ_k| √d`.
/// 3. The all-dropped row (`β`, or 0) and the bypass `h + dropout(v)` (one
///    more input row) are inside the same interval.
/// 4. The sampled reference's difference `u − r` of two rows in one such
///    interval lies in one twice as wide.
/// 5. A correct implementation's rounding of `β_k + y_k`: relative to its
///    magnitude, covered by [`dropmc::stats::NULL_RANGE_SLACK`] of
///    `|β_k|` on each side (the width itself is widened by the same factor
///    where the bound is applied).
fn output_widths(spec: &NormSpec, d: usize, sampled: bool) -> Vec<f64> {
    let reach = match spec.kind {
        Normalization::LayerNorm => (d as f64 - 1.0).sqrt(),
        Normalization::RmsNorm => (d as f64).sqrt(),
    };
    let copies = if sampled { 2.0 } else { 1.0 };
    (0..d)
        .map(|k| {
            let gamma = spec.gamma.as_ref().map_or(1.0, |g| g[k]).abs();
            let beta = spec.beta.as_ref().map_or(0.0, |b| b[k]).abs();
            copies * (2.0 * gamma * reach + 2.0 * dropmc::stats::NULL_RANGE_SLACK * beta)
        })
        .collect()
}

/// A claim of the site with the null range of its components
/// ([`output_widths`]), so that below its minimum budget a gross error is
/// decided by the distribution-free bound.
struct Ranged<'a> {
    claim: PyClaim<'a>,
    widths: Vec<f64>,
}

impl Claim for Ranged<'_> {
    fn card(&self) -> Card {
        self.claim.card()
    }
    fn analytic(&self) -> Result<Vec<f64>, Error> {
        self.claim.analytic()
    }
    fn estimate(&self, subject: &Subject, budget: Budget) -> Result<Vec<Estimate>, Error> {
        self.claim.estimate(subject, budget)
    }
    fn note(&self) -> Option<String> {
        self.claim.note()
    }
    fn null_range(&self) -> Option<Vec<f64>> {
        Some(self.widths.clone())
    }
}

fn values(v: &Values) -> Vec<f64> {
    v.as_slice().to_vec()
}

fn gaps(approx: &[f64], exact: &[f64]) -> Vec<f64> {
    approx.iter().zip(exact).map(|(a, e)| a - e).collect()
}

fn largest(g: &[f64]) -> f64 {
    g.iter().fold(0.0f64, |m, v| m.max(v.abs()))
}

/// Runs the pipeline `pipeline(V) = norm(h + dropout(V))` (`h = 0` without
/// a bypass; wrapped and checked on the Python side) and compares its mean
/// with the exact value, or with the sampled reference (module docs).
#[pyfunction]
#[pyo3(signature = (pipeline, x, h, gamma, beta, p, kind, eps, dtype_name, samples, seed))]
#[allow(clippy::too_many_arguments)]
pub fn check_norm_site(
    py: Python<'_>,
    pipeline: Py<PyAny>,
    x: Vec<f64>,
    h: Option<Vec<f64>>,
    gamma: Option<Vec<f64>>,
    beta: Option<Vec<f64>>,
    p: f64,
    kind: &str,
    eps: f64,
    dtype_name: &str,
    samples: Option<u64>,
    seed: u64,
) -> PyResult<(String, Vec<Py<PyDict>>)> {
    let rate = rate(p)?;
    let dtype = dtype(dtype_name)?;
    let kind = parse_kind(kind).map_err(to_py)?;
    let d = x.len();
    if d == 0 || d > MAX_D {
        return Err(PyValueError::new_err(format!(
            "check_norm_site needs 1 <= d <= {MAX_D} units, got d = {d}"
        )));
    }
    if kind == Normalization::RmsNorm && beta.is_some() {
        return Err(PyValueError::new_err(
            "beta is a LayerNorm parameter; RMSNorm has only gamma",
        ));
    }
    // The arrays the user's callables see are in `dtype`; so are the
    // inputs and parameters the reference uses.
    let round = |v: Vec<f64>| v.into_iter().map(|a| dtype.round(a)).collect::<Vec<f64>>();
    let (x, h) = (round(x), h.map(round));
    let spec = NormSpec {
        kind,
        gamma: gamma.map(round),
        beta: beta.map(round),
        eps,
    };
    let ref_norm = reference_norm(&spec, d).map_err(to_py)?;
    let site = Site::new(
        h.clone().unwrap_or_else(|| vec![0.0; d]),
        vec![(x.clone(), rate.p())],
    )
    .map_err(to_py)?;
    let exact = exact_reference(&spec, &x, h.as_deref(), p, seed).map_err(to_py)?;
    let samples = samples.unwrap_or(NORM_SITE_SAMPLES).max(2);
    let evaluate = pipeline.clone_ref(py);
    let forward = PyForward::new(pipeline, evaluate, None, dtype, seed);
    let bypass = if h.is_some() { "_bypass" } else { "" };
    let id: &'static str = match (kind, bypass.is_empty()) {
        (Normalization::LayerNorm, true) => "norm_site.layernorm_mean",
        (Normalization::LayerNorm, false) => "norm_site.layernorm_bypass_mean",
        (Normalization::RmsNorm, true) => "norm_site.rmsnorm_mean",
        (Normalization::RmsNorm, false) => "norm_site.rmsnorm_bypass_mean",
    };
    let name = kind_name(kind);
    let (xs, rows) = (x.clone(), &forward);
    let (claim, mut extra) = match &exact {
        Some(reference) => {
            let exact_values = reference.exact.as_ref().map(values).unwrap_or_default();
            let first = values(&reference.formula);
            let second = reference.second_order.as_ref().map(values);
            let first_gap = gaps(&first, &exact_values);
            let second_gap = second.as_ref().map(|s| gaps(s, &exact_values));
            let note = format!(
                "reference: exact E[{name}(...)] by enumeration of 2^{d} masks; largest gap to \
                 it: first-order formula {:.3e}{}",
                largest(&first_gap),
                second_gap
                    .as_ref()
                    .map(|g| format!(", second-order {:.3e}", largest(g)))
                    .unwrap_or_default()
            );
            let claim = PyClaim {
                null_range: None,
                card: Card::new(
                    id,
                    family_of(id),
                    "E[norm(dropout(x))]_k = exact enumeration of the masks",
                    Shape::Vector,
                    NORM_SITE_SAMPLES,
                ),
                analytic: exact_values.clone(),
                note: Some(note),
                estimate: Box::new(move |_, budget| {
                    let mut acc = MeanAccumulator::new(xs.len());
                    for _ in 0..budget.samples {
                        rows.train_row(&xs, |row| acc.push(row.out))?;
                    }
                    Ok(acc.estimates())
                }),
            };
            let extra = json!({
                "reference": "exact",
                "exact": exact_values,
                "first_order": first,
                "second_order": second,
                "first_order_gap": first_gap,
                "second_order_gap": second_gap,
            });
            (claim, extra)
        }
        None => {
            let note = format!(
                "reference: dropmc's per-element sampler ({samples} rows of exact Bernoulli(q) \
                 masks, f64 {name}), paired with the user's rows; tested: the mean of \
                 user - reference = 0 (no exact enumeration at d = {d}{})",
                if kind == Normalization::RmsNorm && h.is_some() {
                    " for RMSNorm after a bypass"
                } else {
                    ""
                }
            );
            let (site, ref_norm) = (&site, &ref_norm);
            let claim = PyClaim {
                null_range: None,
                card: Card::new(
                    id,
                    family_of(id),
                    "E[norm(h + dropout(x))]_k - E[reference]_k = 0 (sampled reference)",
                    Shape::Vector,
                    NORM_SITE_SAMPLES,
                ),
                analytic: vec![0.0; d],
                note: Some(note),
                estimate: Box::new(move |_, budget| {
                    let layer = Subject::reference().dropout;
                    let mut rng = stream(derive_seed(budget.seed, "python/norm_site reference"), 0);
                    let (mut y, mut term, mut mask) = (vec![0.0; d], vec![0.0; d], vec![false; d]);
                    let (mut r, mut diff) = (vec![0.0; d], vec![0.0; d]);
                    let mut acc = MeanAccumulator::new(d);
                    for _ in 0..budget.samples {
                        site.draw(layer, &mut rng, &mut y, &mut term, &mut mask)?;
                        ref_norm.forward(&y, &mut r)?;
                        rows.train_row(&xs, |row| {
                            for ((o, u), v) in diff.iter_mut().zip(row.out).zip(&r) {
                                *o = u - v;
                            }
                        })?;
                        acc.push(&diff);
                    }
                    Ok(acc.estimates())
                }),
            };
            (
                claim,
                json!({ "reference": "sampled", "reference_rows": samples }),
            )
        }
    };
    let claim = Ranged {
        claim,
        widths: output_widths(&spec, d, exact.is_none()),
    };
    let outcome = py.detach(|| {
        run_on_one_thread(|| -> Result<_, Error> {
            let budget = Budget::new(samples, derive_seed(seed, id))?;
            Ok(check(&claim, &Subject::reference(), budget))
        })
    });
    if let Some(e) = forward.take_failure() {
        return Err(e);
    }
    let result = outcome.map_err(PyRuntimeError::new_err)?.map_err(to_py)?;
    let base = json!({
        "subject": "python",
        "seed": seed,
        "kind": name,
        "p": p,
        "eps": eps,
        "dtype": dtype_name,
        "x": x,
        "h": h,
        "gamma": spec.gamma,
        "beta": spec.beta,
        "likely_causes": norm_site_causes(&result),
        "claims": dropmc::conformance::report::to_json(&dropmc::conformance::report::Report {
            seed,
            subject: "python".into(),
            results: vec![result.clone()],
        })["claims"],
    });
    if let (Some(map), Some(base)) = (extra.as_object_mut(), base.as_object()) {
        for (k, v) in base {
            map.insert(k.clone(), v.clone());
        }
    }
    let text = serde_json::to_string_pretty(&extra)
        .map_err(|e| PyRuntimeError::new_err(format!("JSON: {e}")))?;
    Ok((text, vec![summary(py, &result)?]))
}

/// The likely cause of a failed norm-site claim, in words: the claim
/// compares the whole pipeline's mean with the reference of the norm and
/// parameters declared, so a failure is either side of it.
fn norm_site_causes(result: &dropmc::claims::ClaimResult) -> Vec<String> {
    if result.verdict != dropmc::claims::Verdict::Fail {
        return Vec::new();
    }
    vec![
        "E[norm(dropout(x))] differs from the reference of the norm declared: the norm computes \
         something else (another kind, an RMSNorm declared a LayerNorm, or gamma, beta, eps other \
         than those given), or the dropout is wrong (check it alone with check_dropout)"
            .to_string(),
    ]
}
