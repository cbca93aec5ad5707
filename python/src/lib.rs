//! `dropmc._dropmc`: the Rust half of the Python package (issue 17).
//!
//! The Python half (`python/dropmc/__init__.py`) wraps the user's callables
//! (checking every array they return) and turns the results into the
//! `Result` class; this half runs dropmc's claims on them:
//!
//! * [`check_dropout`]: the conformance claims at the user's drop rate
//!   ([`claims`]), through the suite's own verdict machinery;
//! * [`check_norm_site`](norm_site::check_norm_site): `E[norm(dropout(x))]` against the exact
//!   enumeration ([`norm_site`]);
//! * [`eval_json`](eval_args::eval_json): `dropmc eval <quantity>` on CLI-style arguments
//!   ([`eval_args`]).
//!
//! Every entry point releases the GIL while Rust runs (the user's callables
//! take it back for each batch), runs on a one-thread rayon pool made of
//! the calling thread ([`run_on_one_thread`]) so the rows are consumed in a
//! fixed order, and turns a panic into a Python `RuntimeError` instead of
//! unwinding into the interpreter.

// A cdylib: its documentation is for maintainers, who read the private
// modules it links to.
#![allow(rustdoc::private_intra_doc_links)]

mod attention;
mod audit;
mod batchnorm;
mod claims;
mod corrections;
mod dtype;
mod eval_args;
mod forward;
mod linear_path;
mod mask_shape;
mod norm_site;
mod small_calls;
mod supervise;

use std::panic::{AssertUnwindSafe, catch_unwind};

use dropmc::Error;
use dropmc::claims::{ClaimResult, check};
use dropmc::conformance::report::{Report, to_json};
use dropmc::conformance::{Options, samples_for};
use dropmc::engine::{Budget, derive_seed};
use dropmc::ops::{Rate, Subject};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde_json::{Value, json};

use forward::{Dtype, PyForward};

thread_local! {
    /// Per calling thread, a rayon pool whose one thread is the caller
    /// itself (`use_current_thread`; rayon then leaks the pool's registry,
    /// one per Python thread that ever calls dropmc).
    static POOL: Result<rayon::ThreadPool, String> = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .use_current_thread()
        .build()
        .map_err(|e| format!("could not set up the rayon pool: {e}"));
}

/// Runs `f` on a one-thread rayon pool made of the calling thread,
/// catching a panic as an error message.
///
/// One thread: the engine's parallel loop then visits its chunks in order,
/// so the user's rows are consumed in a fixed order. The calling thread:
/// the user's callables run on the thread that called dropmc, so its
/// thread-local state holds (`torch.no_grad()`, `numpy.errstate`) and
/// Ctrl-C, which Python delivers to the main thread, interrupts the
/// callable running now (re-raised as `KeyboardInterrupt`).
pub fn run_on_one_thread<T: Send>(f: impl FnOnce() -> T + Send) -> Result<T, String> {
    POOL.with(|pool| {
        let pool = pool.as_ref().map_err(|e| e.clone())?;
        pool.install(|| catch_unwind(AssertUnwindSafe(f)))
            .map_err(|panic| {
                let text = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into());
                format!("dropmc panicked (a bug: please report it): {text}")
            })
    })
}

/// A dropmc error as the Python exception it means.
pub fn to_py(e: Error) -> PyErr {
    match e {
        Error::Framework { .. } => PyRuntimeError::new_err(e.to_string()),
        _ => PyValueError::new_err(e.to_string()),
    }
}

/// The rate, or `ValueError` with dropmc's rule.
fn rate(p: f64) -> PyResult<Rate> {
    Rate::new(p).map_err(to_py)
}

fn dtype(name: &str) -> PyResult<Dtype> {
    Dtype::from_name(name).ok_or_else(|| {
        PyValueError::new_err(format!("dtype must be {}, got {name:?}", dtype::ACCEPTED))
    })
}

