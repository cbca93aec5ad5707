//! `dropmc mutants`: the conformance claims against every known-wrong
//! implementation of the gallery, as a kill matrix.

use std::process::ExitCode;

use clap::Args;

use super::emit::{emit, passed};
use super::progress;
use crate::engine::Budget;
use crate::engine::DEFAULT_SEED;
use crate::error::Error;
use crate::eval::input::parse_count;

/// Options of `mutants`.
#[derive(Debug, Args)]
pub struct MutantsArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Seed of the random streams.
    #[arg(long, default_value_t = DEFAULT_SEED, value_parser = parse_count)]
    pub seed: u64,
    /// Cap on the draws per claim (each claim runs min(its default, this)).
    #[arg(long, default_value_t = crate::conformance::mutants::KILL_SAMPLES, value_parser = parse_count)]
    pub samples: u64,
}

/// Runs `mutants`.
pub fn run(args: &MutantsArgs) -> Result<ExitCode, Error> {
    let options = crate::conformance::Options {
        seed: args.seed,
        samples: Some(Budget::new(args.samples, args.seed)?.samples),
        all_families: false,
        families: None,
    };
    let bar = progress::bar(
        crate::conformance::mutants::gallery().len() as u64 + 1,
        "reference and mutants",
        args.json,
    );
    let matrix = crate::conformance::mutants::kill_matrix_with_progress(&options, |done, _| {
        bar.set_position(done as u64)
    });
    bar.finish_and_clear();
    let matrix = matrix?;
    emit(
        args.json,
        &crate::conformance::mutants::to_json(&matrix),
        || crate::conformance::mutants::table(&matrix, crate::table::output_width()),
    );
    Ok(passed(matrix.rows.iter().all(|r| r.as_expected())))
}
