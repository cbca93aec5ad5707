//! The BatchNorm family on a Python BatchNorm, trained on dropped-out
//! batches: the running buffers with the EMA transient and the layer's
//! variance convention, the fold, and the eval output given the buffers.
//!
//! # Setting
//!
//! `K` channels with clean inputs `x_k ~ N(μ_k, σ_k²)`; dropmc's reference
//! dropout at the user's `p` gives the training input `z = m x / q`
//! (`m ~ Bernoulli(q)` per example and channel). One *replicate* is a fresh
//! BatchNorm (buffers `(0, 1)`, `γ = 1`, `β = 0`) run in train mode on
//! `steps` batches of `B` dropped-out examples, then in eval mode on two
//! clean examples `x, x'`. BatchNorm treats channels independently, so one
//! Python call runs `R` replicates side by side as `C = R K` channels
//! (channel `r K + k` is channel `k` of replicate `r`): the user's
//! `batchnorm(batches, x)` gets `batches` of shape `(steps, B, C)` and `x`
//! of shape `(2, C)` and returns `(running_mean, running_var, y)`.
//!
//! # The claims (derivations in [`dropmc::formulas::batchnorm`])
//!
//! The buffer and eval claims are the Rust family's own, built at the
//! user's configuration by [`dropmc::claims::batchnorm::at`] (ids, formula
//! texts, closed forms, declared statistics and each replicate's
//! statistic, [`BnClaim::replicate_statistic`]); this file drives the
//! user's BatchNorm for them. With `v_k = (σ_k² + p μ_k²)/q` and the
//! batch-variance convention `u_t`: unbiased (`E[u_t] = v_k`, PyTorch) or
//! biased (`E[u_t] = (B − 1)/B · v_k`, burn, Flax's
//! `use_fast_variance=False` is still biased) — call `E[u_t] = κ v_k`:
//!
//! ```text
//! batchnorm.running_stats  E[rm_t] = (1−m)^t·0 + (1−(1−m)^t) μ_k
//!                          E[rv_t] = (1−m)^t·1 + (1−(1−m)^t) κ v_k
//! batchnorm.fold_buffers   E[q rv_t − p rm_t²] = q E[rv_t] − p (E[rm_t]² + Var rm_t)
//! batchnorm.variance_shift ½ (y_k − y'_k)² (rv_k + ε)/σ_k² has mean 1         (Δ = c² at E[rv])
//! ```
//!
//! One claim exists here alone (the crate's eval op is not under test):
//!
//! ```text
//! batchnorm.eval_mean      E[y_k | buffers] = (μ_k − rm_k)/√(rv_k + ε)       (target 0 for the residual)
//! ```
//!
//! Given the buffers, eval BatchNorm is affine in `x`, so the eval claims
//! are exact whatever the buffers are. The claims share one simulation of
//! the replicates (see [`PyBatchNorm::simulated`]). Each claim's statistic
//! is a mean over replicates, tested by [`dropmc::claims::check`]
//! (Student-t) at the suite's level and minimum budgets.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use dropmc::Error;
use dropmc::claims::batchnorm::{self as family, BnClaim, Config, Quantity, Replicate};
use dropmc::claims::{Card, Claim, Shape};
use dropmc::conformance::Options;
use dropmc::engine::{Budget, MeanAccumulator, Stream, derive_seed, stream};
use dropmc::ops::{InvertedDropout, Rate, Subject, TrainPass};
use dropmc::stats::Statistic;
use numpy::ndarray::{Array2, Array3};
use numpy::{IntoPyArray, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rand_distr::{Distribution, StandardNormal};
use serde_json::json;

use crate::claims::PyClaim;
use crate::forward::lock;
use crate::to_py;

/// The id of the claim only the binding states (the eval output's mean
/// given the buffers): no Rust claim has it.
const EVAL_MEAN: &str = "batchnorm.eval_mean";

/// Elements of the `batches` array per Python call at most (8 MiB in
/// float64): bounds a call's memory whatever `K`, `B` and `steps` are.
const ELEMENTS_PER_CALL: usize = 1 << 20;

/// A replicate's statistic (a claim's components).
type ReplicateStatistic<'s> = &'s (dyn Fn(&Replicate, &mut [f64]) -> Result<(), Error> + Sync);

/// The user's `batchnorm(batches, x)`, as the Python side wrapped it
/// (output checked, float64).
pub struct PyBatchNorm {
    callable: Py<PyAny>,
    /// The layer's `ε`.
    eps: f64,
    /// The stream of the run's replicates.
    seed: u64,
    cache: Mutex<Option<(u64, Arc<Vec<f64>>)>>,
    failure: Mutex<Option<PyErr>>,
    calls: AtomicU64,
}

/// What one call returned, row-major.
struct CallOutput {
    running_mean: Vec<f64>,
    running_var: Vec<f64>,
    y: Vec<f64>,
}

impl PyBatchNorm {
    fn call(
        &self,
        batches: Vec<f64>,
        x: Vec<f64>,
        shape: (usize, usize, usize),
    ) -> Result<CallOutput, Error> {
        if lock(&self.failure).is_some() {
            return Err(stopped());
        }
        self.calls.fetch_add(1, Ordering::Relaxed);
        let (steps, batch, c) = shape;
        let result = Python::attach(|py| -> PyResult<CallOutput> {
            let shaped =
                |e: numpy::ndarray::ShapeError| PyRuntimeError::new_err(format!("batches: {e}"));
            let b = Array3::from_shape_vec((steps, batch, c), batches).map_err(shaped)?;
            let xs = Array2::from_shape_vec((2, c), x).map_err(shaped)?;
            let out = self
                .callable
                .bind(py)
                .call1((b.into_pyarray(py), xs.into_pyarray(py)))?;
            let (rm, rv, y): (
                PyReadonlyArray1<f64>,
                PyReadonlyArray1<f64>,
                PyReadonlyArray2<f64>,
            ) = out.extract()?;
            if rm.len() != c || rv.len() != c || y.shape() != [2, c] {
                return Err(PyValueError::new_err(format!(
                    "batchnorm returned buffers of {} and {} entries and y of shape {:?}, expected {c}, {c} and (2, {c})",
                    rm.len(),
                    rv.len(),
                    y.shape()
                )));
            }
            Ok(CallOutput {
                running_mean: rm.as_array().to_vec(),
                running_var: rv.as_array().to_vec(),
                y: y.as_array().iter().copied().collect(),
            })
        });
        result.map_err(|e| {
            let message = Python::attach(|py| e.value(py).to_string());
            *lock(&self.failure) = Some(e);
            Error::Framework {
                framework: "python",
                message,
            }
        })
    }

    /// The raw output of `samples` replicates, `[rm (K) | rv (K) | y (K) |
    /// y' (K)]` per replicate, simulated once per run and shared by every
    /// claim (four claims on one simulation cost a quarter of four: each
    /// verdict is valid on its own, the four are not independent).
    fn simulated(
        &self,
        subject: &Subject,
        config: &Config,
        samples: u64,
    ) -> Result<Arc<Vec<f64>>, Error> {
        let mut cache = lock(&self.cache);
        if let Some((n, rows)) = cache.as_ref()
            && *n == samples
        {
            return Ok(Arc::clone(rows));
        }
        let k = config.channels();
        let per_replicate = config.steps as usize * config.batch * k;
        let per_call = (ELEMENTS_PER_CALL / per_replicate.max(1)).max(1) as u64;
        let mut rows = Vec::new();
        let (mut done, mut call) = (0u64, 0u64);
        while done < samples {
            let r = per_call.min(samples - done) as usize;
            let mut rng = stream(self.seed, call);
            let (batches, x) = draw_inputs(subject, config, r, &mut rng)?;
            let c = r * k;
            let got = self.call(batches, x, (config.steps as usize, config.batch, c))?;
            for ch in (0..r).map(|j| j * k..(j + 1) * k) {
                rows.extend_from_slice(&got.running_mean[ch.clone()]);
                rows.extend_from_slice(&got.running_var[ch.clone()]);
                rows.extend_from_slice(&got.y[ch.clone()]);
                rows.extend_from_slice(&got.y[c + ch.start..c + ch.end]);
            }
            done += r as u64;
            call += 1;
        }
        let rows = Arc::new(rows);
        *cache = Some((samples, Arc::clone(&rows)));
        Ok(rows)
    }

    /// `statistic` of each of `budget.samples` replicates, accumulated.
    fn replicates(
        &self,
        subject: &Subject,
        config: &Config,
        budget: Budget,
        dim: usize,
        statistic: ReplicateStatistic,
    ) -> Result<MeanAccumulator, Error> {
        let k = config.channels();
        let rows = self.simulated(subject, config, budget.samples)?;
        let mut acc = MeanAccumulator::new(dim);
        let mut out = vec![0.0; dim];
        for row in rows.chunks_exact(4 * k) {
            let rep = Replicate {
                running_mean: &row[..k],
                running_var: &row[k..2 * k],
                y: [&row[2 * k..3 * k], &row[3 * k..]],
                eps: self.eps,
            };
            statistic(&rep, &mut out)?;
            acc.push(&out);
        }
        Ok(acc)
    }
}

fn stopped() -> Error {
    Error::Framework {
        framework: "python",
        message: "stopped after an exception in a Python callable".into(),
    }
}

/// Clean examples of `r` replicates side by side: `x[r K + k] ~ N(μ_k, σ_k²)`.
fn draw_clean(config: &Config, r: usize, rng: &mut Stream, x: &mut [f64]) {
    let k = config.channels();
    for (i, v) in x.iter_mut().enumerate().take(r * k) {
        let n: f64 = StandardNormal.sample(rng);
        *v = config.mu[i % k] + config.sigma[i % k] * n;
    }
}

/// The `(steps, B, r K)` training batches, dropped out by the subject's
/// dropout (dropmc's reference layer), and the `(2, r K)` clean eval
/// examples.
fn draw_inputs(
    subject: &Subject,
    config: &Config,
    r: usize,
    rng: &mut Stream,
) -> Result<(Vec<f64>, Vec<f64>), Error> {
    let c = r * config.channels();
    let examples = config.steps as usize * config.batch;
    let mut batches = vec![0.0; examples * c];
    let (mut clean, mut mask) = (vec![0.0; c], vec![false; c]);
    for row in batches.chunks_exact_mut(c) {
        draw_clean(config, r, rng, &mut clean);
        subject
            .dropout
            .forward_train(TrainPass::new(&clean, row, &mut mask), config.p, rng)?;
    }
    let mut x = vec![0.0; 2 * c];
    for row in x.chunks_exact_mut(c) {
        draw_clean(config, r, rng, row);
    }
    Ok((batches, x))
}

/// A claim on the replicates of `layer`: `statistic` of each, averaged.
fn replicate_claim<'a>(
    card: Card,
    analytic: Vec<f64>,
    setup: (&'a PyBatchNorm, Config),
    statistic: impl Fn(&Replicate, &mut [f64]) -> Result<(), Error> + Sync + 'a,
) -> PyClaim<'a> {
    let (layer, config) = setup;
    let dim = analytic.len();
    PyClaim {
        null_range: None,
        card,
        analytic,
        note: None,
        estimate: Box::new(move |subject, budget| {
            Ok(layer
                .replicates(subject, &config, budget, dim, &statistic)?
                .estimates())
        }),
    }
}

