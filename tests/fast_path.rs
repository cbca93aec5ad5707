//! The fast sampling path (the kernels the claims run: [`FastSite`], the
//! attention row's) agrees with the exact values, with the claims' generic
//! per-element path, and with itself on any number of threads.
//!
//! Every statistical assertion here is a two-sided z-test at the suite's
//! per-assertion level (Student-t at each estimate's degrees of freedom, exact
//! binomial for bit counts), recorded by `tests/common` and summed by
//! `tests/zz_budget.rs`.

mod common;

use dropmc::claims::norm::{Config, SiteSampler, Stat};
use dropmc::engine::{Budget, CHUNK, estimate};
use dropmc::exact::enumerate_masks;
use dropmc::ops::fast::attention_row::{row_sums, row_sums_kernel};
use dropmc::ops::fast::{
    BernoulliBits, FastCompound, FastSite, Isa, MaskBits, SiteEstimates, Xoshiro8,
    run_chunks_with_progress,
};
use dropmc::ops::{AnyNorm, LayerNorm, Rate, RmsNorm, Site, Subject};
use dropmc::stats::{Estimate, z_test};

const EPS: f64 = 1e-5;

/// A deterministic, irregular input (no generator shared with the code).
fn input(d: usize, shift: f64) -> Vec<f64> {
    (0..d)
        .map(|k| shift + ((k * 37 % 23) as f64 - 11.0) / 7.0 + (k as f64 * 0.61).sin())
        .collect()
}

use common::{assert_consistent as assert_z, assert_same};

/// The site kernel of plain dropout of `x` before LayerNorm (`γ = 1`,
/// `β = 0`, `ε = EPS`), with the per-channel outputs when `per_channel`.
fn plain_site(x: &[f64], p: f64, per_channel: bool) -> FastSite {
    let site = Site::plain(x, p).unwrap();
    let ln = AnyNorm::Layer(LayerNorm::plain(x.len(), EPS).unwrap());
    FastSite::new(&site, &ln, per_channel).unwrap()
}

/// [`plain_site`]'s estimates (its fast path must apply).
fn plain_site_estimates(x: &[f64], p: f64, per_channel: bool, budget: Budget) -> SiteEstimates {
    plain_site(x, p, per_channel)
        .estimate(budget)
        .unwrap()
        .expect("the fast path applies")
}

/// μ, σ² (population), mean x², computed here by two passes.
fn moments(x: &[f64]) -> (f64, f64, f64) {
    let d = x.len() as f64;
    let mu = x.iter().sum::<f64>() / d;
    let var = x.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / d;
    let sq = x.iter().map(|v| v * v).sum::<f64>() / d;
    (mu, var, sq)
}

/// 6 assertions: E[M] = μ, E[V] = (σ²+pμ²)/q − p(σ²+μ²)/(qd), E[R²] = mean x²/q
/// (docs/formulas.md §2 and §3, exact for every d), at two configurations.
#[test]
fn fast_norm_matches_the_exact_formulas() {
    for (d, p, shift, seed) in [(100, 0.1, 0.7, 11), (256, 0.5, -0.3, 12)] {
        let x = input(d, shift);
        let (mu, s2, sq) = moments(&x);
        let q = 1.0 - p;
        let df = d as f64;
        let e = plain_site_estimates(&x, p, false, Budget::new(300_000, seed).unwrap());
        assert_z("E[M]", e.mean, mu);
        assert_z(
            "E[V]",
            e.var,
            (s2 + p * mu * mu) / q - p * (s2 + mu * mu) / (q * df),
        );
        assert_z("E[R2]", e.r2, sq / q);
        assert!(e.out.is_empty());
    }
}

/// The leading-order E[V] ≈ (σ²+pμ²)/q drops an O(1/d) term: at d = 8 the
/// fast path must see the gap (a failure is expected: spends no budget).
#[test]
fn fast_norm_detects_the_missing_finite_d_term() {
    let x = input(8, 0.5);
    let (mu, s2, _) = moments(&x);
    let p = 0.5;
    let e = plain_site_estimates(&x, p, false, Budget::new(400_000, 13).unwrap());
    assert!(z_test(e.var, (s2 + p * mu * mu) / (1.0 - p)).rejected);
}

