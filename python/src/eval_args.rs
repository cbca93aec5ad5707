//! `dropmc.eval(quantity, **kwargs)`: `dropmc eval <quantity> --json` from
//! Python. The Python side turns the keyword arguments into the CLI's own
//! arguments (`x=[1, 2]` → `--x 1,2`, full precision); this runs them and
//! returns the JSON the CLI prints (`serde_json::to_string_pretty`).

use dropmc::Error;
use dropmc::eval::EvalOutput;
use pyo3::prelude::*;

use crate::{run_on_one_thread, to_py};

/// The JSON `dropmc eval <quantity> <args…> --json` prints.
#[pyfunction]
pub fn eval_json(py: Python<'_>, quantity: String, args: Vec<String>) -> PyResult<String> {
    let output = py.detach(|| run_on_one_thread(|| run_args(&quantity, &args)));
    let output = output
        .map_err(pyo3::exceptions::PyRuntimeError::new_err)?
        .map_err(to_py)?;
    serde_json::to_string_pretty(&output)
        .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(format!("JSON: {e}")))
}

/// Runs `quantity` of the crate's registry on CLI-style flags, with the
/// CLI's own clap command ([`dropmc::eval::EvalQuantity::run_args`]), so the
/// output is the one `dropmc eval <quantity> --json` prints.
fn run_args(quantity: &str, args: &[String]) -> Result<EvalOutput, Error> {
    dropmc::registry::Registry::default()
        .quantity(quantity)?
        .run_args(args)
}
