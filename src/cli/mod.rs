//! The command line: parses, calls the library, prints. Bad input prints
//! clap's whole message or one line on stderr and exits 2; a failing claim
//! exits 1; a report with a claim below its minimum budget (and none
//! failing) exits 3 ([`EXIT_STATUS`]).
//!
//! This module only wires: each subcommand's arguments and printing live in
//! a file of its own, and every one reads the [`Registry`] it is given, so a
//! program that adds a family ([`main_with_registry`]) gets the report, the
//! list and the JSON of its family without an edit here.

// The subcommands' doc comments are their --help texts, written in the
// notation users type (E[M], Var[R]); rustdoc would read the brackets as links.
#![allow(rustdoc::broken_intra_doc_links)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub(crate) mod audit;
pub(crate) mod bench;
pub(crate) mod calibrate;
mod emit;
pub(crate) mod eval;
pub mod list;
pub(crate) mod mutants;
pub(crate) mod plot;
pub(crate) mod power;
pub(crate) mod progress;
pub(crate) mod report;
pub(crate) mod size;
pub(crate) mod stack;

use crate::error::Error;
use crate::registry::Registry;

/// The exit statuses, as `--help` states them.
pub const EXIT_STATUS: &str = "Exit status:
  0  every claim ran at or above its minimum budget and passed
  1  a claim failed
  2  bad input (the message names it)
  3  inconclusive: no claim failed, but some ran below their minimum budget
     (too few --samples for their test to have its stated size)";

/// Dropout Monte Carlo: verifies the analytic results about dropout and the
/// normalization layers after it.
#[derive(Debug, Parser)]
#[command(name = "dropmc", version, about, after_help = EXIT_STATUS)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run every registered claim and print the verdicts (the default).
    #[command(after_help = EXIT_STATUS)]
    Report(report::ReportArgs),
    /// List the registered claims with their formulas.
    List(list::ListArgs),
    /// Evaluate a family's formulas on your own numbers.
    Eval(eval::EvalArgs),
    /// Run the registry under K seeds: failure rate and p-value uniformity.
    Calibrate(calibrate::CalibrateArgs),
    /// The measured size at small budgets: fail / inconclusive / pass counts.
    Size(size::SizeArgs),
    /// How likely the suite is to catch wrong implementations; detectable effects.
    Power(power::PowerArgs),
    /// Write the SVG figures.
    Plot(plot::PlotArgs),
    /// Run the claims against every known-wrong mutant: the kill matrix.
    Mutants(mutants::MutantsArgs),
    /// The deep-stack experiment: BatchNorm eval shrinkage per layer.
    Stack(stack::StackArgs),
    /// Time the benchmark workloads W1-W3 on the reference and fast paths.
    Bench(bench::BenchArgs),
    /// Audit a model's dropout→norm sites from a capture saved by dropmc.audit (Audit.save).
    Audit(audit::AuditArgs),
}

/// Parses the arguments and runs them on the crate's own families; returns
/// the process exit code.
pub fn main_with_args<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    main_with_registry(&Registry::default(), args)
}

/// The `dropmc` command: the derived subcommands, with one `eval`
/// subcommand per quantity of `registry`.
pub fn command(registry: &Registry) -> clap::Command {
    use clap::CommandFactory;
    Cli::command()
        // A negative value (`--seeds -3`) reaches the option's parser, which
        // names the option and the accepted forms, rather than reading as
        // an unknown flag.
        .mut_subcommands(|c| {
            c.mut_args(|a| {
                if a.get_action().takes_values() {
                    a.allow_negative_numbers(true)
                } else {
                    a
                }
            })
        })
        .mut_subcommand("eval", |c| {
            c.subcommand_required(true)
                .arg_required_else_help(true)
                .subcommands(registry.quantities().iter().map(|q| q.command()))
        })
        .mut_subcommand("report", |c| {
            c.mut_arg("seed", |a| a.help(report::seed_help()))
        })
}

/// Parses the arguments and runs them on `registry`'s families (the first
/// argument is the program name, as in `std::env::args_os`).
///
/// ```
/// use dropmc::Registry;
///
/// let code = dropmc::cli::main_with_registry(&Registry::default(), ["dropmc", "list", "--json"]);
/// assert_eq!(code, std::process::ExitCode::SUCCESS);
/// ```
pub fn main_with_registry<I, T>(registry: &Registry, args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::FromArgMatches;
    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    let matches = command(registry).try_get_matches_from(&args);
    // `eval`'s quantities come from the registry, not from the derive, so
    // its matches are run as they are; every other subcommand is derived.
    let result = matches.and_then(|m| match m.subcommand() {
        Some(("eval", eval)) => Ok(eval::run(registry, eval)),
        _ => Cli::from_arg_matches(&m).map(|cli| run(registry, cli)),
    });
    match result {
        Ok(Ok(code)) => code,
        Ok(Err(e)) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            use clap::error::ErrorKind::{DisplayHelp, DisplayVersion};
            if matches!(e.kind(), DisplayHelp | DisplayVersion) {
                print!("{e}");
                return ExitCode::SUCCESS;
            }
            // clap's whole message: the missing arguments by name, the
            // "did you mean" suggestion, the usage line.
            eprint!("{e}");
            if let Some(tip) = quantity_tip(registry, &args, &e) {
                eprintln!("{tip}");
            }
            ExitCode::from(2)
        }
    }
}

/// For `eval <unknown>`, the quantity one edit away (`lm` → `ln`), which
/// clap's own suggestion (a similarity over 0.7) misses on two-letter names.
fn quantity_tip(
    registry: &Registry,
    args: &[std::ffi::OsString],
    e: &clap::Error,
) -> Option<String> {
    if e.kind() != clap::error::ErrorKind::InvalidSubcommand
        || args.get(1).and_then(|a| a.to_str()) != Some("eval")
    {
        return None;
    }
    let typed = args.get(2)?.to_str()?;
    let close = registry.quantity_one_edit_from(typed)?;
    Some(format!(
        "tip: did you mean '{close}'? (dropmc eval {close} --help)"
    ))
}

/// What bare `dropmc` says on stderr before its report: what runs, about
/// how long, and where the other commands are (a newcomer typing it for
/// help would otherwise wait a minute in silence).
pub const BARE_NOTE: &str = "dropmc: running the default report (every registered claim at its own \
     budget; about a minute on two cores). `dropmc --help` lists the other commands.";

fn run(registry: &Registry, cli: Cli) -> Result<ExitCode, Error> {
    if cli.command.is_none() {
        eprintln!("{BARE_NOTE}");
    }
    match cli
        .command
        .unwrap_or(Command::Report(report::ReportArgs::default()))
    {
        Command::Report(args) => report::run(registry, args),
        Command::List(args) => list::run(registry, args),
        // `eval` is run from its matches by `main_with_registry`; a `Cli`
        // built by hand with an `Eval` command names no quantity.
        Command::Eval(_) => Err(Error::InvalidOption {
            what: "eval needs a quantity (dropmc eval --help lists them)".into(),
        }),
        Command::Calibrate(args) => calibrate::run(registry, args),
        Command::Size(args) => size::run(registry, args),
        Command::Power(args) => power::run(registry, args),
        Command::Plot(args) => plot::run(registry, args),
        Command::Mutants(args) => mutants::run(&args),
        Command::Stack(args) => stack::run(args),
        Command::Bench(args) => bench::run_cli(&args),
        Command::Audit(args) => audit::run(&args),
    }
}