/// 23 assertions: E[LN(z)_k] for all 10 channels, E[M], E[V], E[R²] against
/// the exact expectation over all 2^10 masks; and the per-channel variance
/// behind the batch-means standard error against the exact `Var LN_k`.
///
/// The fast path estimates `σ² = Var LN_k` from `B` block sums of 64 draws
/// (`fast::estimate_from_batches`). Block sums are nearly normal, and for a
/// sum of `n` iid draws the excess kurtosis is `κ/n` (κ: the draws' excess
/// kurtosis), so `Var σ̂² ≈ σ⁴ (2/(B − 1) + κ/(64 B))`; σ², κ come exact
/// from the enumeration.
#[test]
fn fast_layernorm_matches_full_enumeration() {
    let x = input(10, 0.4);
    let p = 0.3;
    let rate = Rate::new(p).unwrap();
    let d = x.len();
    let oracle = enumerate_masks(d, rate, 3 + 4 * d, |mask, out| {
        let z: Vec<f64> = x
            .iter()
            .zip(mask)
            .map(|(v, &m)| if m { v / rate.q() } else { 0.0 })
            .collect();
        let (m, v, r2) = moments(&z);
        out[0] = m;
        out[1] = v;
        out[2] = r2;
        for k in 0..d {
            let ln = (z[k] - m) / (v + EPS).sqrt();
            for r in 0..4 {
                out[3 + 4 * k + r] = ln.powi(r as i32 + 1);
            }
        }
    })
    .unwrap();
    let n = 400_000;
    let e = plain_site_estimates(&x, p, true, Budget::new(n, 14).unwrap());
    assert_z("E[M]", e.mean, oracle.values[0]);
    assert_z("E[V]", e.var, oracle.values[1]);
    assert_z("E[R2]", e.r2, oracle.values[2]);
    let blocks = (n as f64 / 64.0).ceil();
    for k in 0..d {
        let [m1, m2, m3, m4] = [0, 1, 2, 3].map(|r| oracle.values[3 + 4 * k + r]);
        assert_z(&format!("E[LN_{k}]"), e.out[k], m1);
        let var = m2 - m1 * m1;
        let central4 = m4 - 4.0 * m1 * m3 + 6.0 * m1 * m1 * m2 - 3.0 * m1.powi(4);
        let excess = central4 / (var * var) - 3.0;
        let sd = var * (2.0 / (blocks - 1.0) + excess / (64.0 * blocks)).sqrt();
        let estimated = e.out[k].stderr.powi(2) * n as f64;
        let variance = Estimate {
            value: estimated,
            stderr: sd,
            n: blocks as u64,
            dof: blocks - 1.0,
        };
        assert_z(&format!("Var LN_{k}: batch means vs exact"), variance, var);
    }
}

/// 67 assertions: E[M], E[V], E[R²] and E[LN(z)_k] for 64 channels, fast
/// path against the claims' generic path (one uniform per element through
/// the reference dropout layer, [`SiteSampler`]), each statistic on its own
/// draws.
#[test]
fn fast_layernorm_agrees_with_the_generic_path() {
    let x = input(64, 0.7);
    let p = 0.1;
    let fast = plain_site_estimates(&x, p, true, Budget::new(200_000, 15).unwrap());
    let ln = LayerNorm::plain(x.len(), EPS).unwrap();
    let config = Config {
        site: Site::plain(&x, p).unwrap(),
        ln: ln.clone(),
        ln2: ln,
        rms: RmsNorm::new(vec![1.0; x.len()], EPS).unwrap(),
    };
    let subject = Subject::reference();
    let slow = |stat: Stat, seed: u64| {
        let sampler = SiteSampler {
            subject: &subject,
            config: &config,
            stat,
        };
        estimate(&sampler, Budget::new(50_000, seed).unwrap())
            .unwrap()
            .estimates()
    };
    assert_same("E[M]", fast.mean, slow(Stat::M, 16)[0]);
    assert_same("E[V]", fast.var, slow(Stat::V, 17)[0]);
    assert_same("E[R2]", fast.r2, slow(Stat::R2, 18)[0]);
    let slow_ln = slow(Stat::Ln, 19);
    assert_eq!((fast.out.len(), slow_ln.len()), (64, 64));
    for (k, (fast, slow)) in fast.out.iter().zip(&slow_ln).enumerate() {
        assert_same(&format!("E[LN_{k}]"), *fast, *slow);
    }
}

