//! The command line: parses, calls the library, prints. Bad input prints one
//! line on stderr and exits 2; a failing claim exits 1.

// The subcommands' doc comments are their --help texts, written in the
// notation users type (E[M], Var[R]); rustdoc would read the brackets as links.
#![allow(rustdoc::broken_intra_doc_links)]

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

pub mod bench;
pub mod input;
pub(crate) mod progress;

use crate::engine::Budget;
use crate::error::Error;
use crate::eval;
use crate::ops::Subject;
use crate::report::{self, DEFAULT_SEED, Options};
use input::{parse_count, read_number};

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
    List(ListArgs),
    /// Evaluate a family's formulas on your own numbers.
    Eval(EvalArgs),
    /// Run the registry under K seeds: failure rate and p-value uniformity.
    Calibrate(CalibrateArgs),
    /// The measured size at small budgets: fail / inconclusive / pass counts.
    Size(SizeArgs),
    /// How likely the suite is to catch wrong implementations; detectable effects.
    Power(PowerArgs),
    /// Write the SVG figures.
    Plot(PlotArgs),
    /// Run the claims against every known-wrong mutant: the kill matrix.
    Mutants(MutantsArgs),
    /// The deep-stack experiment: BatchNorm eval shrinkage per layer.
    Stack(StackArgs),
    /// Time the benchmark workloads W1-W3 on the reference and fast paths.
    Bench(bench::BenchArgs),
}

/// Options of `list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Do not fit the table to the terminal (one line per claim).
    #[arg(long)]
    pub wide: bool,
}

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
    #[arg(long, default_value_t = crate::mutants::KILL_SAMPLES, value_parser = parse_count)]
    pub samples: u64,
}

/// Options of `plot`.
#[derive(Debug, Args)]
pub struct PlotArgs {
    /// Folder for the SVG files.
    #[arg(long, default_value = "figures")]
    pub out: std::path::PathBuf,
}

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
    #[arg(long, default_value_t = crate::mutants::KILL_SAMPLES, value_parser = parse_count)]
    pub samples: u64,
    /// Run every claim at its full default budget (slow; ignores --samples).
    #[arg(long)]
    pub full: bool,
    /// Only this family (default: the conformance families).
    #[arg(long)]
    pub family: Option<String>,
    /// Append each finished (subject, seed) run to FILE as a JSON line (header first).
    #[arg(long, value_name = "FILE")]
    pub out: Option<std::path::PathBuf>,
    /// Continue the run journaled in FILE (same options), appending to it.
    #[arg(long, value_name = "FILE")]
    pub resume: Option<std::path::PathBuf>,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// Options of `size`.
#[derive(Debug, Args)]
pub struct SizeArgs {
    /// Budgets (draws per claim), comma-separated.
    #[arg(long, default_value = "500,1000,2000,5000,20000")]
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
    /// Append each finished seed to FILE as a JSON line (header first).
    #[arg(long, value_name = "FILE")]
    pub out: Option<std::path::PathBuf>,
    /// Continue the run journaled in FILE (same options), appending to it.
    #[arg(long, value_name = "FILE")]
    pub resume: Option<std::path::PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Options of `report`.
#[derive(Debug, Args, Default)]
pub struct ReportArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Seed of the random streams.
    #[arg(long, value_parser = parse_count)]
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

/// Options of `eval`: the quantities are subcommands built from
/// [`eval::quantities`] (see [`main_with_args`]).
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Print JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
}

/// The `dropmc` command: the derived subcommands, with `eval`'s quantities
/// added from [`eval::quantities`].
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    Cli::command().mut_subcommand("eval", |c| {
        c.subcommand_required(true)
            .arg_required_else_help(true)
            .subcommands(eval::quantities().iter().map(|q| q.command()))
    })
}

