//! `dropmc report`: every claim of the registry, its verdict and numbers.

use std::process::ExitCode;

use clap::Args;

use super::emit::{emit, verdict};
use super::progress;
use crate::conformance::pilot::{self, MAX_RUN_SECONDS};
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
    #[arg(long, value_parser = parse_count)]
    pub seed: Option<u64>,
    #[command(flatten)]
    pub selection: Selection,
    /// Do not fit the table to the terminal (one line per claim).
    #[arg(long)]
    pub wide: bool,
}

/// Which claims run and at how many draws: the options `report` and
/// `calibrate` share.
#[derive(Debug, Args, Default)]
pub struct Selection {
    /// Draws per claim (default: each claim's own budget). A report
    /// estimated to take over an hour is refused up front with the estimate.
    #[arg(long, value_parser = parse_count)]
    pub samples: Option<u64>,
    /// Run only this family.
    #[arg(long)]
    pub family: Option<String>,
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
        samples: args.selection.samples,
        family: args.selection.family,
    };
    let claims = report::select(registry, &options)?;
    if let Some(samples) = options.samples {
        refuse_a_long_run(&claims, &options, samples)?;
    }
    let bar = progress::bar(claims.len() as u64, "claims", args.json);
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

/// Estimated seconds above which the run's length is said up front.
const ANNOUNCE_SECONDS: f64 = 10.0;

/// Refuses a run of `claims` at `--samples samples` estimated to take more
/// than [`MAX_RUN_SECONDS`] ([`crate::conformance::pilot`]); announces one
/// estimated above [`ANNOUNCE_SECONDS`] on stderr.
fn refuse_a_long_run(
    claims: &[&dyn crate::claims::Claim],
    options: &Options,
    samples: u64,
) -> Result<(), Error> {
    let seed = options.seed.unwrap_or(crate::engine::DEFAULT_SEED);
    let estimate = pilot::estimate_seconds(
        claims,
        &Subject::reference(),
        seed,
        samples,
        MAX_RUN_SECONDS,
    );
    let about = format!(
        "{} claims at --samples {samples} take {} (estimated from a pilot of each claim's \
         sampler)",
        claims.len(),
        estimate.words()
    );
    if estimate.seconds > MAX_RUN_SECONDS {
        return Err(Error::InvalidOption {
            what: format!(
                "{about}, more than the {} a report may take: pass a smaller --samples, or \
                 --family to run fewer claims",
                pilot::duration_words(MAX_RUN_SECONDS)
            ),
        });
    }
    if estimate.seconds > ANNOUNCE_SECONDS {
        eprintln!("dropmc: {about}");
    }
    Ok(())
}
