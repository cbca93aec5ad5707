//! What a claim declares about the law of its per-draw statistic: as much
//! as the size of its test needs ([`Claim::law`](super::Claim::law)).
//!
//! A claim's [`Statistic`] decides its test; for a count it also fixes the
//! law under the null: a rule count is 0 on every draw, an indicator's
//! count is `Binomial(n·trials, p₀)` with `p₀` the claimed value, a scaled
//! count is `c K / n` with `K ~ Binomial(n, keep)`. Those laws are
//! [`Law::OfStatistic`] and need no declaration. A **mean** is tested by
//! Student-t, whose size at the claim's minimum budget depends on the
//! skewness of each component's draws (the Cramér-type rule of
//! [`Statistic`]); the statistic carries only the bound the claim declares,
//! not the law it comes from. So a claim testing a mean declares its law,
//! component by component ([`Law::Draws`]: what each draw is, as a function
//! of the masks and the data, and how the draws are reduced), and
//! `tests/test_sizes.rs` computes the exact size (or its Cramér bound) from
//! that description by its own enumeration, and checks the declared
//! skewness against it. A claim whose statistic has no law the suite can
//! write down says why ([`Law::NoLaw`]); a claim that says nothing
//! ([`Law::Undeclared`], the default for a mean) fails that test.

use std::sync::OnceLock;

use crate::error::Error;
use crate::stats::{DEFAULT_SKEWNESS, Statistic};

/// The law of a claim's per-draw statistic, per component.
#[derive(Debug, Clone)]
pub enum Law {
    /// Not declared: a claim testing a mean must override
    /// [`Claim::law`](super::Claim::law) (or, for an
    /// [`FnClaim`](super::fn_claim::FnClaim), set its `law` field).
    Undeclared,
    /// The claim states why its statistic has no law the size computation
    /// could use.
    NoLaw { why: &'static str },
    /// Fixed by the statistic itself: a rule count, an indicator's
    /// binomial count or a scaled count (module docs).
    OfStatistic,
    /// Each component's draw, and how the test reduces the draws.
    Draws {
        components: Vec<Draw>,
        estimator: Estimator,
    },
}

impl Law {
    /// The law a statistic implies by itself: [`Law::OfStatistic`] for a
    /// count, [`Law::Undeclared`] for a mean (the default of
    /// [`Claim::law`](super::Claim::law)).
    pub fn implied_by(statistic: Statistic) -> Law {
        match statistic {
            Statistic::Mean { .. } => Law::Undeclared,
            Statistic::Violations | Statistic::Indicator { .. } | Statistic::ScaledCount { .. } => {
                Law::OfStatistic
            }
        }
    }

    /// Every component's draw is `draw`, reduced by `estimator`.
    pub fn repeated(draw: Draw, components: usize, estimator: Estimator) -> Law {
        Law::Draws {
            components: vec![draw; components],
            estimator,
        }
    }
}

/// A mean claim's law found by enumeration, once per process: the absolute
/// skewness of each component's draw over every mask of its configuration
/// (`exact::central_moments_by` gives the moments). Both what the claim's
/// test is sized by ([`Statistic::Mean`]'s bound) and what it declares
/// ([`Law::Draws`]) are read from this one enumeration, so they cannot
/// disagree.
#[derive(Debug, Default)]
pub struct EnumeratedSkewness(OnceLock<Option<Vec<f64>>>);

impl EnumeratedSkewness {
    /// Not yet enumerated.
    pub const fn new() -> Self {
        EnumeratedSkewness(OnceLock::new())
    }

    /// Each component's `|skewness|`, from `enumerate` on first use (`None`
    /// if it failed).
    fn per_component(&self, enumerate: impl FnOnce() -> Result<Vec<f64>, Error>) -> Option<&[f64]> {
        self.0
            .get_or_init(|| {
                enumerate()
                    .ok()
                    .map(|s| s.into_iter().map(f64::abs).collect())
            })
            .as_deref()
    }

