//! `dropmc stack`: the deep-stack experiment, BatchNorm's eval shrinkage per
//! layer with and without the folded correction.

use std::process::ExitCode;

use clap::Args;

use super::emit::emit;
use super::progress;
use crate::engine::Budget;
use crate::engine::DEFAULT_SEED;
use crate::error::Error;
use crate::eval::input::{parse_count, read_number};
use crate::ops::Subject;

/// Options of `stack`.
#[derive(Debug, Args)]
pub struct StackArgs {
    /// Number of blocks L.
    #[arg(long, default_value_t = 6)]
    pub depth: usize,
    /// Drop rate (default: the table over 0.1, 0.3, 0.5).
    #[arg(long, allow_hyphen_values = true)]
    pub p: Option<String>,
    /// Random networks (replicates).
    #[arg(long, default_value_t = 32, value_parser = parse_count)]
    pub replicates: u64,
    /// Seed of the random streams.
    #[arg(long, default_value_t = DEFAULT_SEED, value_parser = parse_count)]
    pub seed: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `stack`.
pub fn run(args: StackArgs) -> Result<ExitCode, Error> {
    let rates = match &args.p {
        Some(p) => vec![read_number("--p", p)?],
        None => vec![0.1, 0.3, 0.5],
    };
    let config = crate::eval::stack::StackConfig {
        depth: args.depth,
        ..Default::default()
    };
    let replicates =
        crate::eval::input::at_least_two("--replicates", "replicates", args.replicates)?;
    let budget = Budget::new(replicates, args.seed)?;
    let bar = progress::bar(budget.samples, "replicates", args.json);
    let table = crate::eval::stack::run_with_progress(
        config,
        &rates,
        &Subject::reference(),
        budget,
        &|n| bar.inc(n),
    );
    bar.finish_and_clear();
    let table = table?;
    emit(args.json, &table, || {
        crate::eval::stack::table(&table, crate::table::output_width())
    });
    Ok(ExitCode::SUCCESS)
}
