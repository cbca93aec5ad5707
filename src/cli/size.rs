//! `dropmc size`: the measured false-alarm rate at small budgets.

use std::process::ExitCode;
use std::sync::LazyLock;

use clap::Args;

use super::emit::{emit, passed};
use super::progress;
use crate::conformance::verify::Replication;
use crate::conformance::verify::size::DEFAULT_BUDGETS;
use crate::error::Error;
use crate::eval::input::parse_count;
use crate::ops::Subject;
use crate::registry::Registry;

/// `--budgets`' default: [`DEFAULT_BUDGETS`] as the command line writes it.
fn default_budgets() -> &'static str {
    static TEXT: LazyLock<String> =
        LazyLock::new(|| DEFAULT_BUDGETS.map(|b| b.to_string()).join(","));
    &TEXT
}

/// Options of `size`.
#[derive(Debug, Args)]
pub struct SizeArgs {
    /// Budgets (draws per claim), comma-separated.
    #[arg(long, default_value = default_budgets())]
    pub budgets: String,
    /// Number of seeds per budget.
    #[arg(long, default_value_t = 40, value_parser = parse_count)]
    pub seeds: u64,
    /// First seed; the run uses first-seed .. first-seed + seeds.
    #[arg(long, default_value_t = 1, value_parser = parse_count)]
    pub first_seed: u64,
    /// Only this family.
    #[arg(long)]
    pub family: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `size`.
pub fn run(registry: &Registry, args: SizeArgs) -> Result<ExitCode, Error> {
    use crate::conformance::verify::size::{SizeOptions, measure, table};
    let budgets = args
        .budgets
        .split(',')
        .map(|b| {
            parse_count(b).map_err(|e| Error::InvalidOption {
                what: format!("--budgets: {e}"),
            })
        })
        .collect::<Result<Vec<u64>, Error>>()?;
    let options = SizeOptions {
        budgets,
        replication: Replication {
            seeds: args.seeds,
            first_seed: args.first_seed,
            family: args.family,
        },
    };
    let bar = progress::bar(
        args.seeds * options.budgets.len() as u64,
        "reports",
        args.json,
    );
    let run = measure(registry, &Subject::reference(), &options, |done, _| {
        bar.set_position(done)
    })?;
    bar.finish_and_clear();
    emit(args.json, &run, || table(&run));
    Ok(passed(run.honest()))
}
