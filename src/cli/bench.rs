//! `dropmc bench` on the command line: its options, the progress bar and
//! the printed table or JSON. The workloads and the timing are
//! [`crate::ops::fast::bench`].

use std::process::ExitCode;

use crate::error::Error;
use crate::ops::fast::bench::{BenchRow, Workload, run_bench};

/// A workload as typed on the command line (`W1`, or `w1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WorkloadArg {
    #[value(name = "W1", alias = "w1")]
    W1,
    #[value(name = "W2", alias = "w2")]
    W2,
    #[value(name = "W3", alias = "w3")]
    W3,
}

impl From<WorkloadArg> for Workload {
    fn from(w: WorkloadArg) -> Workload {
        match w {
            WorkloadArg::W1 => Workload::W1,
            WorkloadArg::W2 => Workload::W2,
            WorkloadArg::W3 => Workload::W3,
        }
    }
}

/// Options of `dropmc bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Run only this workload (default: all three).
    #[arg(long, value_enum)]
    pub workload: Option<WorkloadArg>,
    /// Masks (rows) per workload on the fast path.
    #[arg(long, default_value_t = 1_000_000)]
    pub masks: u64,
    /// Masks per workload on the reference path (default: masks / 10, at
    /// least 2; the reference is slow).
    #[arg(long)]
    pub reference_masks: Option<u64>,
    /// Seed of the random streams.
    #[arg(long, default_value_t = crate::engine::DEFAULT_SEED)]
    pub seed: u64,
    /// Timed runs per workload and path, after one untimed warm-up run; the
    /// median is reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub repeat: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `dropmc bench`.
pub fn run_cli(args: &BenchArgs) -> Result<ExitCode, Error> {
    let workloads: Vec<Workload> = match args.workload {
        Some(w) => vec![w.into()],
        None => Workload::ALL.to_vec(),
    };
    crate::eval::input::at_least_two("--masks", "masks", args.masks)?;
    let reference = match args.reference_masks {
        Some(n) => crate::eval::input::at_least_two("--reference-masks", "masks", n)?,
        None => (args.masks / 10).max(2),
    };
    let repeat = args.repeat as usize;
    let runs = workloads.len() as u64 * 2 * (args.repeat + 1);
    let bar = super::progress::bar(runs, "bench runs", args.json);
    let rows = run_bench(
        &workloads,
        args.masks,
        reference,
        args.seed,
        repeat,
        &mut || bar.inc(1),
    )?;
    bar.finish_and_clear();
    if args.json {
        let json = serde_json::json!({
            "threads": rayon::current_num_threads(),
            "repeat": args.repeat,
            "results": rows,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&json).unwrap_or_default()
        );
    } else {
        print!("{}", table(&rows));
    }
    Ok(ExitCode::SUCCESS)
}

/// The rows as a text table.
pub fn table(rows: &[BenchRow]) -> String {
    let mut out = String::new();
    for r in rows {
        let est: Vec<String> = r
            .estimates
            .iter()
            .map(|(n, v, s)| format!("{n} = {v:.6} ± {s:.1e}"))
            .collect();
        out.push_str(&format!(
            "{}  {:9}  {:>10} masks  {:8.3} s  {:.3e} mask elements/s  cpu {}  ({})\n",
            r.workload,
            r.path,
            r.masks,
            r.seconds,
            r.elements_per_second,
            r.cpu_seconds
                .map_or("n/a".to_string(), |c| format!("{c:.2} s")),
            est.join(", ")
        ));
    }
    out.push_str(&format!(
        "threads: {}; mask elements/s = masks x units / wall seconds of the median of {} runs (after a warm-up run)\n",
        rayon::current_num_threads(),
        rows.first().map_or(0, |r| r.runs.len())
    ));
    out
}
