//! The command line: parses, calls the library, prints. Bad input prints one
//! line on stderr and exits 2; a failing claim exits 1.

// The subcommands' doc comments are their --help texts, written in the
// notation users type (E[M], Var[R]); rustdoc would read the brackets as links.
#![allow(rustdoc::broken_intra_doc_links)]

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

pub(crate) mod progress;

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
    Bench(crate::fast::bench::BenchArgs),
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
    #[arg(long, default_value_t = 32)]
    pub replicates: u64,
    /// Seed of the random streams.
    #[arg(long, default_value_t = DEFAULT_SEED)]
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
    #[arg(long, default_value_t = DEFAULT_SEED)]
    pub seed: u64,
    /// Cap on the draws per claim (each claim runs min(its default, this)).
    #[arg(long, default_value_t = crate::mutants::KILL_SAMPLES)]
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
    #[arg(long, default_value_t = 3)]
    pub seeds: u64,
    /// First seed.
    #[arg(long, default_value_t = 2000)]
    pub first_seed: u64,
    /// Cap on the draws per claim (each claim runs min(its default, this));
    /// the power at the default budget is extrapolated from the effect sizes.
    #[arg(long, default_value_t = crate::mutants::KILL_SAMPLES)]
    pub samples: u64,
    /// Run every claim at its full default budget (slow; ignores --samples).
    #[arg(long)]
    pub full: bool,
    /// Only this family (default: the conformance families).
    #[arg(long)]
    pub family: Option<String>,
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
    #[arg(long, default_value_t = 40)]
    pub seeds: u64,
    /// First seed; the run uses first-seed .. first-seed + seeds.
    #[arg(long, default_value_t = 1)]
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
    #[arg(long, default_value_t = 200)]
    pub seeds: u64,
    /// First seed; the run uses first-seed .. first-seed + K.
    #[arg(long, default_value_t = 1000)]
    pub first_seed: u64,
    /// Draws per claim (default: each claim's own budget).
    #[arg(long)]
    pub samples: Option<u64>,
    /// Only this family.
    #[arg(long)]
    pub family: Option<String>,
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
#[allow(rustdoc::broken_intra_doc_links)] // the help text writes E[M], not links
#[derive(Debug, Subcommand)]
pub enum EvalCommand {
    /// Dropout moments per unit and of the sum.
    #[command(long_about = "E[z], E[z^2], Var[z] per unit; E[S], Var[S] of the sum S = sum_k z_k.")]
    Moments(MomentsArgs),
    /// LayerNorm after dropout: E[M], Var[M], E[V], c, E[LN(z)].
    Ln(LnArgs),
    /// RMSNorm after dropout: E[R^2], E[RMSNorm(z)].
    Rms(RmsArgs),
    /// Bypass y = h + dropout(v) before LayerNorm: E[V], c_damped, E[LN(y)].
    Bypass(BypassArgs),
    /// dropout -> LN1 -> LN2: c1, c2, E[LN2(LN1(z))].
    Compound(CompoundArgs),
    /// Attention dropout after softmax: E[b], E[R], Var[R], E[o], Var[o].
    Attn(AttnArgs),
    /// From trained BatchNorm buffers: c per channel and the folded running_var.
    Bn(BnArgs),
}

/// Arguments of `eval bn`.
#[derive(Debug, Args)]
pub struct BnArgs {
    /// running_mean buffer, comma-separated.
    #[arg(long, allow_hyphen_values = true)]
    pub running_mean: String,
    /// running_var buffer, comma-separated.
    #[arg(long, allow_hyphen_values = true)]
    pub running_var: String,
    /// Drop rate of the dropout in front of the BatchNorm, 0 <= p < 1.
    #[arg(long, allow_hyphen_values = true)]
    pub p: String,
    #[command(flatten)]
    pub sampling: SamplingArgs,
}

/// Arguments of `eval attn`.
#[allow(rustdoc::broken_intra_doc_links)] // the help text writes E[o], not links
#[derive(Debug, Args)]
pub struct AttnArgs {
    /// The attention probability row, comma-separated, summing to 1.
    #[arg(long, allow_hyphen_values = true)]
    pub a: String,
    /// Drop rate, 0 <= p < 1.
    #[arg(long, allow_hyphen_values = true)]
    pub p: String,
    /// Values averaged by the row, one per position (adds E[o], Var[o]).
    #[arg(long, allow_hyphen_values = true)]
    pub values: Option<String>,
    #[command(flatten)]
    pub sampling: SamplingArgs,
}

