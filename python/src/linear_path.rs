//! `dropmc._dropmc.audit_linear_path` and `first_order_linear_path`: the
//! Rust audit of a linear-path capture ([`dropmc::audit::linear`]) and its
//! first-order output, for `dropmc.model.linear_path`. Nothing is restated here:
//! the arguments are parsed and handed to the audit.

use dropmc::Error;
use dropmc::audit::TokenValues;
use dropmc::audit::linear::{LinearAudit, LinearCapture, audit_linear};
use dropmc::audit::linear_attention::{
    AttentionPathCapture, audit_attention_path as audit_attention,
};
use dropmc::ops::{AnyNorm, LayerNorm, RmsNorm};
use numpy::{PyReadonlyArray1, PyReadonlyArray2};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use crate::supervise::supervised;
use crate::to_py;

/// Rows of a 2-D float64 array.
fn rows(a: &PyReadonlyArray2<f64>) -> Vec<Vec<f64>> {
    a.as_array()
        .rows()
        .into_iter()
        .map(|r| r.to_vec())
        .collect()
}

fn flat(a: &PyReadonlyArray1<f64>) -> Vec<f64> {
    a.as_array().iter().copied().collect()
}

/// The capture from the arrays: `u` (tokens × m), `h` (tokens × d), `w`
/// (d × m), `b` (d), `gamma` (d), `beta` (d, or `None` for RMSNorm).
#[allow(clippy::too_many_arguments)]
fn capture(
    name: String,
    p: f64,
    u: &PyReadonlyArray2<f64>,
    h: &PyReadonlyArray2<f64>,
    w: &PyReadonlyArray2<f64>,
    b: &PyReadonlyArray1<f64>,
    gamma: &PyReadonlyArray1<f64>,
    beta: Option<&PyReadonlyArray1<f64>>,
    eps: f64,
) -> PyResult<LinearCapture> {
    let norm = norm(gamma, beta, eps)?;
    LinearCapture::new(name, p, rows(u), rows(h), &rows(w), flat(b), norm).map_err(to_py)
}

/// LayerNorm when `beta` is given, RMSNorm otherwise.
fn norm(
    gamma: &PyReadonlyArray1<f64>,
    beta: Option<&PyReadonlyArray1<f64>>,
    eps: f64,
) -> PyResult<AnyNorm> {
    Ok(match beta {
        Some(beta) => AnyNorm::Layer(LayerNorm::new(flat(gamma), flat(beta), eps).map_err(to_py)?),
        None => AnyNorm::Rms(RmsNorm::new(flat(gamma), eps).map_err(to_py)?),
    })
}

/// Per-token lists of the truth, its SE, the eval and the first-order
/// outputs, and the site's gaps as JSON ([`LinearAudit::gaps`]).
type Columns = (
    Vec<Vec<f64>>,
    Vec<Vec<f64>>,
    Vec<Vec<f64>>,
    Vec<Vec<f64>>,
    String,
);

/// Runs `audit` under the audit's cancellation and wall-time contract
/// ([`supervised`]: Ctrl-C, and `deadline` seconds when given).
fn run(
    py: Python<'_>,
    deadline: Option<f64>,
    audit: impl FnOnce() -> Result<LinearAudit, Error> + Send,
) -> PyResult<Columns> {
    let audit = supervised(py, deadline, "linear-path audit", audit)?;
    let pick = |g: fn(&TokenValues) -> Vec<f64>| audit.tokens.iter().map(g).collect::<Vec<_>>();
    Ok((
        pick(|t| t.truth.clone()),
        pick(|t| t.truth_se.clone()),
        pick(|t| t.eval.clone()),
        pick(|t| t.first.clone()),
        serde_json::to_string(&audit.gaps())
            .map_err(|e| PyRuntimeError::new_err(format!("the gaps' JSON: {e}")))?,
    ))
}

fn check_samples(samples: u64) -> PyResult<()> {
    if samples < 2 {
        return Err(PyValueError::new_err(format!(
            "samples must be at least 2, got {samples}"
        )));
    }
    Ok(())
}

/// Audits one linear-path site: returns `(truth, truth_se, eval,
/// first_order, gaps_json)`, each a list of per-token lists, from `samples` masks per
/// token and `seed`.
#[pyfunction]
#[pyo3(signature = (name, p, u, h, w, b, gamma, beta, eps, samples, seed, deadline=None))]
#[allow(clippy::too_many_arguments)]
pub fn audit_linear_path(
    py: Python<'_>,
    name: String,
    p: f64,
    u: PyReadonlyArray2<f64>,
    h: PyReadonlyArray2<f64>,
    w: PyReadonlyArray2<f64>,
    b: PyReadonlyArray1<f64>,
    gamma: PyReadonlyArray1<f64>,
    beta: Option<PyReadonlyArray1<f64>>,
    eps: f64,
    samples: u64,
    seed: u64,
    deadline: Option<f64>,
) -> PyResult<Columns> {
    check_samples(samples)?;
    let capture = capture(name, p, &u, &h, &w, &b, &gamma, beta.as_ref(), eps)?;
    run(py, deadline, || audit_linear(&capture, samples, seed))
}

/// Audits one attention-path site (attention dropout → values → heads
/// concatenated → `o_proj` → +h → norm): `shape = (B, H, L, S, J)`,
/// `probs` the eval attention probabilities (flat `B·H·L·S`), `values`
/// (flat `B·H·S·J`), `w` `o_proj`'s weight (`E × H·J`), `b` its bias, `h`
/// the added term (`B·L × E`). Returns the per-token columns of
/// [`audit_linear_path`].
#[pyfunction]
#[pyo3(signature = (name, p, shape, probs, values, w, b, h, gamma, beta, eps, samples, seed, deadline=None))]
#[allow(clippy::too_many_arguments)]
pub fn audit_attention_path(
    py: Python<'_>,
    name: String,
    p: f64,
    shape: [usize; 5],
    probs: PyReadonlyArray1<f64>,
    values: PyReadonlyArray1<f64>,
    w: PyReadonlyArray2<f64>,
    b: PyReadonlyArray1<f64>,
    h: PyReadonlyArray2<f64>,
    gamma: PyReadonlyArray1<f64>,
    beta: Option<PyReadonlyArray1<f64>>,
    eps: f64,
    samples: u64,
    seed: u64,
    deadline: Option<f64>,
) -> PyResult<Columns> {
    check_samples(samples)?;
    let norm = norm(&gamma, beta.as_ref(), eps)?;
    let capture = AttentionPathCapture::new(
        name,
        p,
        shape,
        &flat(&probs),
        &flat(&values),
        &rows(&w),
        flat(&b),
        rows(&h),
        norm,
    )
    .map_err(to_py)?;
    run(py, deadline, || audit_attention(&capture, samples, seed))
}

/// The first-order output per token (the live correction's value), from
/// `W`'s column norms: no sampling.
#[pyfunction]
#[pyo3(signature = (p, u, h, w, b, gamma, beta, eps))]
#[allow(clippy::too_many_arguments)]
pub fn first_order_linear_path(
    p: f64,
    u: PyReadonlyArray2<f64>,
    h: PyReadonlyArray2<f64>,
    w: PyReadonlyArray2<f64>,
    b: PyReadonlyArray1<f64>,
    gamma: PyReadonlyArray1<f64>,
    beta: Option<PyReadonlyArray1<f64>>,
    eps: f64,
) -> PyResult<Vec<Vec<f64>>> {
    capture(String::new(), p, &u, &h, &w, &b, &gamma, beta.as_ref(), eps)?
        .first_order_tokens()
        .map_err(to_py)
}
