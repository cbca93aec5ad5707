//! `dropmc power`: how often the suite catches each wrong implementation,
//! and the effect each claim detects at its default budget.

use std::process::ExitCode;

use clap::Args;

use super::calibrate::JournalArgs;
use super::emit::emit;
use super::progress;
use crate::conformance::report::{self, Options};
use crate::conformance::verify::Replication;
use crate::error::Error;
use crate::eval::input::parse_count;
use crate::ops::Subject;
use crate::registry::Registry;

/// Options of `power`.
#[derive(Debug, Args)]
pub struct PowerArgs {
    /// Seeds per wrong implementation.
    #[arg(long, default_value_t = 3, value_parser = parse_count)]
    pub seeds: u64,
    /// First seed.
    #[arg(long, default_value_t = 2000, value_parser = parse_count)]
    pub first_seed: u64,
    /// Cap on the draws per claim (each claim runs min(its default, this));
    /// the power at the default budget is extrapolated from the effect sizes.
    #[arg(long, default_value_t = crate::conformance::mutants::KILL_SAMPLES, value_parser = parse_count)]
    pub samples: u64,
    /// Run every claim at its full default budget (slow; ignores --samples).
    #[arg(long)]
    pub full: bool,
    /// Only this family (default: the conformance families).
    #[arg(long)]
    pub family: Option<String>,
    #[command(flatten)]
    pub journal: JournalArgs,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// Runs `power`.
pub fn run(registry: &Registry, args: PowerArgs) -> Result<ExitCode, Error> {
    use crate::conformance::verify::{perturb, power};
    let options = power::PowerOptions {
        replication: Replication {
            seeds: args.seeds,
            first_seed: args.first_seed,
            family: args.family.clone(),
        },
        samples: (!args.full).then_some(args.samples),
    };
    let owned = perturb::graded();
    let mut candidates: Vec<power::Candidate> = owned
        .iter()
        .map(|l| power::Candidate::new(l.as_ref()))
        .collect();
    candidates.extend(power::mutant_candidates());
    let bar = progress::bar(
        args.seeds * (candidates.len() as u64 + 1),
        "runs",
        args.json,
    );
    let journal = args.journal.mode()?;
    let run = power::power_with(
        registry,
        &candidates,
        &options,
        journal.as_ref(),
        |done, _| bar.set_position(done),
    )?;
    bar.finish_and_clear();
    // The detectable effects are those of the default budget (whole registry).
    let report_options = Options {
        seed: None,
        samples: None,
        family: args.family,
    };
    let effects = power::detectable_effects(&report::run(
        registry,
        &Subject::reference(),
        &report_options,
    )?);
    let value = serde_json::json!({ "power": run, "detectable_effects": effects });
    emit(args.json, &value, || {
        format!(
            "{}\nminimum detectable effect per claim at the default budget:\n{}",
            power::table(&run),
            power::effects_table(&effects)
        )
    });
    Ok(ExitCode::SUCCESS)
}
