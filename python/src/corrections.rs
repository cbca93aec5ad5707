//! `dropmc._dropmc.first_order_site`, `second_order_site`, `gap_to_truth`,
//! `fold_batchnorm`: the
//! Rust closed forms that `dropmc.correct` applies as torch code, exposed so
//! that the tests check the torch code against them (and so that the
//! BatchNorm fold takes its channel rule from the one place it lives).
//!
//! Nothing is restated here: each function parses its arguments and calls
//! [`dropmc::formulas`] (or [`dropmc::audit::Gap`]).

use dropmc::audit::Gap;
use dropmc::formulas::second_order::{self as so, NoisyUnits};
use dropmc::formulas::{batchnorm, bypass, compound, layernorm, rmsnorm};
use dropmc::ops::{LayerNorm, Rate, RmsNorm, Site};
use numpy::PyReadonlyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::to_py;

fn flat(a: &PyReadonlyArray1<f64>) -> Vec<f64> {
    a.as_array().iter().copied().collect()
}

/// `site[key]`, or a ValueError naming the missing key.
fn item<'py>(site: &Bound<'py, PyDict>, key: &str) -> PyResult<Bound<'py, PyAny>> {
    site.get_item(key)?
        .ok_or_else(|| PyValueError::new_err(format!("site dict lacks the key {key:?}")))
}

/// `site[key]` as a flat float64 array.
fn item_array(site: &Bound<'_, PyDict>, key: &str) -> PyResult<Vec<f64>> {
    let a: PyReadonlyArray1<f64> = item(site, key)?.extract()?;
    Ok(flat(&a))
}

/// `v` and `h` split into `tokens` rows of width `d` (equal lengths, a
/// multiple of `d ≥ 2`).
fn rows(v: &[f64], h: &[f64], d: usize) -> PyResult<Vec<(Vec<f64>, Vec<f64>)>> {
    if d < 2 || !v.len().is_multiple_of(d) || v.len() != h.len() {
        return Err(PyValueError::new_err(format!(
            "v and h must be equal-length flat arrays of tokens × d (d ≥ 2); got {} and {} at d = {d}",
            v.len(),
            h.len()
        )));
    }
    Ok(v.chunks(d)
        .zip(h.chunks(d))
        .map(|(v, h)| (v.to_vec(), h.to_vec()))
        .collect())
}

/// The first-order estimate of `E[norm(h + dropout_p(v))]` per token, flat
/// (`tokens × d`), from a site dict in the layout of `dropmc.audit`'s
/// captures (`form` 'plain'/'bypass'/'compound', `norm` 'layer'/'rms',
/// `p`, `d`, `v`, `h`, `gamma`, `beta`, `eps`; a compound site also
/// `gamma2`, `beta2`, `eps2`): `formulas::layernorm::corrected` (plain),
/// `formulas::bypass::corrected` (bypass), `formulas::rmsnorm::corrected`
/// (a plain RMSNorm site), `formulas::compound::corrected` (compound). A
/// bypass RMSNorm site has no function in `formulas` and is refused.
#[pyfunction]
pub fn first_order_site(site: &Bound<'_, PyDict>) -> PyResult<Vec<f64>> {
    let get = |key: &str| item(site, key);
    let array = |key: &str| item_array(site, key);
    let form: String = get("form")?.extract()?;
    let norm: String = get("norm")?.extract()?;
    let p: f64 = get("p")?.extract()?;
    let rate = Rate::new(p).map_err(to_py)?;
    let d: usize = get("d")?.extract()?;
    let eps: f64 = get("eps")?.extract()?;
    let tokens = rows(&array("v")?, &array("h")?, d)?;
    let gamma = array("gamma")?;
    let mut out = Vec::with_capacity(tokens.len() * d);
    for (v, h) in &tokens {
        let token = match (form.as_str(), norm.as_str()) {
            ("plain", "layer") => {
                let ln = LayerNorm::new(gamma.clone(), array("beta")?, eps).map_err(to_py)?;
                layernorm::corrected(v, &ln, rate)
            }
            ("bypass", "layer") => {
                let ln = LayerNorm::new(gamma.clone(), array("beta")?, eps).map_err(to_py)?;
                let s = Site::new(h.clone(), vec![(v.clone(), p)]).map_err(to_py)?;
                bypass::corrected(&s, &ln)
            }
            ("plain", "rms") => {
                let rms = RmsNorm::new(gamma.clone(), eps).map_err(to_py)?;
                rmsnorm::corrected(v, &rms, rate)
            }
            ("compound", "layer") => {
                let ln1 = LayerNorm::new(gamma.clone(), array("beta")?, eps).map_err(to_py)?;
                let ln2 =
                    LayerNorm::new(array("gamma2")?, array("beta2")?, get("eps2")?.extract()?)
                        .map_err(to_py)?;
                compound::corrected(v, &ln1, &ln2, rate)
            }
            (f, n) => {
                return Err(PyValueError::new_err(format!(
                    "no closed form in dropmc::formulas for a {f} site at a {n} norm"
                )));
            }
        };
        out.extend(token.map_err(to_py)?);
    }
    Ok(out)
}

