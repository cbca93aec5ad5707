//! `dropmc report`: every claim of the registry, its verdict and numbers.

use std::process::ExitCode;

use clap::Args;

use super::emit::{emit, verdict};
use super::progress;
use crate::conformance::report::{self, Options};
use crate::error::Error;
use crate::eval::input::parse_count;
use crate::ops::Subject;
use crate::registry::Registry;

/// Options of `report`.
#[derive(Debug, Args, Default)]
pub struct ReportArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Seed of the random streams (its help names the default: [`seed_help`]).
    /// A negative value reaches the parser (which names `--seed` and the
    /// accepted forms) rather than reading as an unknown flag.
    #[arg(long, value_parser = parse_count, allow_negative_numbers = true)]
    pub seed: Option<u64>,
    /// Draws per claim (default: each claim's own budget).
    #[arg(long, value_parser = parse_count)]
    pub samples: Option<u64>,
    /// Run only this family.
    #[arg(long)]
    pub family: Option<String>,
    /// Do not fit the table to the terminal (one line per claim).
    #[arg(long)]
    pub wide: bool,
}

/// `--seed`'s help, naming the default seed ([`crate::engine::DEFAULT_SEED`]).
pub fn seed_help() -> String {
    format!(
        "Seed of the random streams [default: {}]",
        crate::engine::DEFAULT_SEED
    )
}

/// Runs `report`.
pub fn run(registry: &Registry, args: ReportArgs) -> Result<ExitCode, Error> {
    let options = Options {
        seed: args.seed,
        samples: args.samples,
        family: args.family,
    };
    let total = report::select(registry, &options)?.len() as u64;
    let bar = progress::bar(total, "claims", args.json);
    let report =
        report::run_with_progress(registry, &Subject::reference(), &options, |done, _| {
            bar.set_position(done as u64)
        })?;
    bar.finish_and_clear();
    emit(args.json, &report::to_json(&report), || {
        let width = (!args.wide).then(crate::table::output_width);
        report::table_fitted(&report, width)
    });
    Ok(verdict(&report))
}
