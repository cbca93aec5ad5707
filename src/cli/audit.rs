//! `dropmc audit --activations FILE`: the audit of a model's dropout→norm
//! and attention-dropout sites from a capture saved by `dropmc.audit` (`Audit.save`), with the
//! same engine, table and JSON as the Python audit (docs/audit.md).

use std::process::ExitCode;

use clap::Args;

use crate::audit::{
    DEFAULT_ATTENTION_SAMPLES, DEFAULT_SAMPLES, audit_attention_sites, audit_sites, npz, report,
};
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

/// Runs `audit`.
pub fn run(args: &AuditArgs) -> Result<ExitCode, Error> {
    let captures = npz::read_captures(&args.activations)?;
    let audits = audit_sites(&captures.sites, args.samples, args.seed)?;
    let attention = audit_attention_sites(&captures.attention, args.attention_samples, args.seed)?;
    if args.json {
        println!("{}", report::audit_json(&audits, &attention));
    } else {
        print!("{}", report::audit_table(&audits, &attention));
    }
    Ok(ExitCode::SUCCESS)
}