/// The second-order estimate of `E[norm(h + dropout_p(v))]` per token,
/// flat, from a plain or bypass site dict (as [`first_order_site`]):
/// `formulas::second_order::{layer_norm_expectation, rms_norm_expectation}`
/// on `NoisyUnits::bypass(h, v)`. A compound site has no second-order
/// closed form and is refused.
#[pyfunction]
pub fn second_order_site(site: &Bound<'_, PyDict>) -> PyResult<Vec<f64>> {
    let get = |key: &str| item(site, key);
    let array = |key: &str| item_array(site, key);
    let form: String = get("form")?.extract()?;
    if form != "plain" && form != "bypass" {
        return Err(PyValueError::new_err(format!(
            "no second-order closed form in dropmc::formulas for a {form} site"
        )));
    }
    let norm: String = get("norm")?.extract()?;
    let rate = Rate::new(get("p")?.extract()?).map_err(to_py)?;
    let d: usize = get("d")?.extract()?;
    let eps: f64 = get("eps")?.extract()?;
    let (gamma, beta) = (array("gamma")?, array("beta")?);
    let mut out = Vec::new();
    for (v, h) in rows(&array("v")?, &array("h")?, d)? {
        let units = NoisyUnits::bypass(&h, &v, rate).map_err(to_py)?;
        let token = match norm.as_str() {
            "layer" => so::layer_norm_expectation(&units, &gamma, &beta, eps),
            "rms" => so::rms_norm_expectation(&units, &gamma, eps),
            other => {
                return Err(PyValueError::new_err(format!(
                    "no second-order closed form for a {other:?} norm (\"layer\" or \"rms\")"
                )));
            }
        };
        out.extend(token.map_err(to_py)?);
    }
    Ok(out)
}

/// The noise-corrected RMS gap (`dropmc::audit::Gap`, the audit's own
/// statistic) of `estimate` to `truth` whose per-unit standard errors are
/// `truth_se`, all flat `tokens × d`: a dict of the `Gap` fields.
#[pyfunction]
pub fn gap_to_truth<'py>(
    py: Python<'py>,
    truth: PyReadonlyArray1<f64>,
    truth_se: PyReadonlyArray1<f64>,
    estimate: PyReadonlyArray1<f64>,
    d: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let (e, s, p) = (flat(&truth), flat(&truth_se), flat(&estimate));
    if d == 0
        || e.is_empty()
        || !e.len().is_multiple_of(d)
        || s.len() != e.len()
        || p.len() != e.len()
    {
        return Err(PyValueError::new_err(
            "truth, truth_se and estimate must be equal-length flat arrays of tokens × d",
        ));
    }
    let per_token: Vec<f64> = e
        .chunks(d)
        .zip(s.chunks(d))
        .zip(p.chunks(d))
        .map(|((e, s), p)| {
            let total: f64 = e
                .iter()
                .zip(s)
                .zip(p)
                .map(|((e, s), p)| (e - p) * (e - p) - s * s)
                .sum();
            total / d as f64
        })
        .collect();
    let g = Gap::from_token_squares(&per_token);
    let out = PyDict::new(py);
    out.set_item("mean_square", g.mean_square)?;
    out.set_item("mean_square_se", g.mean_square_se)?;
    out.set_item("rms", g.rms)?;
    out.set_item("rms_se", g.rms_se)?;
    out.set_item("resolved", g.resolved)?;
    out.set_item("upper", g.upper)?;
    Ok(out)
}

/// `formulas::batchnorm::fold_channels` of PyTorch's buffers at rate `p`:
/// per channel the folded `running_var` (`q · rv − p · rm²`), or `None` and
/// the reason where the buffers have no fold (that channel is left as it
/// is). Input errors (mismatched lengths, `rv ≤ 0`, overflow) raise.
#[pyfunction]
pub fn fold_batchnorm(
    running_mean: PyReadonlyArray1<f64>,
    running_var: PyReadonlyArray1<f64>,
    p: f64,
) -> PyResult<Vec<(Option<f64>, Option<String>)>> {
    let rate = Rate::new(p).map_err(to_py)?;
    let judged =
        batchnorm::fold_channels(&flat(&running_mean), &flat(&running_var), rate).map_err(to_py)?;
    Ok(judged
        .into_iter()
        .map(|r| match r {
            Ok(fold) => (Some(fold), None),
            Err(no_fold) => (None, Some(no_fold.to_string())),
        })
        .collect())
}

/// Registers this file's functions on the extension module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(first_order_site, m)?)?;
    m.add_function(wrap_pyfunction!(second_order_site, m)?)?;
    m.add_function(wrap_pyfunction!(gap_to_truth, m)?)?;
    m.add_function(wrap_pyfunction!(fold_batchnorm, m)?)?;
    Ok(())
}
