//! Times the fast LayerNorm kernel at a large width: `E[LN(z)_k]` for every
//! channel at d = 10^5 (default) from 10^6 masks, as `FastSite::estimate`
//! runs it for the claims (with progress on stderr through
//! `run_chunks_with_progress`),
//! and prints wall and CPU seconds and the peak resident memory.
//!
//! ```text
//! cargo run --release --example fast_norm_large [-- D MASKS]
//! ```

use std::time::Instant;

use dropmc::engine::Budget;
use dropmc::ops::fast::bench::{cpu_seconds, workload_x};
use dropmc::ops::fast::{FastSite, Isa, run_chunks_with_progress};
use dropmc::ops::{AnyNorm, LayerNorm, Site};

fn main() -> Result<(), dropmc::Error> {
    let mut args = std::env::args().skip(1);
    let d: usize = args.next().map_or(100_000, |a| a.parse().expect("D"));
    let masks: u64 = args.next().map_or(1_000_000, |a| a.parse().expect("MASKS"));
    let x = workload_x(d);
    let start = Instant::now();
    let norm = AnyNorm::Layer(LayerNorm::plain(d, 1e-5)?);
    let kernel = FastSite::new(&Site::plain(&x, 0.1)?, &norm, true)?;
    let built = start.elapsed().as_secs_f64();
    let budget = Budget::new(masks, 1)?;
    let cpu_start = cpu_seconds();
    // The sums `estimate` computes (the same chunks, the same bits), with
    // progress on stderr.
    let sums = run_chunks_with_progress(&kernel, budget, Isa::best(), &|done| {
        eprint!("\r{done}/{masks} masks");
    })?;
    eprintln!();
    let run = start.elapsed().as_secs_f64() - built;
    let cpu = cpu_seconds().zip(cpu_start).map(|(b, a)| b - a);
    println!(
        "d = {d}, {masks} masks, {} threads: tables {built:.3} s, run {run:.2} s wall, {} s CPU; {} sums",
        rayon::current_num_threads(),
        cpu.map_or("n/a".to_string(), |c| format!("{c:.2}")),
        sums.len()
    );
    if let Ok(status) = std::fs::read_to_string("/proc/self/status")
        && let Some(line) = status.lines().find(|l| l.starts_with("VmHWM"))
    {
        println!(
            "peak resident memory: {}",
            line.trim_start_matches("VmHWM:").trim()
        );
    }
    Ok(())
}
