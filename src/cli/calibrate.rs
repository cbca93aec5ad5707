//! `dropmc calibrate`: the registry under K seeds, its failure count and the
//! uniformity of its p-values.

use std::process::ExitCode;

use clap::Args;

use super::emit::{emit, passed};
use super::input::{JournalArgs, parse_count};
use super::progress;
use crate::error::Error;
use crate::registry::Registry;
use crate::report::{self, Options};

/// Options of `calibrate`.
#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// Number of independent seeds K.
    #[arg(long, default_value_t = 200, value_parser = parse_count)]
    pub seeds: u64,
    /// First seed; the run uses first-seed .. first-seed + K.
    #[arg(long, default_value_t = 1000, value_parser = parse_count)]
    pub first_seed: u64,
    /// Draws per claim (default: each claim's own budget).
    #[arg(long, value_parser = parse_count)]
    pub samples: Option<u64>,
    /// Only this family.
    #[arg(long)]
    pub family: Option<String>,
    /// The implementation: `reference` or a mutant of the gallery (`dropmc mutants`).
    #[arg(long, default_value = crate::verify::REFERENCE_SUBJECT)]
    pub subject: String,
    #[command(flatten)]
    pub journal: JournalArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `calibrate`.
pub fn run(registry: &Registry, args: CalibrateArgs) -> Result<ExitCode, Error> {
    use crate::verify::calibrate::{CalibrationOptions, KS_FAMILY_ALPHA, calibrate_claims, table};
    let subject = crate::verify::subject(&args.subject)?;
    let journal = args.journal.mode()?;
    let claims = report::select(
        registry,
        &Options {
            seed: None,
            samples: args.samples,
            family: args.family.clone(),
        },
    )?;
    let options = CalibrationOptions {
        seeds: args.seeds,
        first_seed: args.first_seed,
        samples: args.samples,
        family: args.family,
        flag_alpha: KS_FAMILY_ALPHA,
    };
    let bar = progress::bar(options.seeds * claims.len() as u64, "claims", args.json);
    let result = calibrate_claims(&claims, &subject, &options, journal.as_ref(), |done, _| {
        bar.set_position(done)
    })?;
    bar.finish_and_clear();
    emit(args.json, &result, || table(&result));
    Ok(passed(result.calibrated()))
}
