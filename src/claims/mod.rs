//! Claims: one analytic statement each, its closed form, its exact oracle and
//! its Monte Carlo estimator, and the verdict that compares them.
//!
//! # How a claim is judged
//!
//! * [`Kind::Exact`]: the statement holds for every finite `d`. Each component
//!   of the Monte Carlo estimate is z-tested against the closed form at the
//!   suite's per-assertion level ([`crate::stats::critical_z`]), and where an
//!   exact oracle exists it must agree with the closed form up to the
//!   rounding of both computations.
//! * [`Kind::LeadingOrder`]: the statement is an approximation with an error
//!   of order `1/d^order`. It is never z-tested as if exact: the estimator is
//!   z-tested against the exact oracle (which is exact), and the gap between
//!   the approximation and the oracle is measured and reported.
//!
//! # Adding a claim
//!
//! Write it as one entry of its family's list (see [`dropout`]); the
//! [`registry`] collects the families, and the tests, the report and the CLI
//! all read the registry.

pub mod attention;
pub mod batchnorm;
pub mod bypass;
pub mod compound;
pub mod dropout;
pub mod ensemble;
pub mod enumerated;
#[cfg(feature = "example-family")]
pub mod example;
pub mod fn_claim;
pub mod law;
pub mod layernorm;
pub mod linear_path;
pub mod mask_shape;
pub mod network;
pub mod norm;
mod norm_config;
pub mod norm_fast;
pub mod norm_moments;
pub mod order;
mod registry;
pub mod rmsnorm;
pub mod second_order;
pub mod semantics;
mod verdict;

pub use law::{Draw, Estimator, Law};
pub use registry::{CrateFamily, families, family_names, registry};

/// A static list of one claim type as the claims a family lists.
pub fn listed<C: Claim + 'static>(claims: &'static [C]) -> Vec<&'static dyn Claim> {
    claims.iter().map(|c| c as &'static dyn Claim).collect()
}

/// Every normalization claim (layernorm, rmsnorm, bypass, compound, second
/// order), in that order.
pub fn norm_claims() -> impl Iterator<Item = &'static norm::NormClaim> {
    [
        layernorm::norm_claims(),
        rmsnorm::norm_claims(),
        bypass::norm_claims(),
        compound::norm_claims(),
        second_order::norm_claims(),
    ]
    .into_iter()
    .flatten()
}
pub use verdict::{BelowBudget, BoundMde, ClaimResult, SamplerKind, Verdict, check, sample};

use serde::Serialize;

use crate::engine::Budget;
use crate::error::Error;
use crate::exact::Oracle;
use crate::ops::Subject;
use crate::stats::{Estimate, Statistic};

/// Whether a statement is exact or an approximation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Exact for every finite `d`.
    Exact,
    /// Leading-order approximation with error `O(1/d^order)`.
    LeadingOrder { order: u32 },
}

impl Kind {
    /// The name used in reports.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Exact => "exact",
            Kind::LeadingOrder { .. } => "leading_order",
        }
    }
}

/// The fast kernel a claim's [`Claim::fast_estimate`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FastPath {
    /// The bit-mask kernels over a fixed input (`fast::dropout`,
    /// `fast::attention_row`, the mask-shape and ensemble kernels).
    Masks,
    /// The normalization-site kernels (`fast::FastSite` and
    /// `fast::FastCompound`), one mask per draw through the norm.
    NormSite,
}

/// Whether the claimed quantity is one number or one per unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    Scalar,
    Vector,
}

/// What a claim states about itself, apart from its computations: the
/// fields every report, list and test reads. A claim holds one and returns
/// it from [`Claim::card`].
///
/// ```
/// use dropmc::claims::{Card, Kind, Shape};
/// use dropmc::stats::Statistic;
///
/// let pmf = Card::new("mine.kept", "mine", "P(K = k) = C(d,k) q^k p^(d-k)", Shape::Vector, 10_000)
///     .with_statistic(Statistic::Indicator { trials: 1 });
/// assert_eq!(pmf.kind, Kind::Exact);
/// assert_eq!(pmf.statistic, Statistic::Indicator { trials: 1 });
///
/// let output = Card::new("mine.output", "mine", "E[LN(z)] ~ ...", Shape::Vector, 10_000)
///     .leading_order(1);
/// assert_eq!(output.kind, Kind::LeadingOrder { order: 1 });
/// assert_eq!(output.statistic, Statistic::default());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Card {
    /// Stable identifier, `family.name`.
    pub id: &'static str,
    /// The family (one formula file) it belongs to.
    pub family: &'static str,
    /// The statement, readable in a table.
    pub formula: &'static str,
    /// Exact or leading order.
    pub kind: Kind,
    /// Scalar or per-component.
    pub shape: Shape,
    /// Draws at the default budget.
    pub samples: u64,
    /// The kind of per-draw statistic, which decides the test.
    pub statistic: Statistic,
}

impl Card {
    /// An exact claim whose per-draw statistic is a mean with the default
    /// skewness bound ([`Statistic::default`]).
    pub const fn new(
        id: &'static str,
        family: &'static str,
        formula: &'static str,
        shape: Shape,
        samples: u64,
    ) -> Card {
        Card {
            id,
            family,
            formula,
            kind: Kind::Exact,
            shape,
            samples,
            statistic: Statistic::DEFAULT,
        }
    }