/// Arguments of `eval ln`.
#[derive(Debug, Args)]
pub struct LnArgs {
    /// The pre-dropout vector, comma-separated.
    #[arg(long, allow_hyphen_values = true)]
    pub x: String,
    /// Drop rate, 0 <= p < 1.
    #[arg(long, allow_hyphen_values = true)]
    pub p: String,
    /// LayerNorm gains (default 1).
    #[arg(long, allow_hyphen_values = true)]
    pub gamma: Option<String>,
    /// LayerNorm shifts (default 0).
    #[arg(long, allow_hyphen_values = true)]
    pub beta: Option<String>,
    /// LayerNorm epsilon (default 0).
    #[arg(long, allow_hyphen_values = true, default_value = "0")]
    pub eps: String,
    #[command(flatten)]
    pub sampling: SamplingArgs,
}

/// Arguments of `eval rms`.
#[derive(Debug, Args)]
pub struct RmsArgs {
    /// The pre-dropout vector, comma-separated.
    #[arg(long, allow_hyphen_values = true)]
    pub x: String,
    /// Drop rate, 0 <= p < 1.
    #[arg(long, allow_hyphen_values = true)]
    pub p: String,
    /// RMSNorm gains (default 1).
    #[arg(long, allow_hyphen_values = true)]
    pub gamma: Option<String>,
    /// RMSNorm epsilon (default 0).
    #[arg(long, allow_hyphen_values = true, default_value = "0")]
    pub eps: String,
    #[command(flatten)]
    pub sampling: SamplingArgs,
}

/// Arguments of `eval bypass`.
#[derive(Debug, Args)]
pub struct BypassArgs {
    /// The undropped part h, comma-separated.
    #[arg(long, allow_hyphen_values = true)]
    pub h: String,
    /// The dropped part v, comma-separated.
    #[arg(long, allow_hyphen_values = true)]
    pub v: String,
    /// Drop rate, 0 <= p < 1.
    #[arg(long, allow_hyphen_values = true)]
    pub p: String,
    #[command(flatten)]
    pub sampling: SamplingArgs,
}

/// Arguments of `eval compound`.
#[derive(Debug, Args)]
pub struct CompoundArgs {
    /// The pre-dropout vector, comma-separated.
    #[arg(long, allow_hyphen_values = true)]
    pub x: String,
    /// Drop rate, 0 <= p < 1.
    #[arg(long, allow_hyphen_values = true)]
    pub p: String,
    /// LN1 gains.
    #[arg(long, allow_hyphen_values = true)]
    pub gamma1: String,
    /// LN1 shifts.
    #[arg(long, allow_hyphen_values = true)]
    pub beta1: String,
    /// LN2 gains (default 1).
    #[arg(long, allow_hyphen_values = true)]
    pub gamma2: Option<String>,
    /// LN2 shifts (default 0).
    #[arg(long, allow_hyphen_values = true)]
    pub beta2: Option<String>,
    #[command(flatten)]
    pub sampling: SamplingArgs,
}

fn optional_list(what: &str, text: &Option<String>) -> Result<Option<Vec<f64>>, Error> {
    text.as_deref().map(|t| parse_list(what, t)).transpose()
}

