//! `dropmc eval`: a family's formulas, exact values and Monte Carlo
//! estimates on the user's own numbers.

use clap::{Args, Subcommand};

use super::input::{parse_count, read_eps, read_list, read_number};
use crate::engine::Budget;
use crate::error::Error;
use crate::eval;
use crate::report::DEFAULT_SEED;

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

/// Sampling options shared by every `eval` quantity.
#[derive(Debug, Args)]
pub struct SamplingArgs {
    /// Monte Carlo draws.
    #[arg(long, default_value_t = 1_000_000, value_parser = parse_count)]
    pub samples: u64,
    /// Seed of the random streams.
    #[arg(long, default_value_t = DEFAULT_SEED, value_parser = parse_count)]
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

fn optional_list(what: &str, text: &Option<String>) -> Result<Option<Vec<f64>>, Error> {
    text.as_deref().map(|t| read_list(what, t)).transpose()
}

/// Runs one `eval` quantity; returns its output and whether to print JSON.
pub fn eval_output(command: EvalCommand) -> Result<(eval::EvalOutput, bool), Error> {
    use crate::eval::norm;
    Ok(match command {
        EvalCommand::Moments(a) => (
            eval::moments::moments(
                &read_list("--x", &a.x)?,
                read_number("--p", &a.p)?,
                budget(&a.sampling)?,
            )?,
            a.sampling.json,
        ),
        EvalCommand::Bn(a) => (
            eval::bn::bn(
                &read_list("--running-mean", &a.running_mean)?,
                &read_list("--running-var", &a.running_var)?,
                read_number("--p", &a.p)?,
                budget(&a.sampling)?,
            )?,
            a.sampling.json,
        ),
        EvalCommand::Attn(a) => {
            let values = a
                .values
                .as_deref()
                .map(|v| read_list("--values", v))
                .transpose()?;
            (
                eval::attn::attn(
                    &read_list("--a", &a.a)?,
                    read_number("--p", &a.p)?,
                    values.as_deref(),
                    budget(&a.sampling)?,
                )?,
                a.sampling.json,
            )
        }
        EvalCommand::Ln(a) => (
            norm::ln(
                &read_list("--x", &a.x)?,
                read_number("--p", &a.p)?,
                optional_list("--gamma", &a.gamma)?,
                optional_list("--beta", &a.beta)?,
                read_eps("--eps", &a.eps)?,
                budget(&a.sampling)?,
            )?,
            a.sampling.json,
        ),
        EvalCommand::Rms(a) => (
            norm::rms(
                &read_list("--x", &a.x)?,
                read_number("--p", &a.p)?,
                optional_list("--gamma", &a.gamma)?,
                read_eps("--eps", &a.eps)?,
                budget(&a.sampling)?,
            )?,
            a.sampling.json,
        ),
        EvalCommand::Bypass(a) => (
            norm::bypass(
                &read_list("--h", &a.h)?,
                &read_list("--v", &a.v)?,
                read_number("--p", &a.p)?,
                budget(&a.sampling)?,
            )?,
            a.sampling.json,
        ),
        EvalCommand::Compound(a) => (
            norm::compound(
                &read_list("--x", &a.x)?,
                read_number("--p", &a.p)?,
                norm::CompoundParams {
                    gamma1: read_list("--gamma1", &a.gamma1)?,
                    beta1: read_list("--beta1", &a.beta1)?,
                    gamma2: optional_list("--gamma2", &a.gamma2)?,
                    beta2: optional_list("--beta2", &a.beta2)?,
                },
                budget(&a.sampling)?,
            )?,
            a.sampling.json,
        ),
    })
}

fn budget(args: &SamplingArgs) -> Result<Budget, Error> {
    Budget::new(args.samples, args.seed)
}

/// Runs `eval`, with a bar over the draws of the kernel running now (an
/// eval runs a few: the outputs, the pairs for a variance, ...).
pub fn run(command: EvalCommand) -> Result<(), Error> {
    let bar = super::progress::bar(1, "draws", false);
    let shown = bar.clone();
    let output = crate::fast::observe_progress(
        Box::new(move |done, total| {
            shown.set_length(total);
            shown.set_position(done);
        }),
        || eval_output(command),
    );
    bar.finish_and_clear();
    let (output, json) = output?;
    super::emit::emit(json, &output, || eval::table(&output));
    Ok(())
}