/// Parses the arguments and runs; returns the process exit code.
pub fn main_with_args<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::FromArgMatches;
    let parsed = command().try_get_matches_from(args).and_then(|m| {
        if let Some(("eval", eval)) = m.subcommand() {
            return Ok(Err(eval.clone()));
        }
        Cli::from_arg_matches(&m).map(Ok)
    });
    let parsed = match parsed {
        Ok(parsed) => parsed,
        Err(e) => {
            use clap::error::ErrorKind::{DisplayHelp, DisplayVersion};
            if matches!(e.kind(), DisplayHelp | DisplayVersion) {
                print!("{e}");
                return ExitCode::SUCCESS;
            }
            // clap's whole message: the missing arguments by name, the
            // "did you mean" suggestion, the usage line.
            eprint!("{e}");
            return ExitCode::from(2);
        }
    };
    let result = match parsed {
        Ok(cli) => run(cli),
        Err(eval) => run_eval(&eval),
    };
    match result {
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
        Command::List(args) => {
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&list_json()).unwrap_or_default()
                );
            } else {
                let table = list_table();
                if args.wide {
                    print!("{}", table.render_wide());
                } else {
                    print!("{}", table.render(crate::table::output_width()));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Calibrate(args) => run_calibrate(args),
        Command::Size(args) => run_size(args),
        Command::Power(args) => run_power(args),
        Command::Plot(args) => {
            let bar = progress::bar(crate::plot::FIGURES.len() as u64, "figures", false);
            let written = crate::plot::write_all_with_progress(&args.out, |done, _| {
                bar.set_position(done as u64)
            });
            bar.finish_and_clear();
            for path in written? {
                println!("wrote {}", path.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        // Parsed from the ArgMatches by run_eval before a Cli is built.
        Command::Eval(_) => unreachable!("eval is dispatched by main_with_args"),
        Command::Mutants(args) => run_mutants(&args),
        Command::Stack(args) => run_stack(args),
        Command::Bench(args) => bench::run_cli(&args),
    }
}

fn run_stack(args: StackArgs) -> Result<ExitCode, Error> {
    let rates = match &args.p {
        Some(p) => vec![read_number("--p", p)?],
        None => vec![0.1, 0.3, 0.5],
    };
    let config = crate::stack::StackConfig {
        depth: args.depth,
        ..Default::default()
    };
    let budget = Budget::new(args.replicates, args.seed)?;
    let bar = progress::bar(budget.samples, "replicates", args.json);
    let table =
        crate::stack::run_with_progress(config, &rates, &Subject::reference(), budget, &|n| {
            bar.inc(n)
        });
    bar.finish_and_clear();
    let table = table?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&table).unwrap_or_default()
        );
    } else {
        print!(
            "{}",
            crate::stack::table(&table, crate::table::output_width())
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn run_mutants(args: &MutantsArgs) -> Result<ExitCode, Error> {
    let options = crate::conformance::Options {
        seed: args.seed,
        samples: Some(Budget::new(args.samples, args.seed)?.samples),
        all_families: false,
        families: None,
    };
    let bar = progress::bar(
        crate::mutants::gallery().len() as u64 + 1,
        "reference and mutants",
        args.json,
    );
    let matrix = crate::mutants::kill_matrix_with_progress(&options, |done, _| {
        bar.set_position(done as u64)
    });
    bar.finish_and_clear();
    let matrix = matrix?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&crate::mutants::to_json(&matrix)).unwrap_or_default()
        );
    } else {
        print!(
            "{}",
            crate::mutants::table(&matrix, crate::table::output_width())
        );
    }
    Ok(if matrix.rows.iter().all(|r| r.as_expected()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Runs `dropmc eval <quantity>` from its matches and prints the table or
/// the JSON (`serde_json::to_string_pretty` of the [`eval::EvalOutput`],
/// the same text as the bindings' `run_args`).
fn run_eval(matches: &clap::ArgMatches) -> Result<ExitCode, Error> {
    let json = matches.get_flag("json");
    let Some((name, sub)) = matches.subcommand() else {
        return Err(Error::InvalidOption {
            what: "eval needs a quantity (dropmc eval --help lists them)".into(),
        });
    };
    let quantities = eval::quantities();
    let Some(quantity) = quantities.iter().find(|q| q.name() == name) else {
        return Err(Error::UnknownQuantity {
            name: name.to_string(),
            known: quantities
                .iter()
                .map(|q| q.name())
                .collect::<Vec<_>>()
                .join(", "),
        });
    };
    // A bar over the draws of the kernel running now (an eval runs a few:
    // the outputs, the pairs for a variance, ...).
    let bar = progress::bar(1, "draws", json);
    let shown = bar.clone();
    let output = crate::fast::observe_progress(
        Box::new(move |done, total| {
            shown.set_length(total);
            shown.set_position(done);
        }),
        || quantity.run_matches(sub),
    );
    bar.finish_and_clear();
    let output = output?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&output).unwrap_or_default()
        );
    } else {
        print!("{}", eval::table(&output));
    }
    Ok(ExitCode::SUCCESS)
}

