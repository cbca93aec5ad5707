//! `dropmc._dropmc.audit_sites`: the Rust half of `dropmc.audit` — the
//! per-token computation of [`dropmc::audit`] on the sites the Python half
//! captured, on rayon's global pool (the result's bits do not depend on the
//! thread count: every token has its own derived seed).

use dropmc::audit::{
    AttentionCapture, Form, SiteCapture, Tokens, audit_attention_sites_rows as attention_all,
    audit_sites_within as audit_all, estimate, progress::with_progress, report,
};
use numpy::PyReadonlyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::supervise::supervised;
use crate::to_py;

/// A site's truth per token and unit, and its standard errors.
type Truth = (Vec<f64>, Vec<f64>);

/// One site from its dict: `name`, `form` ("plain"/"bypass"/"compound"),
/// `p`, `d`, `v` and `h` (flat float64 arrays, `tokens × d`), `norm`
/// ("layer"/"rms"), `gamma`, `beta`, `eps`; a compound site also LN2's
/// `gamma2`, `beta2`, `eps2`. Optional: `mask_groups` (one int per
/// channel: channels with the same id share a mask bit; `None` or absent:
/// elementwise) and `eval_output` (flat float64, `tokens × d`: the model's
/// own eval output, which replaces `norm(h + v)` as the eval column).
fn capture(site: &Bound<'_, PyDict>) -> PyResult<SiteCapture> {
    let site_capture = norm_capture(site)?;
    let optional = |key: &str| -> PyResult<Option<Bound<'_, PyAny>>> {
        Ok(site.get_item(key)?.filter(|value| !value.is_none()))
    };
    let site_capture = match optional("mask_groups")? {
        Some(ids) => {
            let ids: Vec<i64> = ids.extract().map_err(|_| {
                PyValueError::new_err("mask_groups must be a sequence of ints, one per channel")
            })?;
            if ids.iter().any(|id| *id < 0) {
                return Err(PyValueError::new_err(
                    "mask_groups must hold non-negative ints",
                ));
            }
            let ids: Vec<usize> = ids.iter().map(|id| *id as usize).collect();
            site_capture.with_mask_groups(&ids).map_err(to_py)?
        }
        None => site_capture,
    };
    match optional("eval_output")? {
        Some(values) => {
            let a: PyReadonlyArray1<f64> = values.extract()?;
            site_capture
                .with_eval_output(a.as_array().iter().copied().collect())
                .map_err(to_py)
        }
        None => Ok(site_capture),
    }
}

/// The site's norm capture (module docs of [`capture`]'s keys).
fn norm_capture(site: &Bound<'_, PyDict>) -> PyResult<SiteCapture> {
    let get = |key: &str| -> PyResult<Bound<'_, PyAny>> {
        site.get_item(key)?
            .ok_or_else(|| PyValueError::new_err(format!("site dict lacks the key {key:?}")))
    };
    let flat = |key: &str| -> PyResult<Vec<f64>> {
        let a: PyReadonlyArray1<f64> = get(key)?.extract()?;
        Ok(a.as_array().iter().copied().collect())
    };
    let form = match get("form")?.extract::<String>()?.as_str() {
        "plain" => Form::Plain,
        "bypass" => Form::Bypass,
        "compound" => Form::Compound,
        other => {
            return Err(PyValueError::new_err(format!(
                "form must be 'plain', 'bypass' or 'compound', got {other:?}"
            )));
        }
    };
    let layer = match get("norm")?.extract::<String>()?.as_str() {
        "layer" => true,
        "rms" => false,
        other => {
            return Err(PyValueError::new_err(format!(
                "norm must be 'layer' or 'rms', got {other:?}"
            )));
        }
    };
    let plain = SiteCapture::new(
        get("name")?.extract()?,
        if form == Form::Compound {
            Form::Plain
        } else {
            form
        },
        get("p")?.extract()?,
        get("d")?.extract()?,
        flat("v")?,
        flat("h")?,
        layer,
        flat("gamma")?,
        flat("beta")?,
        get("eps")?.extract()?,
    )
    .map_err(to_py)?;
    if form != Form::Compound {
        return Ok(plain);
    }
    plain
        .into_compound(flat("gamma2")?, flat("beta2")?, get("eps2")?.extract()?)
        .map_err(to_py)
}

