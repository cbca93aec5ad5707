//! The frameworks' normalization layers after dropout, against the
//! normalization and BatchNorm claims (docs/formulas.md §2–§5).
//!
//! Only the normalization is the framework's: the dropout masks are the
//! crate's (every mask by enumeration, or the reference [`InvertedDropout`]
//! driven by the engine's seeded streams), so every run is reproducible and
//! a failure points at the framework's layer.
//!
//! * **Exact, no statistics.** All `2^d` masks of a site (d = 10 plain,
//!   d = 8 bypass) go through the framework's layer in one batch; weighting
//!   its outputs by `q^k p^(d−k)` gives the framework's exact `E[norm(y)]`,
//!   which must equal the crate's oracle (`exact::site_pipeline`) within
//!   the oracle's rounding plus the expected rounding bound of the
//!   framework's arithmetic (`adapters::rounding`, derived there).
//! * **The leading-order correction applies to the framework's layer.**
//!   The corrected estimate (`c · LN(x)`, `c_damped · LN(x)`, `c_rms ·
//!   RMS(x)`) is closer to the framework's exact expectation than the
//!   uncorrected `LN(x)` / `RMS(x)`, by more than the rounding of both.
//! * **Sampled.** The same per-channel expectation estimated from seeded
//!   masks through the framework's layer, z-tested against the exact value.
//! * **burn's BatchNorm buffers** against the BatchNorm claims, from 1 000
//!   independent replicate layers (channels) and their empirical variance.
//!
//! # False-alarm budget of this file
//!
//! Not part of the default suite's budget (`tests/zz_budget.rs`): it runs only
//! with `--features candle` and/or `burn`. Its statistical assertions, at
//! the suite's per-assertion level (`critical_z()`, α = 10⁻¹⁰):
//! * `candle_layer_norms_sampled_match_the_exact_expectation`: 10 channels
//!   × 2 layers (fused LayerNorm, RmsNorm) = 20;
//! * `burn_layer_norm_sampled_matches_the_exact_expectation`: 10;
//! * `burn_batch_norm_buffers_match_the_biased_prediction`: running
//!   variance and running mean of 3 channel configurations = 6.
//!
//! 36 in all, under [`FRAMEWORK_NORM_ASSERTION_BUDGET`] = 100, so this file
//! fails by chance on unchanged frameworks with probability at most 10⁻⁸.
//! The assertions that expect a rejection (the uncorrected output, PyTorch's
//! unbiased buffer) spend no false-alarm budget; their power is printed.
//! Every other assertion compares exact computations within a derived
//! rounding bound.
#![cfg(any(feature = "candle", feature = "burn"))]

use dropmc::Error;
use dropmc::engine::{Budget, Sampler, Stream, derive_seed, estimate};
use dropmc::exact::{Oracle, Pipeline, site_expectation, site_pipeline};
use dropmc::formulas::{bypass, layernorm, rmsnorm};
use dropmc::ops::adapters::rounding::{Precision, condition, norm_bound};
use dropmc::ops::{InvertedDropout, LayerNorm, Normalization, RmsNorm, Site};
use dropmc::stats::{Estimate, assertion_alpha, critical_z, rejection_probability, z_test};

/// Statistical assertions this file may make (see the module doc).
const FRAMEWORK_NORM_ASSERTION_BUDGET: u64 = 100;
/// Statistical assertions it makes: one per channel of each sampled layer
/// (3 layers of `X.len()` channels), two per BatchNorm configuration.
const ASSERTIONS: u64 = 3 * X.len() as u64 + 2 * 3;
const _: () = assert!(ASSERTIONS <= FRAMEWORK_NORM_ASSERTION_BUDGET);

#[test]
fn the_file_stays_within_its_budget() {
    // The module docs' chance of a false failure, 10⁻⁸: the file's share
    // FAMILY_ALPHA · FRAMEWORK_NORM_ASSERTION_BUDGET / SUITE_ASSERTION_BUDGET
    // of the suite's rate (each side two roundings).
    let share = dropmc::stats::FAMILY_ALPHA * FRAMEWORK_NORM_ASSERTION_BUDGET as f64
        / dropmc::stats::SUITE_ASSERTION_BUDGET as f64;
    assert!(
        FRAMEWORK_NORM_ASSERTION_BUDGET as f64 * assertion_alpha()
            <= share + dropmc::stats::tolerance::bound(4.0, share)
    );
}

