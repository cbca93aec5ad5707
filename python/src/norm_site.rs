//! `dropmc.check_norm_site`: the user's dropout followed by the user's
//! LayerNorm or RMSNorm, against dropmc's exact `E[norm(dropout(x))]`.
//!
//! The exact value is the full enumeration of the `2^d` masks
//! ([`dropmc::eval::norm::ln`]'s `exact`, `d ≤ 20`), with the crate's
//! convention for the all-dropped row (`ε → 0⁺`: LayerNorm returns `β`,
//! RMSNorm 0). Each component of the mean of the user's rows is z-tested
//! against it by the suite's mean test ([`Card::new`], Student-t
//! at the per-assertion level [`dropmc::stats::critical_z`], the suite's
//! family α split over its assertion budget, a Bonferroni split; the d ≤ 20
//! components of one call stay far inside it) through the suite's
//! [`check`]. The first-order formula (`eval ln`'s `formula`) and the
//! second-order one (`second_order`) are reported beside it, with their
//! gaps to the exact value: how much a user relying on either is off.

use dropmc::Error;
use dropmc::claims::{Card, Shape, check};
use dropmc::engine::{Budget, derive_seed};
use dropmc::eval::{EvalResult, LayerNormParams, Values};
use dropmc::ops::Subject;
use dropmc::stats::MeanAccumulator;
use pyo3::exceptions::PyRuntimeError;
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
pub const MAX_D: usize = dropmc::eval::norm::EXACT_LIMIT;

/// The first-order, second-order and exact `E[norm(z)]` at `(x, p)`.
fn reference(kind: &str, x: &[f64], p: f64, eps: f64, seed: u64) -> Result<EvalResult, Error> {
    // Two draws: only the closed forms and the enumeration are used.
    let budget = Budget::new(2, seed)?;
    let (output, name) = match kind {
        "layernorm" => (
            dropmc::eval::norm::ln(x, p, LayerNormParams::plain(eps), budget)?,
            "E[LN(z)]",
        ),
        "rmsnorm" => (
            dropmc::eval::norm::rms(x, p, None, eps, budget)?,
            "E[RMSNorm(z)]",
        ),
        other => {
            return Err(Error::InvalidOption {
                what: format!("kind must be \"layernorm\" or \"rmsnorm\", got {other:?}"),
            });
        }
    };
    output
        .results
        .into_iter()
        .find(|r| r.name == name)
        .ok_or_else(|| Error::Degenerate {
            what: format!("eval {kind} returned no {name}"),
        })
}

fn values(v: &Values) -> Vec<f64> {
    v.as_slice().to_vec()
}

fn gaps(approx: &[f64], exact: &[f64]) -> Vec<f64> {
    approx.iter().zip(exact).map(|(a, e)| a - e).collect()
}

/// Runs the pipeline `pipeline(X) = norm(dropout(X))` (wrapped and checked
/// on the Python side) and compares its mean with the exact value.
#[pyfunction]
#[pyo3(signature = (pipeline, x, p, kind, eps, dtype_name, samples, seed))]
#[allow(clippy::too_many_arguments)]
pub fn check_norm_site(
    py: Python<'_>,
    pipeline: Py<PyAny>,
    x: Vec<f64>,
    p: f64,
    kind: &str,
    eps: f64,
    dtype_name: &str,
    samples: Option<u64>,
    seed: u64,
) -> PyResult<(String, Vec<Py<PyDict>>)> {
    rate(p)?;
    let dtype = dtype(dtype_name)?;
    if x.is_empty() || x.len() > MAX_D {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "check_norm_site needs 1 <= d <= {MAX_D} units (exact enumeration of 2^d masks), got d = {}",
            x.len()
        )));
    }
    let x: Vec<f64> = x.iter().map(|&v| dtype.round(v)).collect();
    let reference = reference(kind, &x, p, eps, seed).map_err(to_py)?;
    let exact = reference
        .exact
        .as_ref()
        .map(values)
        .ok_or_else(|| PyRuntimeError::new_err("the exact enumeration returned no value"))?;
    let first = values(&reference.formula);
    let second = reference.second_order.as_ref().map(values);
    let evaluate = pipeline.clone_ref(py);
    let forward = PyForward::new(pipeline, evaluate, None, dtype, seed);
    let id = match kind {
        "layernorm" => "norm_site.layernorm_mean",
        _ => "norm_site.rmsnorm_mean",
    };
    let first_gap = gaps(&first, &exact);
    let second_gap = second.as_ref().map(|s| gaps(s, &exact));
    let largest = |g: &[f64]| g.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let note = format!(
        "exact E[{kind}(dropout(x))] by enumeration of 2^{} masks; largest gap to it: first-order formula {:.3e}{}",
        x.len(),
        largest(&first_gap),
        second_gap
            .as_ref()
            .map(|g| format!(", second-order {:.3e}", largest(g)))
            .unwrap_or_default()
    );
    let (xs, rows) = (x.clone(), &forward);
    let claim = PyClaim {
        card: Card::new(
            id,
            family_of(id),
            "E[norm(dropout(x))]_k = exact enumeration of the masks",
            Shape::Vector,
            NORM_SITE_SAMPLES,
        ),
        analytic: exact.clone(),
        note: Some(note),
        estimate: Box::new(move |_, budget| {
            let mut acc = MeanAccumulator::new(xs.len());
            for _ in 0..budget.samples {
                rows.train_row(&xs, |row| acc.push(row.out))?;
            }
            Ok(acc.estimates())
        }),
    };
    let samples = samples.unwrap_or(NORM_SITE_SAMPLES).max(2);
    // The claim reads the user's rows itself; the subject is not used.
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
    let json = json!({
        "subject": "python",
        "seed": seed,
        "kind": kind,
        "p": p,
        "eps": eps,
        "dtype": dtype_name,
        "x": x,
        "exact": exact,
        "first_order": first,
        "second_order": second,
        "first_order_gap": first_gap,
        "second_order_gap": second_gap,
        "claims": dropmc::report::to_json(&dropmc::report::Report {
            seed,
            subject: "python".into(),
            results: vec![result.clone()],
        })["claims"],
    });
    let text = serde_json::to_string_pretty(&json)
        .map_err(|e| PyRuntimeError::new_err(format!("JSON: {e}")))?;
    Ok((text, vec![summary(py, &result)?]))
}