fn attention_row(t: usize) -> (Vec<f64>, Vec<f64>) {
    let logits: Vec<f64> = (0..t).map(|i| ((i * 13 % 7) as f64 - 3.0) * 0.5).collect();
    let e: Vec<f64> = logits.iter().map(|l| l.exp()).collect();
    let total: f64 = e.iter().sum();
    let a = e.iter().map(|v| v / total).collect();
    let v = (0..t).map(|i| (i as f64 * 0.37).cos()).collect();
    (a, v)
}

/// 3 assertions: E[R] = Σa, Var R = (p/q) Σa², E[o] = Σ a v
/// (docs/formulas.md §7, exact) on the attention row's kernel.
#[test]
fn fast_attention_matches_the_formulas() {
    let (a, v) = attention_row(128);
    let p = 0.1;
    let q = 1.0 - p;
    let fast = row_sums(&a, &v, p, Budget::new(500_000, 17).unwrap()).unwrap();
    assert_z("E[R]", fast.row_sum_mean, a.iter().sum());
    assert_z(
        "Var R",
        fast.row_sum_variance,
        p / q * a.iter().map(|x| x * x).sum::<f64>(),
    );
    assert_z(
        "E[o]",
        fast.output_mean,
        a.iter().zip(&v).map(|(a, v)| a * v).sum(),
    );
}

/// 8 assertions: the fraction of 1 bits is q (exact binomial test), for q with
/// one digit, a short and a long expansion, and a repeating one, by the plain
/// walk (`BernoulliBits`) and by the compacting generator (`MaskBits`).
#[test]
fn bernoulli_bits_keep_with_probability_q() {
    let words = 1usize << 16;
    for (i, q) in [0.5, 0.75, 0.9, 1.0 / 3.0].into_iter().enumerate() {
        let plain = BernoulliBits::new(q).unwrap();
        let mut rng = dropmc::engine::stream(19, i as u64);
        let ones: u64 = (0..words)
            .map(|_| u64::from(plain.word(&mut rng).count_ones()))
            .sum();
        assert_fraction(&format!("plain walk, q = {q}"), ones, words, q);
        let compact = MaskBits::new(q).unwrap();
        let mut lanes = Xoshiro8::from_stream(&mut dropmc::engine::stream(20, i as u64));
        let mut out = vec![0u64; words];
        compact.fill(&mut lanes, &mut out, &mut Vec::new());
        let ones: u64 = out.iter().map(|w| u64::from(w.count_ones())).sum();
        assert_fraction(&format!("compacting, q = {q}"), ones, words, q);
    }
}

fn assert_fraction(what: &str, ones: u64, words: usize, q: f64) {
    common::assert_count(what, ones, words as u64 * 64, q);
}

/// The site kernels every determinism test runs: a bypass site before
/// LayerNorm (`ε = 0`, per-unit `γ`, `β`, a shrink-factor functional), two
/// dropped terms before RMSNorm (`ε > 0`), and the compound site; `d` not a
/// multiple of 64.
struct SiteKernels {
    bypass: FastSite,
    terms: FastSite,
    compound: FastCompound,
}