/// `tokens`: `None` for every token, else a sample of at most that many.
fn token_choice(tokens: Option<usize>) -> PyResult<Tokens> {
    tokens.map_or(Ok(Tokens::All), |n| {
        Tokens::sample(n).map_err(|_| PyValueError::new_err("tokens must be at least 1 or 'all'"))
    })
}

/// How the progress is shown on stderr (`progress=` of the Python audit).
#[derive(Clone, Copy, PartialEq)]
enum Shown {
    /// Nothing.
    No,
    /// One line rewritten in place (`\r`): stderr is a terminal.
    Terminal,
    /// One line per 10 % of the work (and the last): stderr is a file or
    /// a pipe.
    Lines,
    /// [`Shown::Lines`] once the run has taken [`QUIET_SECONDS`] (the
    /// default on a stderr that is not a terminal: a short audit prints
    /// nothing).
    SlowLines,
}

/// Seconds a [`Shown::SlowLines`] run stays quiet.
const QUIET_SECONDS: f64 = 2.0;

fn shown(progress: &str) -> PyResult<Shown> {
    Ok(match progress {
        "" => Shown::No,
        "terminal" => Shown::Terminal,
        "lines" => Shown::Lines,
        "slow" => Shown::SlowLines,
        other => {
            return Err(PyValueError::new_err(format!(
                "progress must be '', 'terminal', 'lines' or 'slow', got {other:?}"
            )));
        }
    })
}

/// Runs `body` with the progress on stderr as `shown` says (`what` names
/// the sites counted).
fn with_line<T>(shown: Shown, what: &'static str, body: impl FnOnce() -> T) -> T {
    if shown == Shown::No {
        return body();
    }
    let start = std::time::Instant::now();
    // The last line printed: (tenths of the work, sites done).
    let printed = std::cell::Cell::new(None::<(u32, usize)>);
    let line = move |done, sites, fraction: f64, left| {
        let text = stderr_line(what, done, sites, fraction, left);
        if shown == Shown::Terminal {
            eprint!("\r{text}   ");
            return;
        }
        let tenth = (10.0 * fraction).floor() as u32;
        let quiet = shown == Shown::SlowLines && start.elapsed().as_secs_f64() < QUIET_SECONDS;
        let news = printed
            .get()
            .is_none_or(|(t, d)| tenth > t || (done == sites && d < sites));
        if !quiet && news {
            printed.set(Some((tenth, done)));
            eprintln!("{text}");
        }
    };
    let out = with_progress(Box::new(line), body);
    if shown == Shown::Terminal {
        eprintln!();
    }
    out
}

/// The progress line: `dropmc audit: 5/24 sites, 41 % done, about 12 s
/// left`.
fn stderr_line(what: &str, done: usize, sites: usize, fraction: f64, left: f64) -> String {
    let left = if left.is_finite() {
        format!("about {left:.0} s left")
    } else {
        "estimating the time left".into()
    };
    format!(
        "dropmc audit: {done}/{sites} {what}, {:.0} % done, {left}",
        100.0 * fraction
    )
}

/// `seconds` checked: `None`, or a finite number > 0.
fn checked_seconds(seconds: Option<f64>) -> PyResult<Option<f64>> {
    if seconds.is_some_and(|s| !(s.is_finite() && s > 0.0)) {
        return Err(PyValueError::new_err(
            "time_budget must be a finite number of seconds > 0",
        ));
    }
    Ok(seconds)
}

/// Audits `sites` at `samples` masks per token from `seed`, on every token
/// (`tokens = None`) or a seeded sample of `tokens` per site, sharing
/// `seconds` when given (`dropmc::audit::audit_sites_within`) and stopped
/// at `deadline` seconds of wall time (a `TimeoutError`,
/// [`supervised`]), printing the progress line on stderr when `progress`;
/// returns `(table, json, truths)`, `truths` one `(E[norm], SE)` pair of
/// flat lists (audited tokens × d) per site.
#[pyfunction]
#[pyo3(signature = (sites, samples, seed, tokens=None, seconds=None, progress="", deadline=None))]
#[allow(clippy::too_many_arguments)]
pub fn audit_sites(
    py: Python<'_>,
    sites: Vec<Bound<'_, PyDict>>,
    samples: u64,
    seed: u64,
    tokens: Option<usize>,
    seconds: Option<f64>,
    progress: &str,
    deadline: Option<f64>,
) -> PyResult<(String, String, Vec<Truth>)> {
    let tokens = token_choice(tokens)?;
    let shown = shown(progress)?;
    let seconds = checked_seconds(seconds)?;
    let deadline = checked_seconds(deadline)?;
    let captures: Vec<SiteCapture> = sites.iter().map(capture).collect::<PyResult<_>>()?;
    let run = || audit_all(&captures, samples, tokens, seconds, seed);
    let audits = supervised(py, deadline, "audit of the norm sites", || {
        with_line(shown, "sites", run)
    })?;
    let truths = audits
        .iter()
        .map(|a| (a.truth.clone(), a.truth_se.clone()))
        .collect();
    Ok((report::table(&audits), report::json(&audits), truths))
}