/// Runs the conformance claims on the wrapped callables. Returns the JSON
/// of the run (`dropmc report --json`'s layout, the skipped claims added)
/// and one summary dict per claim.
#[pyfunction]
#[pyo3(signature = (train, evaluate, backward, p, dtype_name, moment_x, semantics_x, samples, seed, has_rng_state, rounding = "any"))]
#[allow(clippy::too_many_arguments)]
fn check_dropout(
    py: Python<'_>,
    train: Py<PyAny>,
    evaluate: Py<PyAny>,
    backward: Option<Py<PyAny>>,
    p: f64,
    dtype_name: &str,
    moment_x: Vec<f64>,
    semantics_x: Vec<f64>,
    samples: Option<u64>,
    seed: u64,
    has_rng_state: bool,
    rounding: &str,
) -> PyResult<(String, Vec<Py<PyDict>>)> {
    let rate = rate(p)?;
    let dtype = dtype(dtype_name)?;
    let survivor_rounding = claims::SurvivorRounding::from_name(rounding).ok_or_else(|| {
        PyValueError::new_err(format!(
            "rounding must be \"any\" or \"once\", got {rounding:?}"
        ))
    })?;
    let one_row = small_calls::one_row_forward(py, &train, dtype);
    let forward = PyForward::new(
        train,
        evaluate,
        backward,
        dtype,
        derive_seed(seed, "python/backward gradients"),
    );
    let setup = claims::Setup {
        forward: &forward,
        rate,
        moment_x,
        semantics_x,
        has_rng_state,
        samples,
        rounding: survivor_rounding,
    };
    let small = claims::Setup {
        forward: &one_row,
        moment_x: setup.moment_x.clone(),
        semantics_x: Vec::new(),
        ..setup
    };
    let options = Options {
        seed,
        samples,
        ..Options::default()
    };
    let (mut results, skipped) =
        run_detached(py, &forward, || run_claims(&setup, &small, &options))?;
    if let Some(e) = one_row.take_failure() {
        return Err(e);
    }
    let mut nulls = claims::moment_nulls(&setup);
    nulls.extend(small_calls::carried_null(
        &nulls,
        small_calls::ONE_ROW_SUM_MEAN,
    ));
    let biases = claims::judge_composite(&mut results, &nulls);
    let rounding = claims::Rounding {
        dtype,
        rate,
        x: &setup.moment_x,
    };
    let likely_causes = claims::likely_causes(&results, &rounding, &biases);
    let fields = [
        ("likely_causes", json!(likely_causes)),
        ("p", json!(p)),
        ("dtype", json!(dtype_name)),
        ("rows", json!(forward.rows_served() + one_row.rows_served())),
        ("rounding", json!(rounding_name(survivor_rounding))),
        (
            "call_rows",
            json!([
                forward.call_rows(setup.moment_x.len()),
                small_calls::CALL_ROWS
            ]),
        ),
    ];
    outcome_json(py, seed, results, &skipped, fields)
}