const SEED: u64 = 1;
const EPS: f64 = 1e-5;
const P: f64 = 0.3;
/// A plain site: μ = 0.47, σ = 1.05, so `c(μ, σ)` differs from `√q`.
const X: [f64; 10] = [0.9, -0.4, 1.7, 0.2, -1.1, 2.3, 0.6, -0.8, 1.2, 0.1];
/// A bypass site `y = h + dropout(v)` (docs/formulas.md §4), d = 8.
const H: [f64; 8] = [0.5, -1.0, 0.3, 1.4, -0.2, 0.8, -0.7, 0.1];
const V: [f64; 8] = [0.6, 0.2, -0.9, 0.4, 1.1, -0.3, 0.7, -0.5];

fn plain_site() -> Site {
    Site::plain(&X, P).expect("site")
}

fn bypass_site() -> Site {
    Site::new(H.to_vec(), vec![(V.to_vec(), P)]).expect("site")
}

/// A framework's normalization layer: unit gain, zero bias, `ε = EPS`,
/// applied to every row of `d` values in a row-major batch.
#[derive(Clone, Copy)]
struct Layer {
    name: &'static str,
    centring: Normalization,
    /// The precision the layer computes in (its rounding bound).
    precision: Precision,
    run: fn(&[f64], usize) -> Result<Vec<f64>, Error>,
}

/// Every `y` the site can produce, one row per mask, in the order of the
/// crate's enumeration (`exact::site_expectation`).
fn all_rows(site: &Site) -> Vec<f64> {
    let mut rows = Vec::with_capacity(site.dim() << site.dim());
    site_expectation(site, 0, |y, _| rows.extend_from_slice(y)).expect("enumerates");
    rows
}

/// The exact expectation of per-mask values `per_row` (d per mask, in the
/// enumeration's order), with the enumeration's rounding bound.
fn expectation_of_rows(site: &Site, per_row: &[f64]) -> Oracle {
    let d = site.dim();
    let mut rows = per_row.chunks(d);
    site_expectation(site, d, |_, out| {
        out.copy_from_slice(rows.next().expect("one row per mask"));
    })
    .expect("enumerates")
}

/// The framework's exact `E[norm(y)]`, and the exact expectation of its
/// per-row rounding bound.
struct Through {
    framework: Oracle,
    bound: Oracle,
}

fn through(site: &Site, layer: Layer) -> Through {
    let d = site.dim();
    let rows = all_rows(site);
    let out = (layer.run)(&rows, d).expect("the framework runs");
    let mut bounds = vec![0.0; rows.len()];
    let gamma = (d as f64 + 2.0) * layer.precision.epsilon();
    for (z, b) in rows.chunks(d).zip(bounds.chunks_mut(d)) {
        // The bound is first order: it holds while γ r²/(V + ε) ≤ 1/2.
        assert!(gamma * condition(layer.centring, z, EPS) <= 0.5, "{z:?}");
        norm_bound(layer.centring, layer.precision, z, EPS, b);
    }
    Through {
        framework: expectation_of_rows(site, &out),
        bound: expectation_of_rows(site, &bounds),
    }
}

/// The crate's exact `E[norm(y)]` for the same layer.
fn oracle(site: &Site, centring: Normalization) -> Oracle {
    let d = site.dim();
    match centring {
        Normalization::LayerNorm => {
            let ln = LayerNorm::plain(d, EPS).expect("ln");
            site_pipeline(site, Pipeline::Ln(&ln))
        }
        Normalization::RmsNorm => {
            let rms = RmsNorm::with_defaults(d, None, EPS).expect("rms");
            site_pipeline(site, Pipeline::Rms(&rms))
        }
    }
    .expect("oracle")
}

/// How far the framework's exact expectation may be from the oracle's at
/// component `k`: the expected rounding bound of the framework's layer plus
/// the rounding of both enumerations.
fn allowed(t: &Through, o: &Oracle, k: usize) -> f64 {
    t.bound.values[k] + t.bound.rounding[k] + t.framework.rounding[k] + o.rounding[k]
}