/// One attention site from its dict: `name`, `p`, `shape` (`batch, heads,
/// queries, keys, head_dim, embed`), `weights` (`B·H·L·S`), `values`
/// (`B·H·S·J`), `out_weight` (`E·H·J`), `out_bias` (`E`), flat float64.
fn attention_capture(site: &Bound<'_, PyDict>) -> PyResult<AttentionCapture> {
    let get = |key: &str| -> PyResult<Bound<'_, PyAny>> {
        site.get_item(key)?.ok_or_else(|| {
            PyValueError::new_err(format!("attention site dict lacks the key {key:?}"))
        })
    };
    let flat = |key: &str| -> PyResult<Vec<f64>> {
        let a: PyReadonlyArray1<f64> = get(key)?.extract()?;
        Ok(a.as_array().iter().copied().collect())
    };
    AttentionCapture::new(
        get("name")?.extract()?,
        get("p")?.extract()?,
        get("shape")?.extract()?,
        flat("weights")?,
        flat("values")?,
        flat("out_weight")?,
        flat("out_bias")?,
    )
    .map_err(to_py)
}

/// Audits attention `sites` (the sampled check at `samples` draws per
/// query, head and coordinate, from `seed`, on every query row or a seeded
/// sample of `rows` per site); returns `(table, json, moments)`, `moments`
/// one `(E[out], Var(out))` pair of flat lists (`B·L × E`) per site; the
/// progress line on stderr when `progress`; stopped at `deadline` seconds
/// of wall time (a `TimeoutError`, [`supervised`]).
#[pyfunction]
#[pyo3(signature = (sites, samples, seed, rows=None, progress="", deadline=None))]
pub fn audit_attention_sites(
    py: Python<'_>,
    sites: Vec<Bound<'_, PyDict>>,
    samples: u64,
    seed: u64,
    rows: Option<usize>,
    progress: &str,
    deadline: Option<f64>,
) -> PyResult<(String, String, Vec<Truth>)> {
    let rows = token_choice(rows)?;
    let shown = shown(progress)?;
    let deadline = checked_seconds(deadline)?;
    let captures: Vec<AttentionCapture> = sites
        .iter()
        .map(attention_capture)
        .collect::<PyResult<_>>()?;
    let run = || attention_all(&captures, samples, rows, seed);
    let audits = supervised(py, deadline, "attention audit", || {
        with_line(shown, "attention sites", run)
    })?;
    let moments = audits
        .iter()
        .map(|a| (a.mean.clone(), a.variance.clone()))
        .collect();
    Ok((
        report::attention_table(&audits),
        report::attention_json(&audits),
        moments,
    ))
}

/// `(all, least)`: the estimated wall seconds of the audit of the norm
/// `sites` (at `samples` masks on the tokens `tokens` picks) and attention
/// `attention` sites (at `attention_samples`, on the rows `rows` picks),
/// and of the least a time budget lets it do
/// ([`dropmc::audit::estimate`]).
#[pyfunction]
#[pyo3(signature = (sites, samples, tokens, attention, attention_samples, rows))]
pub fn audit_estimate(
    sites: Vec<Bound<'_, PyDict>>,
    samples: u64,
    tokens: Option<usize>,
    attention: Vec<Bound<'_, PyDict>>,
    attention_samples: u64,
    rows: Option<usize>,
) -> PyResult<(f64, f64)> {
    let captures: Vec<SiteCapture> = sites.iter().map(capture).collect::<PyResult<_>>()?;
    let heads: Vec<AttentionCapture> = attention
        .iter()
        .map(attention_capture)
        .collect::<PyResult<_>>()?;
    let (all, least) = estimate::sites_seconds(&captures, samples, token_choice(tokens)?);
    let attention = estimate::attention_seconds(&heads, attention_samples, token_choice(rows)?);
    Ok((all + attention, least + attention))
}
