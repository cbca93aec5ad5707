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
// clap command (`dropmc::cli::Cli`) and calls the library function of the
// quantities the Python tests use. At the merge, replace the module with
//
//     dropmc::eval::quantities().into_iter().find(|q| q.name() == quantity)
//         .ok_or(Error::UnknownQuantity { .. })?.run_args(args)
//
// and delete it.
mod provisional {
    use clap::Parser;
    use dropmc::cli::input::{read_eps, read_list, read_number};
    use dropmc::cli::{Cli, Command, EvalCommand};
    use dropmc::engine::Budget;

    use super::{Error, EvalOutput};

    pub fn run_args(quantity: &str, args: &[String]) -> Result<EvalOutput, Error> {
        let argv = ["dropmc", "eval", quantity]
            .into_iter()
            .map(String::from)
            .chain(args.iter().cloned());
        let cli = Cli::try_parse_from(argv).map_err(|e| Error::InvalidOption {
            what: e.to_string().trim().to_string(),
        })?;
        let Some(Command::Eval(command)) = cli.command else {
            return Err(Error::InvalidOption {
                what: "not an eval command".into(),
            });
        };
        let list =
            |flag: &str, v: &Option<String>| v.as_deref().map(|t| read_list(flag, t)).transpose();
        match command {
            EvalCommand::Ln(a) => dropmc::eval::norm::ln(
                &read_list("--x", &a.x)?,
                read_number("--p", &a.p)?,
                list("--gamma", &a.gamma)?,
                list("--beta", &a.beta)?,
                read_eps("--eps", &a.eps)?,
                Budget::new(a.sampling.samples, a.sampling.seed)?,
            ),
            EvalCommand::Rms(a) => dropmc::eval::norm::rms(
                &read_list("--x", &a.x)?,
                read_number("--p", &a.p)?,
                list("--gamma", &a.gamma)?,
                read_eps("--eps", &a.eps)?,
                Budget::new(a.sampling.samples, a.sampling.seed)?,
            ),
            EvalCommand::Moments(a) => dropmc::eval::moments::moments(
                &read_list("--x", &a.x)?,
                read_number("--p", &a.p)?,
                Budget::new(a.sampling.samples, a.sampling.seed)?,
            ),
            _ => Err(Error::InvalidOption {
                what: format!(
                    "dropmc.eval({quantity:?}) needs dropmc::eval::quantity (not yet merged); \
                     this build evaluates ln, rms and moments"
                ),
            }),
        }
    }
}