fn site_kernels(d: usize) -> SiteKernels {
    let x = input(d, 0.7);
    let h = input(d, -0.2);
    let g: Vec<f64> = (0..d).map(|k| 1.0 + 0.1 * (k % 3) as f64).collect();
    let b: Vec<f64> = (0..d).map(|k| 0.05 * (k % 4) as f64).collect();
    let ln = LayerNorm::new(g.clone(), b.clone(), 0.0).unwrap();
    let rms = RmsNorm::new(g.clone(), 1e-3).unwrap();
    let bypass = Site::new(h.clone(), vec![(x.clone(), 0.1)]).unwrap();
    let terms = Site::new(h.clone(), vec![(x.clone(), 0.3), (h.clone(), 0.5)]).unwrap();
    SiteKernels {
        bypass: FastSite::new(&bypass, &AnyNorm::Layer(ln.clone()), true)
            .unwrap()
            .with_functional(&b)
            .unwrap(),
        terms: FastSite::new(&terms, &AnyNorm::Rms(rms), true).unwrap(),
        compound: FastCompound::new(&x, 0.2, &ln, &LayerNorm::plain(d, 0.0).unwrap(), &g, &b)
            .unwrap(),
    }
}

impl SiteKernels {
    /// The raw chunk sums of every kernel, as bits.
    fn sum_bits(&self, budget: Budget, isa: Isa) -> Vec<u64> {
        let mut bits = Vec::new();
        for sums in [
            dropmc::ops::fast::run_chunks_on(&self.bypass, budget, isa),
            dropmc::ops::fast::run_chunks_on(&self.terms, budget, isa),
            dropmc::ops::fast::run_chunks_on(&self.compound, budget, isa),
        ] {
            bits.extend(sums.unwrap().iter().map(|s| s.to_bits()));
        }
        bits
    }

    /// The estimates of every kernel, as bits (all must be on the fast path).
    fn estimate_bits(&self, budget: Budget) -> Vec<u64> {
        let mut all: Vec<Estimate> = Vec::new();
        for kernel in [&self.bypass, &self.terms] {
            let e = kernel.estimate(budget).unwrap().expect("fast path applies");
            all.extend([e.mean, e.var_of_mean, e.var, e.r2]);
            all.extend(e.out.iter().chain(&e.functionals));
        }
        let e = self
            .compound
            .estimate(budget)
            .unwrap()
            .expect("fast path applies");
        all.extend(e.out.iter().chain(&e.factors));
        all.iter()
            .flat_map(|e| [e.value.to_bits(), e.stderr.to_bits()])
            .collect()
    }
}

fn bits_of(e: &SiteEstimates) -> Vec<u64> {
    [e.mean, e.var_of_mean, e.var, e.r2]
        .iter()
        .chain(&e.out)
        .flat_map(|e| [e.value.to_bits(), e.stderr.to_bits()])
        .collect()
}

#[test]
fn fast_path_is_bit_identical_on_1_2_and_4_threads() {
    // Not a multiple of the chunk size, more than one parallel block, and a
    // width that is not a multiple of 64.
    let budget = Budget::new(70 * CHUNK + 123, 42).unwrap();
    let x = input(100, 0.7);
    let (a, v) = attention_row(72);
    let sites = site_kernels(100);
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let n = plain_site_estimates(&x, 0.1, true, budget);
            let t = row_sums(&a, &v, 0.1, budget).unwrap();
            let mut b = bits_of(&n);
            for e in [
                t.row_sum_mean,
                t.row_sum_variance,
                t.output_mean,
                t.output_variance,
            ] {
                b.extend([e.value.to_bits(), e.stderr.to_bits()]);
            }
            b.extend(sites.estimate_bits(budget));
            b
        })
    };
    let one = run(1);
    assert_eq!(one, run(2));
    assert_eq!(one, run(4));
    // And a different seed reads different streams.
    let other = plain_site_estimates(&x, 0.1, true, Budget::new(10_000, 43).unwrap());
    let same = plain_site_estimates(&x, 0.1, true, Budget::new(10_000, 42).unwrap());
    assert_ne!(bits_of(&other), bits_of(&same));
    let small = |seed| sites.estimate_bits(Budget::new(10_000, seed).unwrap());
    assert_ne!(small(42), small(43));
}

