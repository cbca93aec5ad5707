//! `dropmc bench`: the fixed workloads, timed on each engine path.
//!
//! | workload | what | size |
//! | --- | --- | --- |
//! | W1 | `E[LN(z)_k]` per channel and `E[V]`; `x ~ N(0.7, 1.3²)` drawn once | d = 512, p = 0.1 |
//! | W2 | `E[M]`, `E[V]`, `E[R²]` | d = 4096, p = 0.5 |
//! | W3 | attention rows: `E[R]`, `Var R`, `E[o]`; `a = softmax(N(0,1) logits)`, `v ~ N(0,1)` | T = 128, p = 0.1 |
//!
//! A figure is *mask elements per second*: masks (rows) × d (T) / wall
//! seconds, on all rayon threads. `benches/numpy_reference.py` prints the
//! same figure for the obvious numpy code. The command's options, progress
//! bar and printing live in the command-line module (this one is the
//! library side and imports nothing from it).

use std::time::Instant;

use rand_distr::{Distribution, Normal};
use serde::Serialize;

use super::FastSite;
use super::attention_row::row_sums;
use super::reference::{Statistics, estimate_per_element};
use crate::engine::{Budget, derive_seed, stream};
use crate::error::Error;
use crate::ops::{AnyNorm, LayerNorm, Site};
use crate::stats::Estimate;

/// LayerNorm ε of W1.
pub const EPS: f64 = 1e-5;
/// Seed from which each workload's fixed input is drawn.
pub const INPUT_SEED: u64 = 20_261_130;

/// The benchmark workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Workload {
    W1,
    W2,
    W3,
}

impl Workload {
    /// All workloads, in order.
    pub const ALL: [Workload; 3] = [Workload::W1, Workload::W2, Workload::W3];

    /// Name as printed.
    pub fn name(self) -> &'static str {
        match self {
            Workload::W1 => "W1",
            Workload::W2 => "W2",
            Workload::W3 => "W3",
        }
    }

    /// Units per mask (d, or T keys).
    pub fn width(self) -> usize {
        match self {
            Workload::W1 => 512,
            Workload::W2 => 4096,
            Workload::W3 => 128,
        }
    }

    /// Drop rate.
    pub fn p(self) -> f64 {
        match self {
            Workload::W2 => 0.5,
            _ => 0.1,
        }
    }
}

/// The two engine paths a workload runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnginePath {
    /// One uniform per element through `InvertedDropout`, direct statistics.
    Reference,
    /// Bit masks and subset-sum tables: the kernels the claims and `eval`
    /// run ([`FastSite`], [`super::attention_row`]).
    Fast,
}

impl EnginePath {
    /// Name as printed.
    pub fn name(self) -> &'static str {
        match self {
            EnginePath::Reference => "reference",
            EnginePath::Fast => "fast",
        }
    }
}

/// `x ~ N(0.7, 1.3²)`, `d` values, from a fixed seed.
pub fn workload_x(d: usize) -> Vec<f64> {
    let normal = Normal::new(0.7, 1.3).expect("valid normal");
    let mut rng = stream(INPUT_SEED, 0);
    (0..d).map(|_| normal.sample(&mut rng)).collect()
}

/// A softmax row over `t` standard-normal logits and `t` standard-normal
/// values, from a fixed seed.
pub fn workload_attention(t: usize) -> (Vec<f64>, Vec<f64>) {
    let mut rng = stream(INPUT_SEED, 1);
    let logits: Vec<f64> = (0..t)
        .map(|_| rand_distr::StandardNormal.sample(&mut rng))
        .collect();
    let max = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = logits.iter().map(|l| (l - max).exp()).collect();
    let total: f64 = e.iter().sum();
    let a = e.iter().map(|v| v / total).collect();
    let v = (0..t)
        .map(|_| rand_distr::StandardNormal.sample(&mut rng))
        .collect();
    (a, v)
}

/// Timed runs of one workload on one engine path: the figures are those of
/// the run with the median wall time.
// Same shape as the tail of `Calibration`'s fields (plain, then optional),
// because each is a different record with no field in common.
#[derive(Debug, Clone, Serialize)]
pub struct BenchRow {
    pub workload: &'static str,
    pub path: &'static str,
    pub masks: u64,
    pub elements: u64,
    /// Wall seconds of the median run.
    pub seconds: f64,
    /// Wall seconds of every timed run, in order (after one untimed warm-up).
    pub runs: Vec<f64>,
    pub elements_per_second: f64,
    /// CPU seconds of the whole process (all threads) during the run, where
    /// the platform tells (Linux `/proc/self/stat`); less sensitive to other
    /// load on the machine than wall seconds.
    pub cpu_seconds: Option<f64>,
    /// Headline estimates `(name, value, stderr)`.
    pub estimates: Vec<(String, f64, f64)>,
}