fn run_report(args: ReportArgs) -> Result<ExitCode, Error> {
    let options = Options {
        seed: args.seed,
        samples: args.samples,
        family: args.family,
    };
    let total = report::select(&options)?.len() as u64;
    let bar = progress::bar(total, "claims", args.json);
    let report = report::run_with_progress(&Subject::reference(), &options, |done, _| {
        bar.set_position(done as u64)
    })?;
    bar.finish_and_clear();
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report::to_json(&report)).unwrap_or_default()
        );
    } else {
        let width = (!args.wide).then(crate::table::output_width);
        print!("{}", report::table_fitted(&report, width));
    }
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn run_size(args: SizeArgs) -> Result<ExitCode, Error> {
    use crate::verify::size::{SizeOptions, measure, table};
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
        seeds: args.seeds,
        first_seed: args.first_seed,
        family: args.family,
    };
    let bar = progress::bar(
        options.seeds * options.budgets.len() as u64,
        "reports",
        args.json,
    );
    let run = measure(&Subject::reference(), &options, |done, _| {
        bar.set_position(done)
    })?;
    bar.finish_and_clear();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&run).unwrap_or_default());
    } else {
        print!("{}", table(&run));
    }
    Ok(if run.honest() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn run_calibrate(args: CalibrateArgs) -> Result<ExitCode, Error> {
    use crate::verify::calibrate::{CalibrationOptions, KS_FAMILY_ALPHA, calibrate_claims, table};
    let subject = crate::verify::subject(&args.subject)?;
    let journal = crate::verify::journal::Mode::from_args(args.out, args.resume)?;
    let claims = report::select(&Options {
        seed: None,
        samples: args.samples,
        family: args.family.clone(),
    })?;
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
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&result).unwrap_or_default()
        );
    } else {
        print!("{}", table(&result));
    }
    Ok(if result.calibrated() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn run_power(args: PowerArgs) -> Result<ExitCode, Error> {
    use crate::verify::{perturb, power};
    let options = power::PowerOptions {
        seeds: args.seeds,
        first_seed: args.first_seed,
        samples: (!args.full).then_some(args.samples),
        family: args.family.clone(),
    };
    let owned = perturb::graded();
    let mut candidates: Vec<power::Candidate> = owned
        .iter()
        .map(|l| power::Candidate::new(l.as_ref()))
        .collect();
    candidates.extend(power::mutant_candidates());
    let bar = progress::bar(
        options.seeds * (candidates.len() as u64 + 1),
        "runs",
        args.json,
    );
    let journal = crate::verify::journal::Mode::from_args(args.out, args.resume)?;
    let run = power::power_with(&candidates, &options, journal.as_ref(), |done, _| {
        bar.set_position(done)
    })?;
    bar.finish_and_clear();
    // The detectable effects are those of the default budget (whole registry).
    let report_options = Options {
        seed: None,
        samples: None,
        family: args.family,
    };
    let effects = power::detectable_effects(&report::run(&Subject::reference(), &report_options)?);
    if args.json {
        let value = serde_json::json!({ "power": run, "detectable_effects": effects });
        println!(
            "{}",
            serde_json::to_string_pretty(&value).unwrap_or_default()
        );
    } else {
        print!(
            "{}\nminimum detectable effect per claim at the default budget:\n{}",
            power::table(&run),
            power::effects_table(&effects)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The registry as a table: id, kind, default samples, formula (wrapped to fit).
pub fn list_table() -> crate::table::Table {
    let mut table = crate::table::Table::new(["claim", "kind", "samples", "formula"])
        .wrap(3)
        .spill(3);
    for c in crate::claims::registry() {
        table.row([
            c.id().to_string(),
            c.kind().label().to_string(),
            c.default_samples().to_string(),
            c.formula().to_string(),
        ]);
    }
    table
}

/// The registered claims as JSON: id, family, kind, formula, default samples.
pub fn list_json() -> serde_json::Value {
    let claims: Vec<serde_json::Value> = crate::claims::registry()
        .iter()
        .map(|c| {
            serde_json::json!({
                "id": c.id(),
                "family": c.family(),
                "kind": c.kind().label(),
                "formula": c.formula(),
                "samples": c.default_samples(),
            })
        })
        .collect();
    serde_json::json!({ "claims": claims })
}
