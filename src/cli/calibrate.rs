//! `dropmc calibrate`: the registry under K seeds, its failure count and the
//! uniformity of its p-values.

use std::process::ExitCode;

use clap::Args;

use super::emit::{emit, passed};
use super::progress;
use crate::conformance::report::{self, Options};
use crate::conformance::verify::Replication;
use crate::error::Error;
use crate::eval::input::parse_count;
use crate::registry::Registry;

/// Options of `calibrate`.
#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// Number of independent seeds K.
    #[arg(long, default_value_t = 200, value_parser = parse_count)]
    pub seeds: u64,
    /// First seed; the run uses first-seed .. first-seed + K.
    #[arg(long, default_value_t = 1000, value_parser = parse_count)]
    pub first_seed: u64,
    #[command(flatten)]
    pub selection: super::report::Selection,
    /// The implementation: `reference` or a mutant of the gallery (`dropmc mutants`).
    #[arg(long, default_value = crate::conformance::verify::REFERENCE_SUBJECT)]
    pub subject: String,
    #[command(flatten)]
    pub journal: JournalArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `calibrate`.
pub fn run(registry: &Registry, args: CalibrateArgs) -> Result<ExitCode, Error> {
    use crate::conformance::verify::calibrate::{
        CalibrationOptions, KS_FAMILY_ALPHA, calibrate_claims, table,
    };
    let subject = crate::conformance::verify::subject(&args.subject)?;
    let journal = args.journal.mode()?;
    let claims = report::select(
        registry,
        &Options {
            seed: None,
            samples: args.selection.samples,
            family: args.selection.family.clone(),
        },
    )?;
    let options = CalibrationOptions {
        replication: Replication {
            seeds: args.seeds,
            first_seed: args.first_seed,
            family: args.selection.family,
        },
        samples: args.selection.samples,
        flag_alpha: KS_FAMILY_ALPHA,
    };
    let bar = progress::bar(args.seeds * claims.len() as u64, "claims", args.json);
    let result = calibrate_claims(&claims, &subject, &options, journal.as_ref(), |done, _| {
        bar.set_position(done)
    })?;
    bar.finish_and_clear();
    emit(args.json, &result, || table(&result));
    Ok(passed(result.calibrated()))
}

/// The journal of a long run (`calibrate`, `power`): where to write it, or
/// which one to continue.
#[derive(Debug, clap::Args)]
pub struct JournalArgs {
    /// Append each finished run to FILE as a JSON line (header first).
    #[arg(long, value_name = "FILE")]
    pub out: Option<std::path::PathBuf>,
    /// Continue the run journaled in FILE (same options), appending to it.
    #[arg(long, value_name = "FILE")]
    pub resume: Option<std::path::PathBuf>,
}

impl JournalArgs {
    /// The journal mode the flags ask for (`None`: no journal).
    /// An `--out` file that cannot be written is refused here, before any
    /// computing, once the flags are known to go together: it is opened
    /// for appending (created if missing, as the run would create it), so
    /// an existing file is never truncated by the check.
    pub fn mode(self) -> Result<Option<crate::conformance::verify::journal::Mode>, Error> {
        let out = self.out.clone();
        let mode = crate::conformance::verify::journal::Mode::from_args(self.out, self.resume)?;
        if let Some(out) = &out
            && let Err(e) = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(out)
        {
            return Err(Error::InvalidOption {
                what: format!(
                    "--out {}: cannot write the journal there ({e})",
                    out.display()
                ),
            });
        }
        Ok(mode)
    }
}
