//! Criterion benchmarks of the fast path's kernels, one piece at a time,
//! with the same inputs as the `dropmc bench` workloads.
//!
//! ```text
//! cargo bench --bench kernels              # all
//! cargo bench --bench kernels -- chunk     # the whole per-chunk kernels
//! ```
//!
//! Throughput is in mask elements (bits, for the generators). Timings are
//! for one thread; `dropmc bench` measures whole runs on every core and
//! `benches/compare.sh` puts them beside the numpy reference.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dropmc::engine::{Budget, CHUNK, stream};
use dropmc::ops::fast::attention_row::row_sums_kernel;
use dropmc::ops::fast::bench::{EPS, Workload, workload_attention, workload_x};
use dropmc::ops::fast::{FastSite, Isa, MaskBits, SubsetTables, Xoshiro8, run_chunks_on};
use dropmc::ops::{AnyNorm, LayerNorm, Site};

/// One W1 block: 64 masks of 512 units, as 512 words.
fn mask_bits(c: &mut Criterion) {
    let mut g = c.benchmark_group("mask_bits");
    let words = 512;
    g.throughput(Throughput::Elements(64 * words as u64));
    for q in [0.9, 0.5] {
        let bits = MaskBits::new(q).expect("q");
        let mut lanes = Xoshiro8::from_stream(&mut stream(1, 0));
        let (mut out, mut scratch) = (vec![0u64; words], Vec::new());
        g.bench_function(format!("q={q}"), |b| {
            b.iter(|| {
                bits.fill(&mut lanes, &mut out, &mut scratch);
                black_box(&out);
            })
        });
    }
    g.finish();
}

/// W1's two-column tables (`x`, `x²`) and 64 random masks of 512 units.
fn w1_tables_and_masks() -> (SubsetTables<2>, Vec<u64>) {
    let x = workload_x(512);
    let sq: Vec<f64> = x.iter().map(|v| v * v).collect();
    let mut lanes = Xoshiro8::from_stream(&mut stream(2, 0));
    let masks = (0..64).flat_map(|_| lanes.next_words()).collect();
    (SubsetTables::new([&x, &sq]), masks)
}

/// The per-mask two-column masked sum of W1 (512 units, 8 words per mask).
fn masked_sum(c: &mut Criterion) {
    let (tables, masks) = w1_tables_and_masks();
    let mut g = c.benchmark_group("masked_sum");
    g.throughput(Throughput::Elements(64 * 512));
    g.bench_function("d=512, 64 masks", |b| {
        b.iter(|| {
            let mut total = [0.0; 2];
            for mask in masks.chunks_exact(8) {
                let [a, s] = tables.masked_sum(black_box(mask));
                total[0] += a;
                total[1] += s;
            }
            total
        })
    });
    g.finish();
}

/// 64 masks' two-column sums at once (W1's 512 units, word-major), at
/// every instruction-set level this CPU has.
fn block_sums(c: &mut Criterion) {
    let (tables, words) = w1_tables_and_masks();
    let mut g = c.benchmark_group("block_sums");
    g.throughput(Throughput::Elements(64 * 512));
    for isa in [Isa::Portable, Isa::Avx512] {
        if !isa.available() {
            continue;
        }
        let mut out = [[0.0; 64]; 2];
        g.bench_function(format!("d=512, 64 masks {isa:?}"), |b| {
            b.iter(|| {
                tables.block_sums(isa, black_box(&words), &mut out);
                out[0][0] + out[1][63]
            })
        });
    }
    g.finish();
}

/// The site kernel of W1 (`per_channel`) or W2: plain dropout of the
/// workload's `x`, then LayerNorm with `ε = EPS`.
fn site_kernel(workload: Workload, per_channel: bool) -> FastSite {
    let d = workload.width();
    let site = Site::plain(&workload_x(d), workload.p()).expect("site");
    let ln = AnyNorm::Layer(LayerNorm::plain(d, EPS).expect("LayerNorm"));
    FastSite::new(&site, &ln, per_channel).expect("kernel")
}

/// One whole chunk of each workload's kernel (the ones the claims run), at
/// every instruction-set level this CPU has (the same bits on each; the
/// time differs).
fn chunk(c: &mut Criterion) {
    let mut g = c.benchmark_group("chunk");
    g.sample_size(20);
    let budget = Budget::new(CHUNK, 3).expect("budget");
    let w1 = site_kernel(Workload::W1, true);
    let w2 = site_kernel(Workload::W2, false);
    let (a, v) = workload_attention(128);
    let w3 = row_sums_kernel(&a, &v, Workload::W3.p()).expect("W3");
    for isa in [Isa::Portable, Isa::Avx2, Isa::Avx512] {
        if !isa.available() {
            continue;
        }
        g.throughput(Throughput::Elements(CHUNK * 512));
        g.bench_function(format!("W1 {isa:?}"), |b| {
            b.iter(|| run_chunks_on(&w1, budget, isa).expect("run"))
        });
        g.throughput(Throughput::Elements(CHUNK * 4096));
        g.bench_function(format!("W2 {isa:?}"), |b| {
            b.iter(|| run_chunks_on(&w2, budget, isa).expect("run"))
        });
        g.throughput(Throughput::Elements(CHUNK * 128));
        g.bench_function(format!("W3 {isa:?}"), |b| {
            b.iter(|| run_chunks_on(&w3, budget, isa).expect("run"))
        });
    }
    g.finish();
}

criterion_group!(kernels, mask_bits, masked_sum, block_sums, chunk);
criterion_main!(kernels);
