//! The command line: parses, calls the library, prints. Bad input prints one
//! line on stderr and exits 2; a failing claim exits 1.

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::engine::Budget;
use crate::error::{Error, parse_list};
use crate::eval;
use crate::ops::Subject;
use crate::report::{self, DEFAULT_SEED, Options};

/// Dropout Monte Carlo: verifies the analytic results about dropout and the
/// normalization layers after it.
#[derive(Debug, Parser)]
#[command(name = "dropmc", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run every registered claim and print the verdicts (the default).
    Report(ReportArgs),
    /// List the registered claims with their formulas.
    List,
    /// Evaluate a family's formulas on your own numbers.
    #[command(subcommand)]
    Eval(EvalCommand),
    /// Time the benchmark workloads W1-W3 on the reference and fast paths.
    Bench(crate::fast::bench::BenchArgs),
}

/// Options of `report`.
#[derive(Debug, Args, Default)]
pub struct ReportArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Seed of the random streams.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Draws per claim (default: each claim's own budget).
    #[arg(long)]
    pub samples: Option<u64>,
    /// Run only this family.
    #[arg(long)]
    pub family: Option<String>,
}

/// Quantities `eval` knows.
#[derive(Debug, Subcommand)]
pub enum EvalCommand {
    /// E[z], E[z^2], Var[z] per unit; E[S], Var[S] of the sum.
    Moments(MomentsArgs),
}

/// Sampling options shared by every `eval` quantity.
#[derive(Debug, Args)]
pub struct SamplingArgs {
    /// Monte Carlo draws.
    #[arg(long, default_value_t = 1_000_000)]
    pub samples: u64,
    /// Seed of the random streams.
    #[arg(long, default_value_t = DEFAULT_SEED)]
    pub seed: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `eval moments`.
#[derive(Debug, Args)]
pub struct MomentsArgs {
    /// The pre-dropout vector, comma-separated (e.g. 0.5,-1.2,3).
    #[arg(long, allow_hyphen_values = true)]
    pub x: String,
    /// Drop rate, 0 <= p < 1.
    #[arg(long, allow_hyphen_values = true)]
    pub p: String,
    #[command(flatten)]
    pub sampling: SamplingArgs,
}

/// Parses the arguments and runs; returns the process exit code.
pub fn main_with_args<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind::{DisplayHelp, DisplayVersion};
            if matches!(e.kind(), DisplayHelp | DisplayVersion) {
                print!("{e}");
                return ExitCode::SUCCESS;
            }
            let rendered = e.to_string();
            let first = rendered.lines().next().unwrap_or("invalid arguments");
            eprintln!("{first}");
            return ExitCode::from(2);
        }
    };
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode, Error> {
    match cli
        .command
        .unwrap_or(Command::Report(ReportArgs::default()))
    {
        Command::Report(args) => run_report(args),
        Command::List => {
            print!("{}", list());
            Ok(ExitCode::SUCCESS)
        }
        Command::Eval(EvalCommand::Moments(args)) => {
            let x = parse_list("--x", &args.x)?;
            let p = parse_number("--p", &args.p)?;
            let output = eval::moments::moments(&x, p, budget(&args.sampling)?)?;
            print_eval(&output, args.sampling.json);
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(args) => crate::fast::bench::run_cli(&args),
    }
}

fn budget(args: &SamplingArgs) -> Result<Budget, Error> {
    Budget::new(args.samples, args.seed)
}

/// Parses one number (NaN and infinities are rejected).
pub fn parse_number(what: &str, text: &str) -> Result<f64, Error> {
    match parse_list(what, text)?.as_slice() {
        [v] => Ok(*v),
        _ => Err(Error::Parse {
            what: what.to_string(),
            token: text.to_string(),
        }),
    }
}

fn print_eval(output: &eval::EvalOutput, json: bool) {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(output).unwrap_or_default()
        );
    } else {
        print!("{}", eval::table(output));
    }
}

fn run_report(args: ReportArgs) -> Result<ExitCode, Error> {
    let options = Options {
        seed: args.seed,
        samples: args.samples,
        family: args.family,
    };
    let report = report::run(&Subject::reference(), &options)?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report::to_json(&report)).unwrap_or_default()
        );
    } else {
        print!("{}", report::table(&report));
    }
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The registry as a listing: id, kind, formula.
pub fn list() -> String {
    let claims = crate::claims::registry();
    let width = claims.iter().map(|c| c.id().len()).max().unwrap_or(0);
    claims
        .iter()
        .map(|c| {
            format!(
                "{:width$}  {:13}  {}\n",
                c.id(),
                c.kind().label(),
                c.formula()
            )
        })
        .collect()
}