/// A Python check's result as its JSON text (the report of `results`, the
/// `skipped` claims appended, then `fields` set) and one summary dict per
/// claim, the skipped ones included.
pub fn outcome_json<const N: usize>(
    py: Python<'_>,
    seed: u64,
    results: Vec<ClaimResult>,
    skipped: &[(&'static str, String)],
    fields: [(&str, Value); N],
) -> PyResult<(String, Vec<Py<PyDict>>)> {
    let report = Report {
        seed,
        subject: "python".into(),
        results,
    };
    let mut json = to_json(&report);
    if let Some(Value::Array(list)) = json.get_mut("claims") {
        list.extend(skipped.iter().map(|(id, note)| {
            json!({
                "id": id,
                "family": claims::family_of(id),
                "verdict": "skipped",
                "note": note,
            })
        }));
    }
    for (key, value) in fields {
        json[key] = value;
    }
    let mut summaries = report
        .results
        .iter()
        .map(|r| summary(py, r))
        .collect::<PyResult<Vec<_>>>()?;
    for (id, note) in skipped {
        let d = PyDict::new(py);
        d.set_item("id", id)?;
        d.set_item("family", claims::family_of(id))?;
        d.set_item("verdict", "skipped")?;
        for key in ["z", "p_value", "mde", "estimate", "analytic", "component"] {
            d.set_item(key, py.None())?;
        }
        d.set_item("note", note)?;
        summaries.push(d.unbind());
    }
    let text = serde_json::to_string_pretty(&json)
        .map_err(|e| PyRuntimeError::new_err(format!("JSON: {e}")))?;
    Ok((text, summaries))
}

pub type Outcome = (Vec<ClaimResult>, Vec<(&'static str, String)>);

/// The option's name of a survivor rounding rule.
fn rounding_name(rule: claims::SurvivorRounding) -> &'static str {
    match rule {
        claims::SurvivorRounding::Any => "any",
        claims::SurvivorRounding::Once => "once",
    }
}

/// The claims of `setup`, then the small-call mean on `small` (the same
/// input through a forward making one-row calls, [`small_calls`]).
fn run_claims(
    setup: &claims::Setup,
    small: &claims::Setup,
    options: &Options,
) -> Result<Outcome, Error> {
    let layer = claims::PyDropout::new(setup);
    let one_row = claims::PyDropout::new(small);
    let subject = Subject::with_dropout(&layer);
    let (run, mut skipped) = claims::claims(setup);
    let mut results = check_claims(&run, &subject, options)?;
    // After an exception in the user's callable, no further calls.
    if setup.rate.p() > 0.0 && !setup.forward.failed() {
        let mut run = vec![
            small_calls::one_row_mean(
                small_calls::ONE_ROW_SUM_MEAN,
                &one_row,
                small.moment_x.clone(),
                small.rate,
                small_calls::row_sum(claims::sum_mean_target(small)),
                setup.forward.call_rows(setup.moment_x.len()),
            ),
            small_calls::one_row_survivors(
                small.forward,
                &setup.semantics_x,
                setup.rate,
                setup.rounding,
            ),
        ];
        match small_calls::one_row_repeats(
            small.forward,
            &setup.semantics_x,
            setup.rate,
            setup.samples,
        ) {
            Ok(claim) => run.push(claim),
            Err(why) => skipped.push((small_calls::ONE_ROW_MASKS_NEVER_REPEAT, why)),
        }
        results.extend(check_claims(&run, &subject, options)?);
    }
    Ok((results, skipped))
}

/// Runs `f` (claims on `forward`) without the GIL on the one-thread pool
/// ([`run_on_one_thread`]); an exception a Python callable raised is
/// re-raised as it was, a dropmc error as [`to_py`] words it.
pub fn run_detached(
    py: Python<'_>,
    forward: &PyForward,
    f: impl FnOnce() -> Result<Outcome, Error> + Send,
) -> PyResult<Outcome> {
    let outcome = py.detach(|| run_on_one_thread(f));
    if let Some(e) = forward.take_failure() {
        return Err(e);
    }
    outcome.map_err(PyRuntimeError::new_err)?.map_err(to_py)
}

/// The suite's options at the user's `seed` and `samples` cap.
pub fn run_options(seed: u64, samples: Option<u64>) -> Options {
    Options {
        seed,
        samples,
        ..Options::default()
    }
}

/// Checks each claim on `subject` at its budget under `options`, each on
/// its own stream (`derive_seed(seed, id)`), in order.
pub fn check_claims(
    run: &[claims::PyClaim],
    subject: &Subject,
    options: &Options,
) -> Result<Vec<ClaimResult>, Error> {
    let mut results = Vec::with_capacity(run.len());
    for claim in run {
        let budget = Budget::new(
            samples_for(claim, options),
            derive_seed(options.seed, claim.card.id),
        )?;
        results.push(check(claim, subject, budget));
    }
    Ok(results)
}

/// The worst component of a claim (largest `|z|`) as a dict.
fn summary(py: Python<'_>, r: &ClaimResult) -> PyResult<Py<PyDict>> {
    let d = PyDict::new(py);
    d.set_item("id", r.id)?;
    d.set_item("family", r.family)?;
    d.set_item("verdict", r.verdict.label())?;
    let worst = r.worst();
    let test = worst.map(|k| r.tests[k]);
    d.set_item("z", test.map(|t| t.z))?;
    d.set_item("p_value", test.map(|t| t.p_value))?;
    d.set_item("mde", test.map(|t| t.mde))?;
    d.set_item("estimate", worst.map(|k| r.estimate[k].value))?;
    d.set_item("analytic", worst.and_then(|k| r.target.get(k).copied()))?;
    d.set_item(
        "component",
        worst.filter(|_| r.shape == dropmc::claims::Shape::Vector),
    )?;
    d.set_item("samples", r.samples)?;
    d.set_item("min_samples", r.min_samples)?;
    d.set_item("formula", r.formula)?;
    let note = r
        .error
        .clone()
        .or_else(|| r.inconclusive_reason())
        .or_else(|| r.bound_failure_reason())
        .or_else(|| r.note.clone());
    d.set_item("note", note)?;
    Ok(d.unbind())
}

/// The claims' default inputs in the dtype named `dtype_name`: (moments,
/// semantics).
#[pyfunction]
fn default_inputs(dtype_name: &str) -> PyResult<(Vec<f64>, Vec<f64>)> {
    Ok((
        claims::MOMENT_X.to_vec(),
        claims::semantics_x(dtype(dtype_name)?),
    ))
}

/// The suite's per-assertion critical `|z|`.
#[pyfunction]
fn critical_z() -> f64 {
    dropmc::stats::critical_z()
}

/// The power at which a test's minimum detectable effect is quoted.
#[pyfunction]
fn mde_power() -> f64 {
    dropmc::stats::POWER
}

#[pymodule]
fn _dropmc(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?; // dropmc.__version__: the wheel's own version
    m.add_function(wrap_pyfunction!(check_dropout, m)?)?;
    m.add_function(wrap_pyfunction!(norm_site::check_norm_site, m)?)?;
    m.add_function(wrap_pyfunction!(eval_args::eval_json, m)?)?;
    m.add_function(wrap_pyfunction!(eval_args::eval_arguments, m)?)?;
    m.add_function(wrap_pyfunction!(default_inputs, m)?)?;
    m.add_function(wrap_pyfunction!(critical_z, m)?)?;
    m.add_function(wrap_pyfunction!(audit::audit_sites, m)?)?;
    m.add_function(wrap_pyfunction!(audit::audit_estimate, m)?)?;
    m.add(
        "AUDIT_UNBUDGETED_SECONDS",
        dropmc::audit::estimate::UNBUDGETED_SECONDS,
    )?;
    m.add_function(wrap_pyfunction!(linear_path::audit_linear_path, m)?)?;
    m.add_function(wrap_pyfunction!(linear_path::first_order_linear_path, m)?)?;
    m.add_function(wrap_pyfunction!(linear_path::audit_attention_path, m)?)?;
    m.add("AUDIT_DEFAULT_SAMPLES", dropmc::audit::DEFAULT_SAMPLES)?;
    m.add("AUDIT_DEFAULT_TOKENS", dropmc::audit::DEFAULT_TOKENS)?;
    m.add(
        "AUDIT_DEFAULT_ATTENTION_ROWS",
        dropmc::audit::DEFAULT_ATTENTION_ROWS,
    )?;
    m.add(
        "AUDIT_DEFAULT_ATTENTION_SAMPLES",
        dropmc::audit::DEFAULT_ATTENTION_SAMPLES,
    )?;
    m.add_function(wrap_pyfunction!(audit::audit_attention_sites, m)?)?;
    m.add_function(wrap_pyfunction!(mde_power, m)?)?;
    m.add_function(wrap_pyfunction!(mask_shape::check_mask_shape, m)?)?;
    m.add_function(wrap_pyfunction!(attention::check_attention, m)?)?;
    m.add_function(wrap_pyfunction!(attention::attention_defaults, m)?)?;
    m.add_function(wrap_pyfunction!(batchnorm::check_batchnorm, m)?)?;
    m.add_function(wrap_pyfunction!(batchnorm::batchnorm_defaults, m)?)?;
    corrections::register(m)?;
    Ok(())
}
