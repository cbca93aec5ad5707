//! `dropmc audit --activations FILE`: the audit of a model's dropout→norm
//! and attention-dropout sites from a capture saved by `dropmc.audit` (`Audit.save`), with the
//! same engine, table and JSON as the Python audit (docs/audit.md).
//!
//! A run above the default budgets is timed first on two small pilots and
//! refused up front when they estimate it beyond an hour
//! ([`crate::conformance::pilot`]); its progress goes to stderr
//! ([`super::progress`]).

use std::process::ExitCode;

use clap::Args;

use super::progress;
use crate::audit::{
    DEFAULT_ATTENTION_SAMPLES, DEFAULT_SAMPLES, Tokens, audit_attention_sites_rows, audit_sites,
    npz, report,
};
use crate::conformance::pilot::{self, MAX_RUN_SECONDS};
use crate::error::Error;
use crate::eval::input::parse_count;

/// Options of `audit`.
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// The capture: an .npz written by dropmc.audit's Audit.save (np.savez, uncompressed).
    #[arg(long, value_name = "FILE")]
    pub activations: String,
    /// Masks per token for the sites too wide to enumerate.
    #[arg(long, default_value_t = DEFAULT_SAMPLES, value_parser = parse_count)]
    pub samples: u64,
    /// Draws per query, head and sampled coordinate of the attention sites' sampled check.
    #[arg(long, default_value_t = DEFAULT_ATTENTION_SAMPLES, value_parser = parse_count)]
    pub attention_samples: u64,
    /// Seed of the per-token streams (the Python audit's `seed`).
    #[arg(long, default_value_t = 0, value_parser = parse_count)]
    pub seed: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Masks per token of the first pilot: above the fast sampler's smallest
/// run (129 masks).
const PILOT_SAMPLES: u64 = 256;

/// Runs `audit`.
pub fn run(args: &AuditArgs) -> Result<ExitCode, Error> {
    let captures = npz::read_captures(&args.activations)?;
    refuse_a_long_audit(args, &captures)?;
    let shown = progress::bar(100, "audit, percent of the work", args.json);
    let bar = shown.clone();
    let observer: crate::audit::progress::Observer =
        Box::new(move |_, _, fraction, _| bar.set_position((100.0 * fraction) as u64));
    let audited = crate::audit::progress::with_progress(observer, || {
        let audits = audit_sites(&captures.sites, args.samples, args.seed)?;
        let attention = audit_attention_sites_rows(
            &captures.attention,
            args.attention_samples,
            Tokens::All,
            args.seed,
        )?;
        Ok::<_, Error>((audits, attention))
    });
    shown.finish_and_clear();
    let (audits, attention) = audited?;
    if args.json {
        println!("{}", report::audit_json(&audits, &attention));
    } else {
        print!("{}", report::audit_table(&audits, &attention));
    }
    Ok(ExitCode::SUCCESS)
}

/// Refuses an audit above the default budgets that the pilots estimate
/// beyond [`MAX_RUN_SECONDS`], naming the option and the estimate.
fn refuse_a_long_audit(args: &AuditArgs, captures: &npz::Captures) -> Result<(), Error> {
    let mut seconds = 0.0;
    let mut named = Vec::new();
    if args.samples > DEFAULT_SAMPLES && !captures.sites.is_empty() {
        let run = |n| audit_sites(&captures.sites, n, args.seed).map(drop);
        seconds += pilot::extrapolated_seconds(run, PILOT_SAMPLES, args.samples)?;
        named.push(format!("--samples {}", args.samples));
    }
    if args.attention_samples > DEFAULT_ATTENTION_SAMPLES && !captures.attention.is_empty() {
        let run = |n| {
            audit_attention_sites_rows(&captures.attention, n, Tokens::All, args.seed).map(drop)
        };
        seconds += pilot::extrapolated_seconds(run, PILOT_SAMPLES, args.attention_samples)?;
        named.push(format!("--attention-samples {}", args.attention_samples));
    }
    if seconds > MAX_RUN_SECONDS {
        return Err(Error::InvalidOption {
            what: format!(
                "the audit of {} at {} takes about {} (estimated from pilots), more than \
                 the {} a run may take: pass a smaller value",
                args.activations,
                named.join(" and "),
                pilot::duration_words(seconds),
                pilot::duration_words(MAX_RUN_SECONDS)
            ),
        });
    }
    Ok(())
}