/// Every instruction-set level this CPU has gives the same bits as the
/// portable build (integer mask code, and the same `f64` operations in the
/// same order: Rust never fuses a multiply and an add on its own).
#[test]
fn fast_path_is_bit_identical_on_every_instruction_set() {
    let budget = Budget::new(2 * CHUNK + 77, 5).unwrap();
    let x = input(130, 0.2);
    let (a, v) = attention_row(72);
    let norm = plain_site(&x, 0.3, true);
    // Without the per-channel sums, and several words per mask.
    let wide = plain_site(&input(300, -0.4), 0.5, false);
    let attention = row_sums_kernel(&a, &v, 0.1).unwrap();
    let sites = site_kernels(130);
    let run = |isa: Isa| {
        let mut bits: Vec<u64> = dropmc::ops::fast::run_chunks_on(&norm, budget, isa)
            .unwrap()
            .iter()
            .map(|s| s.to_bits())
            .collect();
        let wide = dropmc::ops::fast::run_chunks_on(&wide, budget, isa).unwrap();
        bits.extend(wide.iter().map(|s| s.to_bits()));
        let attention = dropmc::ops::fast::run_chunks_on(&attention, budget, isa).unwrap();
        bits.extend(attention.iter().map(|s| s.to_bits()));
        bits.extend(sites.sum_bits(budget, isa));
        bits
    };
    let portable = run(Isa::Portable);
    for isa in [Isa::Avx2, Isa::Avx512] {
        if isa.available() {
            assert_eq!(run(isa), portable, "{isa:?}");
        }
    }
}

/// The same for every bit-mask kernel of the dropout, attention,
/// mask-shape and ensemble families (and `eval moments|attn`).
#[test]
fn family_kernels_are_bit_identical_on_every_instruction_set() {
    let budget = Budget::new(2 * CHUNK + 77, 6).unwrap();
    let portable = common::family_kernels::family_kernel_bits(budget, Isa::Portable);
    for isa in [Isa::Avx2, Isa::Avx512] {
        if isa.available() {
            assert_eq!(
                common::family_kernels::family_kernel_bits(budget, isa),
                portable,
                "{isa:?}"
            );
        }
    }
}

/// The progress callback sees every block's end, in order, ending at the
/// sample count, and the sums are the same bits as without it.
#[test]
fn progress_reports_each_block_and_changes_no_bit() {
    let budget = Budget::new(130 * CHUNK + 5, 8).unwrap();
    let norm = plain_site(&input(70, 0.3), 0.1, true);
    let seen = std::cell::RefCell::new(Vec::new());
    let with = run_chunks_with_progress(&norm, budget, Isa::best(), &|done| {
        seen.borrow_mut().push(done)
    })
    .unwrap();
    let without = dropmc::ops::fast::run_chunks_on(&norm, budget, Isa::best()).unwrap();
    let bits = |v: &[f64]| v.iter().map(|s| s.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&with), bits(&without));
    let seen = seen.into_inner();
    assert!(seen.len() >= 3, "{seen:?}");
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    assert_eq!(seen.last(), Some(&budget.samples));
}

#[test]
fn bad_input_is_a_typed_error() {
    let site = Site::plain(&[1.0, 2.0], 0.1).unwrap();
    let norm_of = |d| AnyNorm::Layer(LayerNorm::plain(d, EPS).unwrap());
    // A norm of another width than the site's.
    assert!(FastSite::new(&site, &norm_of(3), true).is_err());
    let budget = Budget::new(1_000, 0).unwrap();
    assert!(row_sums(&[0.5, 0.5], &[1.0], 0.1, budget).is_err());
    assert!(row_sums(&[0.5], &[1.0], -0.1, budget).is_err());
    assert!(row_sums(&[0.5, f64::NAN], &[1.0, 1.0], 0.1, budget).is_err());
    // Too few masks for batch means: no fast estimate (the claims then
    // take the generic path), not a wrong one.
    let f = FastSite::new(&site, &norm_of(2), true).unwrap();
    let one = Budget {
        samples: 1,
        seed: 0,
    };
    assert!(f.estimate(one).unwrap().is_none());
}
