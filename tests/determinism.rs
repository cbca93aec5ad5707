//! Same seed and sample count, same bits, whatever the thread count.

mod common;

use dropmc::claims::dropout::{PairSampler, UNIT_P, UNIT_X};
use dropmc::engine::{Budget, CHUNK, estimate};
use dropmc::ops::Subject;
use dropmc::ops::fast::Isa;

fn run_on(threads: usize, budget: Budget) -> (Vec<u64>, Vec<u64>) {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    let subject = Subject::reference();
    let sampler = PairSampler {
        layer: subject.dropout,
        x: &UNIT_X,
        p: UNIT_P,
        dim: UNIT_X.len(),
        pairs: true,
        statistic: &|d, out| out.copy_from_slice(d.z),
    };
    let acc = pool.install(|| estimate(&sampler, budget)).unwrap();
    let bits = |v: &[f64]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    (bits(acc.means()), bits(&acc.variances()))
}

#[test]
fn results_are_bit_identical_on_1_2_and_4_threads() {
    // Not a multiple of the chunk size, and more than one parallel block.
    let budget = Budget::new(70 * CHUNK + 123, 42).unwrap();
    let one = run_on(1, budget);
    assert_eq!(one, run_on(2, budget));
    assert_eq!(one, run_on(4, budget));
}

#[test]
fn a_different_seed_gives_different_bits() {
    let a = run_on(2, Budget::new(10_000, 1).unwrap());
    let b = run_on(2, Budget::new(10_000, 2).unwrap());
    assert_ne!(a, b);
}

/// Every bit-mask kernel of the dropout, attention, mask-shape and ensemble
/// families (and `eval moments|attn`) gives the same bits on 1, 2 and 4
/// threads, and a different seed reads different streams.
#[test]
fn family_kernels_are_bit_identical_on_1_2_and_4_threads() {
    let budget = Budget::new(70 * CHUNK + 123, 42).unwrap();
    let run = |threads: usize, budget: Budget| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| common::family_kernels::family_kernel_bits(budget, Isa::best()))
    };
    let one = run(1, budget);
    assert_eq!(one, run(2, budget));
    assert_eq!(one, run(4, budget));
    let other = run(2, Budget::new(70 * CHUNK + 123, 43).unwrap());
    for ((name, a), (_, b)) in one.iter().zip(&other) {
        assert_ne!(a, b, "{name}: seeds 42 and 43 gave the same bits");
    }
}

/// The claims on the norm-site fast path (`FastSite`, `FastCompound`):
/// same bits on 1 and 3 threads, for every claim that declares it.
#[test]
fn fast_norm_claims_are_bit_identical_on_1_and_3_threads() {
    use dropmc::claims::{FastPath, registry};
    let on_site_path = || {
        registry()
            .into_iter()
            .filter(|c| c.fast_path() == Some(FastPath::NormSite))
    };
    let budget = Budget::new(3 * CHUNK + 71, 9).unwrap();
    let run = |threads: usize| -> Vec<u64> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            on_site_path()
                .flat_map(|c| c.fast_estimate(budget).expect("fast").unwrap())
                .flat_map(|e| [e.value.to_bits(), e.stderr.to_bits()])
                .collect()
        })
    };
    let one = run(1);
    // A value and a standard error for every component those claims state.
    let components: usize = on_site_path().map(|c| c.analytic().unwrap().len()).sum();
    assert!(components > 0);
    assert_eq!(one.len(), 2 * components);
    assert_eq!(one, run(3));
}