/// Runs one `eval` quantity; returns its output and whether to print JSON.
fn eval_output(command: EvalCommand) -> Result<(eval::EvalOutput, bool), Error> {
    use crate::eval::norm;
    Ok(match command {
        EvalCommand::Moments(a) => (
            eval::moments::moments(
                &parse_list("--x", &a.x)?,
                parse_number("--p", &a.p)?,
                budget(&a.sampling)?,
            )?,
            a.sampling.json,
        ),
        EvalCommand::Bn(a) => (
            eval::bn::bn(
                &parse_list("--running-mean", &a.running_mean)?,
                &parse_list("--running-var", &a.running_var)?,
                parse_number("--p", &a.p)?,
                budget(&a.sampling)?,
            )?,
            a.sampling.json,
        ),
        EvalCommand::Attn(a) => {
            let values = a
                .values
                .as_deref()
                .map(|v| parse_list("--values", v))
                .transpose()?;
            (
                eval::attn::attn(
                    &parse_list("--a", &a.a)?,
                    parse_number("--p", &a.p)?,
                    values.as_deref(),
                    budget(&a.sampling)?,
                )?,
                a.sampling.json,
            )
        }
        EvalCommand::Ln(a) => (
            norm::ln(
                &parse_list("--x", &a.x)?,
                parse_number("--p", &a.p)?,
                optional_list("--gamma", &a.gamma)?,
                optional_list("--beta", &a.beta)?,
                parse_number("--eps", &a.eps)?,
                budget(&a.sampling)?,
            )?,
            a.sampling.json,
        ),
        EvalCommand::Rms(a) => (
            norm::rms(
                &parse_list("--x", &a.x)?,
                parse_number("--p", &a.p)?,
                optional_list("--gamma", &a.gamma)?,
                parse_number("--eps", &a.eps)?,
                budget(&a.sampling)?,
            )?,
            a.sampling.json,
        ),
        EvalCommand::Bypass(a) => (
            norm::bypass(
                &parse_list("--h", &a.h)?,
                &parse_list("--v", &a.v)?,
                parse_number("--p", &a.p)?,
                budget(&a.sampling)?,
            )?,
            a.sampling.json,
        ),
        EvalCommand::Compound(a) => (
            norm::compound(
                &parse_list("--x", &a.x)?,
                parse_number("--p", &a.p)?,
                norm::CompoundParams {
                    gamma1: parse_list("--gamma1", &a.gamma1)?,
                    beta1: parse_list("--beta1", &a.beta1)?,
                    gamma2: optional_list("--gamma2", &a.gamma2)?,
                    beta2: optional_list("--beta2", &a.beta2)?,
                },
                budget(&a.sampling)?,
            )?,
            a.sampling.json,
        ),
    })
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
        Command::Calibrate(args) => run_calibrate(args),
        Command::Size(args) => run_size(args),
        Command::Power(args) => run_power(args),
        Command::Plot(args) => {
            for path in crate::plot::write_all(&args.out)? {
                println!("wrote {}", path.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Eval(command) => {
            let (output, json) = eval_output(command)?;
            print_eval(&output, json);
            Ok(ExitCode::SUCCESS)
        }
        Command::Mutants(args) => run_mutants(&args),
        Command::Stack(args) => run_stack(args),
        Command::Bench(args) => crate::fast::bench::run_cli(&args),
    }
}

fn run_stack(args: StackArgs) -> Result<ExitCode, Error> {
    let rates = match &args.p {
        Some(p) => vec![parse_number("--p", p)?],
        None => vec![0.1, 0.3, 0.5],
    };
    let config = crate::stack::StackConfig {
        depth: args.depth,
        ..Default::default()
    };
    let budget = Budget::new(args.replicates, args.seed)?;
    let table = crate::stack::run(config, &rates, &Subject::reference(), budget)?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&table).unwrap_or_default()
        );
    } else {
        print!("{}", crate::stack::table(&table));
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
    let matrix = crate::mutants::kill_matrix(&options)?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&crate::mutants::to_json(&matrix)).unwrap_or_default()
        );
    } else {
        print!("{}", crate::mutants::table(&matrix));
    }
    Ok(if matrix.rows.iter().all(|r| r.as_expected()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
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
        print!("{}", report::table(&report));
    }
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn run_size(args: SizeArgs) -> Result<ExitCode, Error> {
    use crate::verify::size::{SizeOptions, measure, table};
    let budgets = parse_list("--budgets", &args.budgets)?
        .into_iter()
        .map(|b| {
            if b >= 1.0 && b.fract() == 0.0 && b <= u64::MAX as f64 {
                Ok(b as u64)
            } else {
                Err(Error::InvalidOption {
                    what: format!("--budgets: {b} is not a positive whole number of draws"),
                })
            }
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
    use crate::verify::calibrate::{CalibrationOptions, KS_FAMILY_ALPHA, calibrate, table};
    let options = CalibrationOptions {
        seeds: args.seeds,
        first_seed: args.first_seed,
        samples: args.samples,
        family: args.family,
        flag_alpha: KS_FAMILY_ALPHA,
    };
    let bar = progress::bar(options.seeds, "seeds", args.json);
    let result = calibrate(&Subject::reference(), &options, |done, _| {
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
    let run = power::power(&candidates, &options, |done, _| bar.set_position(done))?;
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
