//! A claim assembled from plain functions ([`FnClaim`], with a fast
//! estimator where its quantity has a bit-mask form), a claim that rules
//! hold on every draw ([`RuleClaim`]), and the samplers the semantics,
//! attention, mask-shape and ensemble families share.
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

use super::{Card, Claim, FastPath, Law, Shape};
use crate::engine::{Budget, Sampler, Stream, estimate};
use crate::error::Error;
use crate::exact::Oracle;
use crate::ops::Subject;
use crate::stats::{Estimate, Statistic};

/// One draw: writes the per-draw statistics into the slice.
pub type DrawFn = fn(&Subject, &mut Stream, &mut [f64]) -> Result<(), Error>;

/// A claim whose parts are functions.
pub struct FnClaim {
    /// What it states.
    pub card: Card,
    /// The closed form.
    pub analytic: fn() -> Result<Vec<f64>, Error>,
    /// An independent exact computation, if any.
    pub oracle: Option<fn() -> Result<Oracle, Error>>,
    /// The estimate on a subject.
    pub estimate: fn(&Subject, Budget) -> Result<Vec<Estimate>, Error>,
    /// The fast estimate on the mathematics, where the claim's quantity has
    /// a bit-mask form (see [`Claim::fast_estimate`]).
    pub fast: Option<FastFn>,
    /// The law of the per-draw statistic ([`Claim::law`]); `None`: the one
    /// the statistic fixes ([`Law::implied_by`]), which for a mean is
    /// [`Law::Undeclared`].
    pub law: Option<fn() -> Law>,
}

impl Claim for FnClaim {
    fn card(&self) -> Card {
        self.card
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
    fn fast_estimate(&self, budget: Budget) -> Option<Result<Vec<Estimate>, Error>> {
        self.fast.map(|f| f(budget))
    }
    fn fast_path(&self) -> Option<FastPath> {
        self.fast.map(|_| FastPath::Masks)
    }
    fn law(&self) -> Law {
        self.law
            .map_or_else(|| Law::implied_by(self.statistic()), |law| law())
    }
}

/// What a claim can say about a subject (see [`Claim::note_on`]).
pub type DescribeFn = fn(&Subject) -> Result<String, Error>;

/// A claim that `rules` rules hold on every draw (a deterministic check,
/// see the module doc): its closed form is 0 violations of each rule, its
/// estimate the counts of [`violation_counts`] over `draw`, its test exact
/// ([`Statistic::Violations`]).
pub struct RuleClaim {
    /// What it states.
    pub card: Card,
    /// Rules checked per draw (one count each).
    pub rules: usize,
    /// One draw: writes each rule's violations on it.
    pub draw: DrawFn,
    /// What a run can say about the subject itself (which rounding its
    /// layer uses, say), as the claim's note.
    pub describe: Option<DescribeFn>,
}

impl RuleClaim {
    /// The claim that the `rules` rules `draw` checks hold on every one of
    /// `samples` draws: one count is a scalar, several a vector.
    pub const fn new(
        id: &'static str,
        family: &'static str,
        formula: &'static str,
        samples: u64,
        rules: usize,
        draw: DrawFn,
    ) -> Self {
        let shape = if rules == 1 {
            Shape::Scalar
        } else {
            Shape::Vector
        };
        RuleClaim {
            card: Card::new(id, family, formula, shape, samples)
                .with_statistic(Statistic::Violations),
            rules,
            draw,
            describe: None,
        }
    }

    /// The same claim, noting `describe(subject)` on each run.
    pub const fn describing(self, describe: DescribeFn) -> Self {
        RuleClaim {
            describe: Some(describe),
            ..self
        }
    }
}

impl Claim for RuleClaim {
    fn card(&self) -> Card {
        self.card
    }
    fn analytic(&self) -> Result<Vec<f64>, Error> {
        Ok(vec![0.0; self.rules])
    }
    fn estimate(&self, subject: &Subject, budget: Budget) -> Result<Vec<Estimate>, Error> {
        violation_counts(subject, budget, self.rules, self.draw)
    }
    fn note_on(&self, subject: &Subject) -> Option<String> {
        self.describe.and_then(|describe| describe(subject).ok())
    }
}

/// A fast estimator of a claim about the mathematics (see
/// [`Claim::fast_estimate`]).
pub type FastFn = fn(Budget) -> Result<Vec<Estimate>, Error>;

struct FnSampler<'a, F> {
    subject: &'a Subject<'a>,
    dim: usize,
    draw: F,
}

impl<F> Sampler for FnSampler<'_, F>
where
    F: Fn(&Subject, &mut Stream, &mut [f64]) -> Result<(), Error> + Sync,
{
    type Scratch = ();
    fn dim(&self) -> usize {
        self.dim
    }
    fn scratch(&self) {}
    fn draw(&self, rng: &mut Stream, _: &mut (), out: &mut [f64]) -> Result<(), Error> {
        (self.draw)(self.subject, rng, out)
    }
}

/// Means (with standard errors) of `dim` per-draw statistics, which `draw`
/// writes (a [`DrawFn`], or a closure over the claim's parameters).
pub fn sample_means(
    subject: &Subject,
    budget: Budget,
    dim: usize,
    draw: impl Fn(&Subject, &mut Stream, &mut [f64]) -> Result<(), Error> + Sync,
) -> Result<Vec<Estimate>, Error> {
    let sampler = FnSampler { subject, dim, draw };
    Ok(estimate(&sampler, budget)?.estimates())
}

/// A claim whose per-draw statistic is a function of the dropped rows of
/// one pass, or of two independent passes (a pair form): the attention and
/// mask-shape families. [`PassClaim::pass_means`] is their sampler.
pub trait PassClaim: Sync {
    /// Components of the per-draw statistic.
    fn statistic_dim(&self) -> usize;
    /// Whether the per-draw statistic reads a second, independent pass
    /// (the variances' pair form).
    fn reads_pair(&self) -> bool;
    /// One pass of the subject's dropout on the claim's input.
    fn pass(&self, s: &Subject, rng: &mut Stream) -> Result<Vec<f64>, Error>;
    /// The per-draw statistic of the pass `z` (and `z_alt`, the second
    /// pass, empty unless [`Self::reads_pair`]) into `out`.
    fn draw_statistic(&self, z: &[f64], z_alt: &[f64], out: &mut [f64]);

    /// Means of the per-draw statistic on `subject`: one pass per draw, or
    /// two independent passes when [`Self::reads_pair`].
    fn pass_means(&self, subject: &Subject, budget: Budget) -> Result<Vec<Estimate>, Error> {
        let pairs = self.reads_pair();
        sample_means(subject, budget, self.statistic_dim(), |s, rng, out| {
            let z = self.pass(s, rng)?;
            let z_alt = if pairs {
                self.pass(s, rng)?
            } else {
                Vec::new()
            };
            self.draw_statistic(&z, &z_alt, out);
            Ok(())
        })
    }
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