/// The framework's exact expectation equals the crate's oracle within
/// [`allowed`], component by component.
fn check_exact(site: &Site, layer: Layer) {
    let t = through(site, layer);
    let o = oracle(site, layer.centring);
    let (mut worst, mut worst_allowed) = (0.0f64, 0.0f64);
    for k in 0..site.dim() {
        let gap = (t.framework.values[k] - o.values[k]).abs();
        let allow = allowed(&t, &o, k);
        assert!(
            gap <= allow,
            "{}[{k}], d = {}: framework {} vs oracle {} (gap {gap:e} > {allow:e})",
            layer.name,
            site.dim(),
            t.framework.values[k],
            o.values[k]
        );
        worst = worst.max(gap);
        worst_allowed = worst_allowed.max(allow);
    }
    println!(
        "{}, d = {}: exact E through the framework = oracle: max gap {worst:.1e} (allowed up to {worst_allowed:.1e})",
        layer.name,
        site.dim(),
    );
}

/// The leading-order estimate of `E[norm(y)]` (corrected) and the
/// eval-mode output (uncorrected) for the site.
fn estimates(site: &Site, centring: Normalization) -> (Vec<f64>, Vec<f64>) {
    let d = site.dim();
    match centring {
        Normalization::LayerNorm => {
            let ln = LayerNorm::plain(d, EPS).expect("ln");
            let plain = site.h().iter().all(|v| *v == 0.0);
            let corrected = if plain {
                layernorm::corrected(&site.clean(), &ln, site.terms()[0].1)
            } else {
                bypass::corrected(site, &ln)
            };
            (
                corrected.expect("corrected"),
                bypass::uncorrected(site, &ln).expect("uncorrected"),
            )
        }
        Normalization::RmsNorm => {
            let rms = RmsNorm::with_defaults(d, None, EPS).expect("rms");
            let x = site.clean();
            (
                rmsnorm::corrected(&x, &rms, site.terms()[0].1).expect("corrected"),
                rmsnorm::uncorrected(&x, &rms).expect("uncorrected"),
            )
        }
    }
}