/// The Rust `claim` on the user's replicates.
fn rust_claim(claim: BnClaim, layer: &PyBatchNorm) -> Result<PyClaim<'_>, Error> {
    let (card, analytic) = (claim.card(), claim.closed_form()?);
    let config = claim.config.clone();
    Ok(replicate_claim(
        card,
        analytic,
        (layer, config),
        move |rep, out| claim.replicate_statistic(&[*rep], out),
    ))
}

/// `batchnorm.eval_mean`: given the buffers, the mean of two eval outputs
/// of clean normal inputs, centred, is 0; it is symmetric, skewness 0.
fn eval_mean_claim<'a>(layer: &'a PyBatchNorm, config: &Config) -> PyClaim<'a> {
    let statistic = Statistic::Mean { skewness: 0.0 };
    let card = Card::new(
        EVAL_MEAN,
        "batchnorm",
        "eval, given the buffers: E[y_k - (mu_k - rm_k)/sqrt(rv_k + eps)] = 0",
        Shape::Vector,
        family::replicate_budget(statistic),
    )
    .with_statistic(statistic);
    let mu = config.mu.clone();
    replicate_claim(
        card,
        vec![0.0; config.channels()],
        (layer, config.clone()),
        move |r, out| {
            for (j, o) in out.iter_mut().enumerate() {
                let scale = (r.running_var[j] + r.eps).sqrt();
                let expected = (mu[j] - r.running_mean[j]) / scale;
                *o = 0.5 * (r.y[0][j] + r.y[1][j]) - expected;
            }
            Ok(())
        },
    )
}

