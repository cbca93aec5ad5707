//! A claim assembled from plain functions (with a fast estimator where its
//! quantity has a bit-mask form, [`FastFnClaim`]), and the samplers the
//! semantics, attention, mask-shape and ensemble families share.
//!
//! Two kinds of estimate come out of these helpers:
//!
//! * a **statistical** estimate ([`sample_means`]): the mean of a per-draw
//!   statistic with its standard error, z-tested as usual;
//! * a **deterministic** check ([`violation_counts`]): each draw counts the
//!   violations of a rule that must hold on every draw (a bit that differs,
//!   a random number drawn in evaluation). The estimate is the total count;
//!   a claim declaring [`Statistic::Violations`] compares it with the
//!   target 0 exactly: a single violation anywhere refutes the claim.

use super::{Claim, Kind, Shape};
use crate::engine::{Budget, Sampler, Stream, estimate};
use crate::error::Error;
use crate::exact::Oracle;
use crate::ops::Subject;
use crate::registry::Family;
use crate::stats::{Estimate, Statistic};

/// One draw: writes the per-draw statistics into the slice.
pub type DrawFn = fn(&Subject, &mut Stream, &mut [f64]) -> Result<(), Error>;

/// A claim whose parts are functions.
pub struct FnClaim {
    pub id: &'static str,
    pub family: &'static str,
    pub formula: &'static str,
    pub shape: Shape,
    pub samples: u64,
    /// The per-draw statistic's kind, which decides the test.
    pub statistic: Statistic,
    /// The closed form.
    pub analytic: fn() -> Result<Vec<f64>, Error>,
    /// An independent exact computation, if any.
    pub oracle: Option<fn() -> Result<Oracle, Error>>,
    /// The estimate on a subject.
    pub estimate: fn(&Subject, Budget) -> Result<Vec<Estimate>, Error>,
}

impl Claim for FnClaim {
    fn id(&self) -> &'static str {
        self.id
    }
    fn family(&self) -> &'static str {
        self.family
    }
    fn formula(&self) -> &'static str {
        self.formula
    }
    fn kind(&self) -> Kind {
        Kind::Exact
    }
    fn shape(&self) -> Shape {
        self.shape
    }
    fn default_samples(&self) -> u64 {
        self.samples
    }
    fn statistic(&self) -> Statistic {
        self.statistic
    }
    fn analytic(&self) -> Result<Vec<f64>, Error> {
        (self.analytic)()
    }
    fn oracle(&self) -> Result<Option<Oracle>, Error> {
        self.oracle.map(|o| o()).transpose()
    }
    fn estimate(&self, subject: &Subject, budget: Budget) -> Result<Vec<Estimate>, Error> {
        (self.estimate)(subject, budget)
    }
}

/// A fast estimator of a claim about the mathematics (see
/// [`Claim::fast_estimate`]).
pub type FastFn = fn(Budget) -> Result<Vec<Estimate>, Error>;

/// A [`FnClaim`] with, where its quantity has a bit-mask form, a fast
/// estimator: the generic estimate on an implementation under test, `fast`
/// on the mathematics. Every other part is the wrapped claim's.
pub struct FastFnClaim {
    pub claim: FnClaim,
    pub fast: Option<FastFn>,
}

/// Pairs each claim with the fast estimator listed under its id (none when
/// its id is not listed).
pub fn with_fast(claims: Vec<FnClaim>, fast: &[(&str, FastFn)]) -> Vec<FastFnClaim> {
    claims
        .into_iter()
        .map(|claim| {
            let fast = fast.iter().find(|(id, _)| *id == claim.id).map(|(_, f)| *f);
            FastFnClaim { claim, fast }
        })
        .collect()
}

/// A family about dropout alone (no normalization) whose claims carry
/// their fast estimators: the attention, mask-shape and ensemble families.
pub fn dropout_alone_family(
    name: &'static str,
    about: &'static str,
    claims: &'static [FastFnClaim],
) -> Family {
    Family::new(name, about)
        .with_claims(claims)
        .exercising_dropout_alone()
}

impl Claim for FastFnClaim {
    fn id(&self) -> &'static str {
        self.claim.id()
    }
    fn family(&self) -> &'static str {
        self.claim.family()
    }
    fn formula(&self) -> &'static str {
        self.claim.formula()
    }
    fn kind(&self) -> Kind {
        self.claim.kind()
    }
    fn shape(&self) -> Shape {
        self.claim.shape()
    }
    fn default_samples(&self) -> u64 {
        self.claim.default_samples()
    }
    fn analytic(&self) -> Result<Vec<f64>, Error> {
        self.claim.analytic()
    }
    fn oracle(&self) -> Result<Option<Oracle>, Error> {
        self.claim.oracle()
    }
    fn estimate(&self, subject: &Subject, budget: Budget) -> Result<Vec<Estimate>, Error> {
        self.claim.estimate(subject, budget)
    }
    fn fast_estimate(&self, budget: Budget) -> Option<Result<Vec<Estimate>, Error>> {
        self.fast.map(|f| f(budget))
    }
    fn statistic(&self) -> Statistic {
        self.claim.statistic()
    }
    fn min_samples(&self) -> u64 {
        self.claim.min_samples()
    }
    fn note_on(&self, subject: &Subject) -> Option<String> {
        self.claim.note_on(subject)
    }
    fn note(&self) -> Option<String> {
        self.claim.note()
    }
}

struct FnSampler<'a> {
    subject: &'a Subject<'a>,
    dim: usize,
    draw: DrawFn,
}

impl Sampler for FnSampler<'_> {
    type Scratch = ();
    fn dim(&self) -> usize {
        self.dim
    }
    fn scratch(&self) {}
    fn draw(&self, rng: &mut Stream, _: &mut (), out: &mut [f64]) -> Result<(), Error> {
        (self.draw)(self.subject, rng, out)
    }
}

/// Means (with standard errors) of `dim` per-draw statistics.
pub fn sample_means(
    subject: &Subject,
    budget: Budget,
    dim: usize,
    draw: DrawFn,
) -> Result<Vec<Estimate>, Error> {
    let sampler = FnSampler { subject, dim, draw };
    Ok(estimate(&sampler, budget)?.estimates())
}

/// Total violations of `dim` rules over all draws, each as an estimate with
/// standard error 0 (see the module doc).
pub fn violation_counts(
    subject: &Subject,
    budget: Budget,
    dim: usize,
    draw: DrawFn,
) -> Result<Vec<Estimate>, Error> {
    Ok(sample_means(subject, budget, dim, draw)?
        .into_iter()
        .map(|e| Estimate {
            value: (e.value * e.n as f64).round(),
            stderr: 0.0,
            n: e.n,
            dof: e.dof,
        })
        .collect())
}

/// Half the squared difference of two independent copies: its mean is the
/// variance of either (see [`crate::engine::Sampler`]).
pub fn half_squared_difference(a: f64, b: f64) -> f64 {
    0.5 * (a - b) * (a - b)
}

/// `1.0` when `cond`, else `0.0`.
pub fn indicator(cond: bool) -> f64 {
    if cond { 1.0 } else { 0.0 }
}
