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
    let output = py.detach(|| run_on_one_thread(|| provisional::run_args(&quantity, &args)));
    let output = output
        .map_err(pyo3::exceptions::PyRuntimeError::new_err)?
        .map_err(to_py)?;
    serde_json::to_string_pretty(&output)
        .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(format!("JSON: {e}")))
}

// PROVISIONAL: until `dropmc::eval::quantity::EvalQuantity::run_args` lands
// in main (another change), this parses the arguments with the CLI's own
// clap command (`dropmc::cli::Cli`) and runs the parsed `eval` subcommand
// through the CLI's own `dropmc::cli::eval::eval_output`. At the merge,
// replace the module with
//
//     dropmc::eval::quantities().into_iter().find(|q| q.name() == quantity)
//         .ok_or(Error::UnknownQuantity { .. })?.run_args(args)
//
// and delete it.
mod provisional {
    use clap::Parser;
    use dropmc::cli::{Cli, Command};

    use super::{Error, EvalOutput};

    pub fn run_args(quantity: &str, args: &[String]) -> Result<EvalOutput, Error> {
        let argv = ["dropmc", "eval", quantity]
            .into_iter()
            .map(String::from)
            .chain(args.iter().cloned());
        let cli = Cli::try_parse_from(argv).map_err(|e| Error::InvalidOption {
            what: e.to_string().trim().to_string(),
        })?;
        match cli.command {
            Some(Command::Eval(command)) => Ok(dropmc::cli::eval::eval_output(command)?.0),
            _ => Err(Error::InvalidOption {
                what: format!("`dropmc eval {quantity}` is not an eval command"),
            }),
        }
    }
}
