//! `dropmc.eval(quantity, **kwargs)`: `dropmc eval <quantity> --json` from
//! Python. The Python side turns the keyword arguments into the CLI's own
//! arguments (`x=[1, 2]` → `--x 1,2`, full precision); this runs them and
//! returns the JSON the CLI prints (`serde_json::to_string_pretty`).

use dropmc::Error;
use dropmc::eval::EvalOutput;
use pyo3::prelude::*;

use std::sync::{Arc, Mutex};

use dropmc::engine::cancel::with_cancellation;

use crate::{run_on_one_thread, to_py};

/// Takes the GIL and runs Python's signal handlers: true when one raised
/// (Ctrl-C's `KeyboardInterrupt`), whose exception is kept in `pending`
/// to be raised when the call returns.
pub(crate) fn interrupted_by_a_signal(pending: &Mutex<Option<PyErr>>) -> bool {
    Python::attach(|py| match py.check_signals() {
        Ok(()) => false,
        Err(e) => {
            if let Ok(mut p) = pending.lock() {
                *p = Some(e);
            }
            true
        }
    })
}

/// The JSON `dropmc eval <quantity> <args…> --json` prints.
///
/// The GIL is released while Rust runs; the engine asks, before each chunk
/// of draws, whether a signal arrived ([`interrupted_by_a_signal`]), so
/// Ctrl-C stops the run within a chunk and raises the signal's exception
/// (`KeyboardInterrupt`) here.
#[pyfunction]
pub fn eval_json(py: Python<'_>, quantity: String, args: Vec<String>) -> PyResult<String> {
    let pending = Arc::new(Mutex::new(None));
    let seen = Arc::clone(&pending);
    let output = py.detach(|| {
        run_on_one_thread(move || {
            with_cancellation(Box::new(move || interrupted_by_a_signal(&seen)), || {
                run_args(&quantity, &args)
            })
        })
    });
    let output = output.map_err(pyo3::exceptions::PyRuntimeError::new_err)?;
    if let Some(signal) = pending.lock().ok().and_then(|mut p| p.take()) {
        return Err(signal);
    }
    let output = output.map_err(to_py)?;
    serde_json::to_string_pretty(&output)
        .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(format!("JSON: {e}")))
}

/// Runs `quantity` of the crate's registry on CLI-style flags, with the
/// CLI's own clap command ([`dropmc::eval::EvalQuantity::run_args`]), so the
/// output is the one `dropmc eval <quantity> --json` prints.
fn run_args(quantity: &str, args: &[String]) -> Result<EvalOutput, Error> {
    dropmc::Registry::default()
        .quantity(quantity)?
        .run_args(args)
}

/// The keyword arguments `dropmc.eval(quantity, ...)` accepts, as
/// `(python_name, required, takes_value)` (`running_mean` for
/// `--running-mean`; `takes_value` false for a bare flag), so Python can
/// name a missing or unknown argument in its own terms.
#[pyfunction]
pub fn eval_arguments(quantity: String) -> PyResult<Vec<(String, bool, bool)>> {
    let registry = dropmc::Registry::default();
    let command = registry.quantity(&quantity).map_err(to_py)?.command();
    Ok(command
        .get_arguments()
        .filter_map(|a| {
            let long = a.get_long()?;
            let takes_value = a.get_action().takes_values();
            Some((long.replace('-', "_"), a.is_required_set(), takes_value))
        })
        .filter(|(name, _, _)| name != "help")
        .collect())
}