/// The claims at `config` on `layer`: the Rust family's claims on
/// replicates, with the eval mean before the variance shift.
fn claims<'a>(layer: &'a PyBatchNorm, config: &Config) -> Result<Vec<PyClaim<'a>>, Error> {
    let mut claims = family::at(config)
        .into_iter()
        .filter(|c| c.quantity.reads_replicates())
        .map(|c| rust_claim(c, layer))
        .collect::<Result<Vec<_>, Error>>()?;
    let before_variance_shift = claims
        .iter()
        .position(|c| c.card.id == Quantity::VarianceShift.id())
        .unwrap_or(claims.len());
    claims.insert(before_variance_shift, eval_mean_claim(layer, config));
    Ok(claims)
}

/// The likely causes of the BatchNorm claims' failures, in words. The
/// components of `batchnorm.running_stats` are the `K` running means then
/// the `K` running variances, so its worst component says which buffer is
/// off; the eval claims hold given whatever buffers the layer kept, so
/// their failures point to the eval path itself.
pub fn batchnorm_causes(results: &[dropmc::claims::ClaimResult], channels: usize) -> Vec<String> {
    let failed = |id: &str| crate::claims::failed_in(results, id);
    let mut causes = Vec::new();
    if failed(Quantity::RunningStats.id()) {
        let worst = results
            .iter()
            .find(|r| r.id == Quantity::RunningStats.id())
            .and_then(|r| r.worst());
        let buffer = match worst {
            Some(k) if k >= channels => "running variance",
            _ => "running mean",
        };
        causes.push(format!(
            "the {buffer} does not follow the declared update (momentum in PyTorch's \
             convention, rm <- (1 - m) rm + m mean; the unbiased or biased batch variance; from \
             the start (0, 1)): a wrong momentum or variance convention, or buffers changed \
             otherwise (a drift, a missing update)"
        ));
    } else if failed(Quantity::FoldBuffers.id()) {
        causes.push(
            "the buffers' means hold but q rv - p rm^2 does not: the running mean's spread is \
             not the EMA's (the buffers are not updated from each batch's statistics)"
                .into(),
        );
    }
    if failed(EVAL_MEAN) {
        causes.push(
            "eval mode does not subtract the running mean (it uses the batch's mean, no mean, or \
             applies another shift than beta)"
                .into(),
        );
    }
    if failed(Quantity::VarianceShift.id()) {
        causes.push(
            "eval mode does not divide by sqrt(running_var + eps) (it uses the batch's variance, \
             another eps, or another gain than gamma)"
                .into(),
        );
    }
    causes
}

