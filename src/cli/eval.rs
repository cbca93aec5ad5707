//! `dropmc eval <quantity>`: a family's formulas, exact values and Monte
//! Carlo estimates on the user's own numbers. The quantities and their
//! arguments come from the registry ([`crate::eval::EvalQuantity`]).

use std::process::ExitCode;

use clap::Args;

use super::emit::emit;
use super::progress;
use crate::error::Error;
use crate::registry::Registry;

/// Options of `eval`: the quantities are subcommands built from the
/// registry (see [`super::command`]).
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Print JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
}

/// Runs `dropmc eval <quantity>` from its matches and prints the table or
/// the JSON (`serde_json::to_string_pretty` of the [`crate::eval::EvalOutput`],
/// the same text the bindings get from `run_args`).
pub fn run(registry: &Registry, matches: &clap::ArgMatches) -> Result<ExitCode, Error> {
    let json = matches.get_flag("json");
    let Some((name, sub)) = matches.subcommand() else {
        return Err(Error::InvalidOption {
            what: "eval needs a quantity (dropmc eval --help lists them)".into(),
        });
    };
    let quantity = registry.quantity(name)?;
    // A bar over the draws of the kernel running now (an eval runs a few:
    // the outputs, the pairs for a variance, ...).
    let bar = progress::bar(1, "draws", json);
    let shown = bar.clone();
    let output = crate::ops::fast::observe_progress(
        Box::new(move |done, total| {
            shown.set_length(total);
            shown.set_position(done);
        }),
        || quantity.run_matches(sub),
    );
    bar.finish_and_clear();
    let output = output?;
    emit(json, &output, || crate::eval::table(&output));
    Ok(ExitCode::SUCCESS)
}