fn headline(name: &str, e: Estimate) -> (String, f64, f64) {
    (name.to_string(), e.value, e.stderr)
}

/// Runs `workload` on `path` with `masks` masks.
pub fn run_one(
    workload: Workload,
    path: EnginePath,
    masks: u64,
    seed: u64,
) -> Result<BenchRow, Error> {
    let budget = Budget::new(masks, derive_seed(seed, workload.name()))?;
    let d = workload.width();
    let p = workload.p();
    let start = Instant::now();
    let cpu_start = cpu_seconds();
    let estimates = match workload {
        Workload::W1 | Workload::W2 => {
            let x = workload_x(d);
            let per_channel = workload == Workload::W1;
            let ln = LayerNorm::plain(d, EPS)?;
            // [M, V, R², LN_0, …] on either path.
            let e: Vec<Estimate> = if path == EnginePath::Fast {
                let site = Site::plain(&x, p)?;
                let kernel = FastSite::new(&site, &AnyNorm::Layer(ln), per_channel)?;
                let e = kernel.estimate(budget)?.ok_or_else(|| Error::Degenerate {
                    what: format!("{}: the fast site kernel does not apply", workload.name()),
                })?;
                [vec![e.mean, e.var, e.r2], e.out].concat()
            } else {
                let ln = per_channel.then_some(&ln);
                estimate_per_element(&x, p, Statistics::Norm(ln), budget)?
            };
            let mut h = vec![
                headline("E[M]", e[0]),
                headline("E[V]", e[1]),
                headline("E[R2]", e[2]),
            ];
            if let Some(first) = e.get(3) {
                h.push(headline("E[LN_0]", *first));
            }
            h
        }
        Workload::W3 => {
            let (a, v) = workload_attention(d);
            let (r, r_var, o) = if path == EnginePath::Fast {
                let e = row_sums(&a, &v, p, budget)?;
                (e.row_sum_mean, e.row_sum_variance, e.output_mean)
            } else {
                let total = a.iter().sum();
                let row = Statistics::AttentionRow { v: &v, total };
                let e = estimate_per_element(&a, p, row, budget)?;
                (e[0], e[1], e[2])
            };
            vec![
                headline("E[R]", r),
                headline("Var R", r_var),
                headline("E[o]", o),
            ]
        }
    };
    let seconds = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds().zip(cpu_start).map(|(b, a)| b - a);
    let elements = masks * d as u64;
    Ok(BenchRow {
        workload: workload.name(),
        path: path.name(),
        masks,
        elements,
        seconds,
        runs: vec![seconds],
        elements_per_second: elements as f64 / seconds,
        cpu_seconds: cpu,
        estimates,
    })
}

/// User + system CPU seconds of this process so far, from Linux's
/// `/proc/self/stat` (fields 14 and 15, in ticks of 1/100 s, the fixed
/// `USER_HZ` of the proc interface); `None` elsewhere.
pub fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3, so fields 14 and 15 are at 11 and 12.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// Runs `workload` on `path` once untimed (warm-up: thread pool, page
/// faults, clock ramp-up), then `repeat` times (at least 1), and returns the
/// median run with every run's wall time. `on_run` is called after each run.
pub fn run_repeated(
    workload: Workload,
    path: EnginePath,
    masks: u64,
    seed: u64,
    repeat: usize,
    on_run: &mut dyn FnMut(),
) -> Result<BenchRow, Error> {
    run_one(workload, path, masks, seed)?;
    on_run();
    let mut rows = Vec::new();
    for _ in 0..repeat.max(1) {
        rows.push(run_one(workload, path, masks, seed)?);
        on_run();
    }
    let runs: Vec<f64> = rows.iter().map(|r| r.seconds).collect();
    rows.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
    let mut median = rows.swap_remove(rows.len() / 2);
    median.runs = runs;
    Ok(median)
}

/// Runs the given workloads on both paths: the fast path with `masks`
/// masks, the reference with `reference_masks`, each `repeat` times after a
/// warm-up (see [`run_repeated`]).
pub fn run_bench(
    workloads: &[Workload],
    masks: u64,
    reference_masks: u64,
    seed: u64,
    repeat: usize,
    on_run: &mut dyn FnMut(),
) -> Result<Vec<BenchRow>, Error> {
    let mut rows = Vec::new();
    for &w in workloads {
        for (path, n) in [
            (EnginePath::Reference, reference_masks),
            (EnginePath::Fast, masks),
        ] {
            rows.push(run_repeated(w, path, n, seed, repeat, on_run)?);
        }
    }
    Ok(rows)
}