/// Why the family's other claims are skipped here.
fn skipped() -> Vec<(&'static str, String)> {
    vec![
        (
            Quantity::TrainInput.id(),
            "the moments of the dropout's output: dropmc's own dropout feeds your BatchNorm here; check_dropout judges a dropout".into(),
        ),
        (
            Quantity::Li2018.id(),
            "a statement about the mathematics (dropmc report checks it)".into(),
        ),
    ]
}

fn run(layer: &PyBatchNorm, config: &Config, options: &Options) -> Result<crate::Outcome, Error> {
    let subject = Subject::with_dropout(&InvertedDropout);
    let run = claims(layer, config)?;
    let results = crate::check_claims(&run, &subject, options)?;
    Ok((results, skipped()))
}

/// `check_batchnorm`: the BatchNorm claims on the wrapped
/// `batchnorm(batches, x)`. Returns the run's JSON and one summary dict
/// per claim.
#[pyfunction]
#[pyo3(signature = (batchnorm, p, mu, sigma, batch, steps, momentum, unbiased, eps, samples, seed))]
#[allow(clippy::too_many_arguments)]
pub fn check_batchnorm(
    py: Python<'_>,
    batchnorm: Py<PyAny>,
    p: f64,
    mu: Vec<f64>,
    sigma: Vec<f64>,
    batch: usize,
    steps: u32,
    momentum: f64,
    unbiased: bool,
    eps: f64,
    samples: Option<u64>,
    seed: u64,
) -> PyResult<(String, Vec<Py<PyDict>>)> {
    let rate = Rate::new(p).map_err(to_py)?;
    dropmc::check_finite_vec("mu", &mu).map_err(to_py)?;
    dropmc::check_len("sigma", &sigma, mu.len()).map_err(to_py)?;
    if mu.is_empty() || sigma.iter().any(|&s| !(s > 0.0 && s.is_finite())) {
        return Err(PyValueError::new_err(
            "mu must be non-empty and every sigma finite and > 0",
        ));
    }
    if batch < 2
        || steps == 0
        || !(momentum > 0.0 && momentum <= 1.0)
        || !(eps >= 0.0 && eps.is_finite())
    {
        return Err(PyValueError::new_err(
            "batch must be >= 2, steps >= 1, 0 < momentum <= 1 and eps finite and >= 0",
        ));
    }
    let config = Config {
        mu,
        sigma,
        p: rate.p(),
        batch,
        steps,
        momentum,
        unbiased,
        folded_eval: false,
    };
    let layer = PyBatchNorm {
        callable: batchnorm,
        eps,
        seed: derive_seed(seed, "python/batchnorm replicates"),
        cache: Mutex::new(None),
        failure: Mutex::new(None),
        calls: AtomicU64::new(0),
    };
    let options = crate::run_options(seed, samples);
    let outcome = py.detach(|| crate::run_on_one_thread(|| run(&layer, &config, &options)));
    if let Some(e) = lock(&layer.failure).take() {
        return Err(e);
    }
    let (results, skipped) = outcome.map_err(PyRuntimeError::new_err)?.map_err(to_py)?;
    let causes = batchnorm_causes(&results, config.channels());
    let fields = [
        ("likely_causes", json!(causes)),
        ("p", json!(p)),
        ("mu", json!(config.mu)),
        ("sigma", json!(config.sigma)),
        ("batch", json!(batch)),
        ("steps", json!(steps)),
        ("momentum", json!(momentum)),
        (
            "variance",
            json!(if unbiased { "unbiased" } else { "biased" }),
        ),
        ("eps", json!(eps)),
        ("calls", json!(layer.calls.load(Ordering::Relaxed))),
    ];
    crate::outcome_json(py, seed, results, &skipped, fields)
}

/// The family's default configuration: (mu, sigma, batch, steps, momentum).
#[pyfunction]
pub fn batchnorm_defaults() -> (Vec<f64>, Vec<f64>, usize, u32, f64) {
    (
        family::MU.to_vec(),
        family::SIGMA.to_vec(),
        family::BATCH,
        family::STEPS,
        family::MOMENTUM,
    )
}