    /// A mean bounded by the largest component's skewness; the default
    /// [`DEFAULT_SKEWNESS`] only if the enumeration failed (then the
    /// claim's oracle, the same enumeration, fails too, and the claim with
    /// it).
    pub fn statistic(&self, enumerate: impl FnOnce() -> Result<Vec<f64>, Error>) -> Statistic {
        Statistic::Mean {
            skewness: self
                .per_component(enumerate)
                .map_or(DEFAULT_SKEWNESS, |s| s.iter().copied().fold(0.0, f64::max)),
        }
    }

    /// One [`Draw::Skewness`] per component, reduced by `estimator`;
    /// [`Law::NoLaw`] saying `why` if the enumeration failed.
    pub fn law(
        &self,
        enumerate: impl FnOnce() -> Result<Vec<f64>, Error>,
        estimator: Estimator,
        why: &'static str,
    ) -> Law {
        match self.per_component(enumerate) {
            Some(per) => Law::Draws {
                components: per.iter().copied().map(Draw::Skewness).collect(),
                estimator,
            },
            None => Law::NoLaw { why },
        }
    }
}

/// How a mean claim reduces its draws to the tested estimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Estimator {
    /// The mean of the draws.
    Mean,
    /// A variance of the draw: the single-draw sample variance with its
    /// fourth-moment standard error on the fast path, the pair form
    /// `(S − S′)²/2` of two passes on the generic path; the claim declares
    /// the larger effective skewness of the two
    /// ([`CentralMoments::variance_skewness_on_either_path`](crate::stats::CentralMoments::variance_skewness_on_either_path)).
    Variance,
    /// The mean of `⌊n/2⌋` pair statistics formed from the fast path's `n`
    /// masks (the normalization claims' `Var M`): the draw is the pair
    /// statistic, tested at half the budget.
    MeanOverPairs,
}

/// One component's per-draw statistic under the null, as a function of
/// independent keep bits `m_i ~ Bernoulli(q)`, `q = 1 − p`, and (for the
/// BatchNorm claims) Gaussian data.
#[derive(Debug, Clone)]
pub enum Draw {
    /// `c` with probability `keep`, else 0 (a dropped-out unit's power or
    /// the product of kept units); 0 on every draw when the target is 0.
    TwoPoint { keep: f64 },
    /// `S = Σ_i m_i w_i / q`: a sum of dropped-out units or of attention
    /// weights.
    MaskedSum { weights: Vec<f64>, p: f64 },
    /// `g(m ⊙ x / q) − g(x)`: a function of the dropout output minus its
    /// value at the input (the ensemble gaps).
    MaskedFunction {
        x: Vec<f64>,
        p: f64,
        g: fn(&[f64]) -> f64,
    },
    /// A law the claim enumerated itself over every mask of its site,
    /// summarized by the skewness of the draw (the normalization claims:
    /// [`crate::claims::norm_moments::statistic_skewness`]).
    Skewness(f64),
    /// `z = m x / q`, `x ~ N(μ, σ²)`: one dropped-out Gaussian channel.
    DroppedNormal { mu: f64, sigma: f64, p: f64 },
    /// `(z − z′)²/2` of two independent [`Draw::DroppedNormal`] draws.
    DroppedNormalPair { mu: f64, sigma: f64, p: f64 },
    /// `(x − x′)²/2` of two independent normal draws without dropout
    /// (`σ²` times a `χ²₁`).
    NormalPair,
    /// The ratio of two independent means, linearized at their
    /// expectations (leading order, as the claim declares).
    LinearizedRatio {
        numerator: Box<Draw>,
        denominator: Box<Draw>,
    },
    /// `Σ_s w_s (α k₁ + β k₂)_s`, `w_s = m (1 − m)^{t−s}`: a running buffer
    /// after `steps` batches of `batch` dropped-out examples of channel
    /// `N(μ, σ²)`, `k₁`, `k₂` each batch's mean and unbiased variance
    /// (the moving averages of BatchNorm and their fold).
    BatchAverage {
        mu: f64,
        sigma: f64,
        p: f64,
        batch: usize,
        momentum: f64,
        steps: u32,
        mean_weight: f64,
        variance_weight: f64,
    },
}