fn max_gap(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

/// The corrected estimate is closer (max over components) to the
/// framework's exact expectation than the uncorrected one, by more than
/// anything rounding could account for: the framework's own expectation is
/// known to within its enumeration rounding, and each closed form to
/// `64 ε` of its magnitude (as in `Oracle::agrees_with`); twice the largest
/// of these is the margin.
fn check_correction_applies(site: &Site, layer: Layer) {
    let t = through(site, layer);
    let (corrected, uncorrected) = estimates(site, layer.centring);
    let e = &t.framework.values;
    let margin = 2.0
        * (0..site.dim())
            .map(|k| {
                t.framework.rounding[k]
                    + 64.0 * f64::EPSILON * corrected[k].abs().max(uncorrected[k].abs())
            })
            .fold(0.0, f64::max);
    let (gc, gu) = (max_gap(&corrected, e), max_gap(&uncorrected, e));
    println!(
        "{}, d = {}: max gap to the framework's E: corrected {gc:.4}, uncorrected {gu:.4} ({:.1}x)",
        layer.name,
        site.dim(),
        gu / gc
    );
    assert!(
        gc + margin < gu,
        "{}: corrected {gc} vs uncorrected {gu}",
        layer.name
    );
}

/// One draw: `ROWS` rows `y` from seeded reference masks, normalized by the
/// framework in one batch; the statistic is their per-channel mean (an
/// unbiased estimate of `E[norm(y)]`, independent across draws).
struct FrameworkSampler {
    site: Site,
    layer: Layer,
}

/// Rows per draw and draws per layer: 65 536 rows, a standard error of
/// ≈ 0.003 per channel.
const ROWS: usize = 16;
const DRAWS: u64 = 4096;

impl Sampler for FrameworkSampler {
    type Scratch = (Vec<f64>, Vec<f64>, Vec<bool>);
    fn dim(&self) -> usize {
        self.site.dim()
    }
    fn scratch(&self) -> Self::Scratch {
        let d = self.site.dim();
        (vec![0.0; ROWS * d], vec![0.0; d], vec![false; d])
    }
    fn draw(
        &self,
        rng: &mut Stream,
        (rows, buf, mask): &mut Self::Scratch,
        out: &mut [f64],
    ) -> Result<(), Error> {
        let d = self.site.dim();
        for y in rows.chunks_mut(d) {
            self.site.draw(&InvertedDropout, rng, y, buf, mask)?;
        }
        let normalized = (self.layer.run)(rows, d)?;
        out.iter_mut().for_each(|o| *o = 0.0);
        for row in normalized.chunks(d) {
            for (o, v) in out.iter_mut().zip(row) {
                *o += v / ROWS as f64;
            }
        }
        Ok(())
    }
}

/// Per channel, the sampled mean through the framework is z-tested against
/// the exact value (the oracle's), the framework's expected rounding bound
/// and both roundings widening the target to an interval: the test's
/// statistic is the distance from the estimate to that interval, in
/// standard errors. (The bound is at most 5 % of the standard error here,
/// checked: ≤ 1.2 % for candle's f32 kernels, ≈ 10⁻⁹ for f64, so it costs
/// next to no power.) The uncorrected `LN(x)` / `RMS(x)` must be
/// rejected at its worst channel: an expected failure, with its power
/// printed.
fn check_sampled(layer: Layer) {
    let site = plain_site();
    let d = site.dim();
    let t = through(&site, layer);
    let o = oracle(&site, layer.centring);
    let sampler = FrameworkSampler {
        site: site.clone(),
        layer,
    };
    let seed = derive_seed(SEED, &format!("frameworks_norm/{}", layer.name));
    let acc = estimate(&sampler, Budget::new(DRAWS, seed).expect("budget")).expect("runs");
    let est: Vec<Estimate> = acc.estimates();
    let mut max_z = 0.0f64;
    for (k, e) in est.iter().enumerate() {
        let allow = allowed(&t, &o, k);
        let target = o.values[k] + (e.value - o.values[k]).clamp(-allow, allow);
        let test = z_test(*e, target);
        max_z = max_z.max(test.z.abs());
        assert!(
            !test.rejected,
            "{}[{k}]: sampled {} ± {} vs exact {} (z = {:.2}, critical {:.2})",
            layer.name,
            e.value,
            e.stderr,
            o.values[k],
            test.z,
            critical_z()
        );
        assert!(
            allow <= 0.05 * e.stderr,
            "rounding {allow:e} vs SE {}",
            e.stderr
        );
    }
    let (_, uncorrected) = estimates(&site, layer.centring);
    let k = (0..d)
        .max_by(|&a, &b| {
            let ga = (uncorrected[a] - o.values[a]).abs();
            let gb = (uncorrected[b] - o.values[b]).abs();
            ga.total_cmp(&gb)
        })
        .expect("d > 0");
    let lambda = (uncorrected[k] - o.values[k]).abs() / est[k].stderr;
    let wrong = z_test(est[k], uncorrected[k]);
    println!(
        "{}: sampled ({} rows) = exact on all {d} channels (max |z| {max_z:.2}); uncorrected rejected at [{k}] with z = {:.1} (power {:.6})",
        layer.name,
        DRAWS as usize * ROWS,
        wrong.z,
        rejection_probability(lambda)
    );
    assert!(
        wrong.rejected,
        "the sample cannot tell E[norm] from the eval output"
    );
}

#[cfg(feature = "candle")]
mod candle {
    use super::*;
    use dropmc::ops::adapters::candle::{Norm, normalize};

    pub const FUSED_LN: Layer = Layer {
        name: "candle LayerNorm (fused, f32)",
        centring: Normalization::LayerNorm,
        precision: Precision::F32,
        run: |x, d| normalize(Norm::LayerNorm, x, d, EPS),
    };
    pub const LN_NO_BIAS: Layer = Layer {
        name: "candle LayerNorm without bias (f64)",
        centring: Normalization::LayerNorm,
        precision: Precision::F64,
        run: |x, d| normalize(Norm::LayerNormNoBias, x, d, EPS),
    };
    pub const RMS: Layer = Layer {
        name: "candle RmsNorm (fused, f32)",
        centring: Normalization::RmsNorm,
        precision: Precision::F32,
        run: |x, d| normalize(Norm::RmsNorm, x, d, EPS),
    };

    #[test]
    fn candle_norms_match_the_crate_oracle_by_enumeration() {
        for layer in [FUSED_LN, LN_NO_BIAS, RMS] {
            check_exact(&plain_site(), layer);
        }
        for layer in [FUSED_LN, LN_NO_BIAS] {
            check_exact(&bypass_site(), layer);
        }
    }

    #[test]
    fn the_leading_order_correction_applies_to_candle_norms() {
        for layer in [FUSED_LN, LN_NO_BIAS, RMS] {
            check_correction_applies(&plain_site(), layer);
        }
        check_correction_applies(&bypass_site(), FUSED_LN);
    }

    #[test]
    fn candle_layer_norms_sampled_match_the_exact_expectation() {
        check_sampled(FUSED_LN);
        check_sampled(RMS);
    }
}

#[cfg(feature = "burn")]
mod burn {
    use super::*;
    use dropmc::claims::batchnorm::{BATCH, MOMENTUM, MU, SIGMA};
    use dropmc::engine::{keep, stream};
    use dropmc::formulas::batchnorm::{ema_expectation, train_variance};
    use dropmc::ops::Rate;
    use dropmc::ops::adapters::burn::{BurnBatchNorm, layer_norm};
    use dropmc::stats::MeanAccumulator;
    use rand_distr::{Distribution, StandardNormal};

    pub const LN: Layer = Layer {
        name: "burn LayerNorm (f64)",
        centring: Normalization::LayerNorm,
        precision: Precision::F64,
        run: |x, d| layer_norm(x, d, EPS),
    };

    #[test]
    fn burn_layer_norm_matches_the_crate_oracle_by_enumeration() {
        check_exact(&plain_site(), LN);
        check_exact(&bypass_site(), LN);
    }

    #[test]
    fn the_leading_order_correction_applies_to_burn_layer_norm() {
        check_correction_applies(&plain_site(), LN);
        check_correction_applies(&bypass_site(), LN);
    }

    #[test]
    fn burn_layer_norm_sampled_matches_the_exact_expectation() {
        check_sampled(LN);
    }

    /// Independent replicates: channel `3j + k` of one wide layer is
    /// replicate `j` of configuration `k` (`MU[k]`, `SIGMA[k]` of the
    /// BatchNorm family). BatchNorm treats channels independently and every
    /// channel gets its own data and masks, so the replicates are
    /// independent runs.
    const REPLICATES: usize = 1000;
    /// Batches before the averaging window, and the window's length.
    const BURN_IN: u32 = 60;
    const WINDOW: u32 = 40;
    /// burn's default BatchNorm ε.
    const BN_EPS: f64 = 1e-5;

    /// Mean over the window of `E[b_t]` for an EMA from `init` towards
    /// `target` (exact at every step: `formulas::batchnorm::ema_expectation`).
    fn window_mean(init: f64, target: f64) -> f64 {
        (BURN_IN + 1..=BURN_IN + WINDOW)
            .map(|t| ema_expectation(t, MOMENTUM, init, target))
            .sum::<f64>()
            / f64::from(WINDOW)
    }

    /// burn's BatchNorm in train mode on batches of `BATCH` dropped-out
    /// examples (reference masks at `P`, data `x ~ N(μ_k, σ_k²)`), its
    /// buffers read after every batch. Per replicate, the statistic is the
    /// time average of each buffer over the window; the replicates' spread
    /// gives the standard error (no model of the EMA's autocorrelation
    /// needed).
    ///
    /// Predictions. The batch mean is unbiased, so `E[running_mean_t] =
    /// (1 − m)^t · 0 + (1 − (1 − m)^t) μ`. burn feeds the buffer the biased
    /// batch variance, whose expectation is `(n − 1)/n · v` with `v = (σ² +
    /// p μ²)/q` (docs/formulas.md §5), so `E[running_var_t] = (1 − m)^t · 1 +
    /// (1 − (1 − m)^t)(n − 1)/n · v`. The claim (PyTorch's unbiased update)
    /// predicts `v` in place of `(n − 1)/n · v`. The transient is kept in
    /// the targets (0.9⁶⁰ ≈ 2·10⁻³ of the start), not assumed away.
    ///
    /// burn computes in f64: a buffer after 100 updates of a 16-example
    /// batch carries a relative rounding of order 100 · 20 ε ≈ 5·10⁻¹³,
    /// which the test neglects against a relative standard error above
    /// 10⁻⁴ (checked below).
    #[test]
    fn burn_batch_norm_buffers_match_the_biased_prediction() {
        let rate = Rate::new(P).expect("rate");
        let configs = MU.len();
        let channels = configs * REPLICATES;
        let bn = BurnBatchNorm::new(channels, MOMENTUM, BN_EPS).expect("layer");
        let seed = derive_seed(SEED, "frameworks_norm/burn-batchnorm");
        let mut batch = vec![0.0; BATCH * channels];
        let (mut rv_sum, mut rm_sum) = (vec![0.0; channels], vec![0.0; channels]);
        for t in 1..=BURN_IN + WINDOW {
            let mut rng = stream(seed, u64::from(t));
            for (i, z) in batch.iter_mut().enumerate() {
                let k = (i % channels) % configs;
                let n: f64 = StandardNormal.sample(&mut rng);
                let x = MU[k] + SIGMA[k] * n;
                *z = if keep(&mut rng, P) { x / rate.q() } else { 0.0 };
            }
            bn.train_step(&batch).expect("train step");
            if t > BURN_IN {
                let rv = bn.running_var().expect("read");
                let rm = bn.running_mean().expect("read");
                for c in 0..channels {
                    rv_sum[c] += rv[c] / f64::from(WINDOW);
                    rm_sum[c] += rm[c] / f64::from(WINDOW);
                }
            }
        }
        let mut acc = MeanAccumulator::new(2 * configs);
        for j in 0..REPLICATES {
            let c = j * configs;
            let mut row = rv_sum[c..c + configs].to_vec();
            row.extend_from_slice(&rm_sum[c..c + configs]);
            acc.push(&row);
        }
        let est = acc.estimates();
        let n = BATCH as f64;
        for k in 0..configs {
            let v = train_variance(MU[k], SIGMA[k] * SIGMA[k], rate);
            let biased = window_mean(1.0, (n - 1.0) / n * v);
            let unbiased = window_mean(1.0, v);
            let (rv, rm) = (est[k], est[configs + k]);
            // Sampled buffers spread: a zero SE would turn the test below
            // into an exact comparison.
            assert!(rv.stderr > 0.0, "SE {} of a sampled buffer", rv.stderr);
            let test = z_test(rv, biased);
            assert!(
                !test.rejected,
                "channel {k}: running_var {} ± {} vs burn's prediction {biased} (z = {:.2})",
                rv.value, rv.stderr, test.z
            );
            let mean_target = window_mean(0.0, MU[k]);
            let test_mean = z_test(rm, mean_target);
            assert!(
                !test_mean.rejected,
                "channel {k}: running_mean {} ± {} vs {mean_target} (z = {:.2})",
                rm.value, rm.stderr, test_mean.z
            );
            // The claim's (PyTorch's) unbiased buffer must be rejected.
            let alternative = z_test(rv, unbiased);
            let lambda = (unbiased - biased) / rv.stderr;
            println!(
                "channel {k} (μ = {}, σ = {}): running_var {:.5} ± {:.5}; burn's (n−1)/n·v = {biased:.5} (z = {:.2}); \
                 claim v = {unbiased:.5} (z = {:.1}, power {:.6}); running_mean {:.5} ± {:.5} vs {mean_target:.5} (z = {:.2})",
                MU[k],
                SIGMA[k],
                rv.value,
                rv.stderr,
                test.z,
                alternative.z,
                rejection_probability(lambda),
                rm.value,
                rm.stderr,
                test_mean.z
            );
            assert!(
                alternative.rejected,
                "channel {k}: cannot tell burn's buffer from the unbiased claim"
            );
        }
    }
}