    /// The same card with another per-draw statistic.
    pub const fn with_statistic(self, statistic: Statistic) -> Card {
        Card { statistic, ..self }
    }

    /// The same card for a leading-order statement with error `O(1/d^order)`.
    pub const fn leading_order(self, order: u32) -> Card {
        Card {
            kind: Kind::LeadingOrder { order },
            ..self
        }
    }
}

/// One analytic statement under test.
///
/// An implementation says what it states in its [`Card`] and computes the
/// closed form and the estimate; the card's fields are read through the
/// provided accessors ([`id`](Claim::id), [`family`](Claim::family), …),
/// which are not meant to be overridden.
pub trait Claim: Sync {
    /// What the claim states: id, family, formula, kind, shape, budget and
    /// statistic.
    fn card(&self) -> Card;
    /// Stable identifier, `family.name`.
    fn id(&self) -> &'static str {
        self.card().id
    }
    /// The family (one formula file) it belongs to.
    fn family(&self) -> &'static str {
        self.card().family
    }
    /// The statement, readable in a table.
    fn formula(&self) -> &'static str {
        self.card().formula
    }
    /// Exact or leading order.
    fn kind(&self) -> Kind {
        self.card().kind
    }
    /// Scalar or per-component.
    fn shape(&self) -> Shape {
        self.card().shape
    }
    /// Draws at the default budget.
    fn default_samples(&self) -> u64 {
        self.card().samples
    }
    /// The closed form's value(s) at the claim's configuration.
    fn analytic(&self) -> Result<Vec<f64>, Error>;
    /// The exact value(s) by an independent computation, where one exists.
    fn oracle(&self) -> Result<Option<Oracle>, Error> {
        Ok(None)
    }
    /// Monte Carlo estimate(s) of the same quantity on `subject`, calling
    /// the subject's own layers for every draw (the generic path).
    fn estimate(&self, subject: &Subject, budget: Budget) -> Result<Vec<Estimate>, Error>;
    /// The same estimate from the fast sampler ([`crate::ops::fast`]), for a
    /// claim about the mathematics whose quantity has a bit-mask form; `None`
    /// when it has none. [`check`] uses it when the subject is the
    /// mathematics ([`Subject::reference`]), and the generic
    /// [`estimate`](Claim::estimate) otherwise.
    fn fast_estimate(&self, budget: Budget) -> Option<Result<Vec<Estimate>, Error>> {
        let _ = budget;
        None
    }
    /// Which fast kernel serves [`fast_estimate`](Claim::fast_estimate):
    /// `Some` exactly when it returns `Some` (the fast-vs-generic tests run
    /// every claim that declares one against its generic estimate).
    fn fast_path(&self) -> Option<FastPath> {
        None
    }
    /// The law of the per-draw statistic under the null, as far as the
    /// size of the claim's test needs it ([`crate::claims::law`]): by default the law the
    /// statistic fixes for a count, and [`Law::Undeclared`] for a mean,
    /// which a claim testing a mean overrides with its [`Law::Draws`] (or
    /// [`Law::NoLaw`] saying why there is none).
    fn law(&self) -> Law {
        Law::implied_by(self.statistic())
    }
    /// The kind of per-draw statistic, which decides the test (see
    /// [`crate::stats::Statistic`]; [`Card::new`] starts from a mean with
    /// sample standard error and the default skewness bound).
    fn statistic(&self) -> Statistic {
        self.card().statistic
    }
    /// The smallest budget at which the claim's test has its stated size;
    /// below it [`check`] reports [`Verdict::Inconclusive`].
    fn min_samples(&self) -> u64 {
        self.statistic().min_samples()
    }
    /// The width of the interval each component's per-draw statistic lies
    /// in under the null, where one is known (`None`: no range, the
    /// default). Below [`min_samples`](Claim::min_samples) [`check`] tests
    /// such a component by the distribution-free bound
    /// ([`crate::stats::bernstein_test`]), valid at every budget, and fails
    /// the claim when the bound rejects. A scaled count on the generic path
    /// needs none: its draws are `{0, target/keep}`.
    fn null_range(&self) -> Option<Vec<f64>> {
        None
    }
    /// The note for a run on `subject` (by default [`note`](Claim::note));
    /// a claim that can say something about the subject itself (which
    /// rounding its layer uses, say) overrides this.
    fn note_on(&self, subject: &Subject) -> Option<String> {
        let _ = subject;
        self.note()
    }
    /// The order half of a leading-order claim's verdict (see
    /// [`crate::claims::order::OrderCheck`]): `None` for a claim with no
    /// order check, `Err` when it could not be measured. [`check`] fails
    /// the claim when it fails, whatever the budget.
    fn order_check(&self) -> Option<Result<crate::claims::order::OrderCheck, String>> {
        None
    }
    /// A line the report prints under the table (for example a
    /// leading-order claim's measured gap at its own width).
    fn note(&self) -> Option<String> {
        None
    }
}
