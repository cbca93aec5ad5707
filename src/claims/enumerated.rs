//! What the claims of a family stated at fixed configurations, whose
//! draws' law is found by enumerating every mask, have in common (the
//! linear-path and network families): the card's text, what a claim
//! states, the configuration it is stated at, and the statistic and law
//! both read from one enumeration ([`EnumeratedSkewness`]).

use super::law::EnumeratedSkewness;
use super::{Card, Estimator, Law, Shape};
use crate::error::Error;

/// One claim: its id and formula text, what it states (`Q`, the family's
/// `Quantity`), the configuration it is stated at (`C`; `()` where the
/// quantity fixes it) and its law, enumerated once.
pub struct EnumeratedClaim<Q, C = ()> {
    pub id: &'static str,
    pub formula: &'static str,
    pub quantity: Q,
    pub config: C,
    skewness: EnumeratedSkewness,
}

impl<Q, C> EnumeratedClaim<Q, C> {
    /// The claim, its law not yet enumerated.
    pub const fn new(id: &'static str, formula: &'static str, quantity: Q, config: C) -> Self {
        EnumeratedClaim {
            id,
            formula,
            quantity,
            config,
            skewness: EnumeratedSkewness::new(),
        }
    }

    /// The exact claim's card in `family`: a mean whose skewness bound is
    /// the enumerated law's (`skewness` enumerates it, on first use), at the
    /// default budget `samples` raised to that statistic's minimum.
    pub fn enumerated_card(
        &self,
        family: &'static str,
        shape: Shape,
        samples: u64,
        skewness: impl FnOnce() -> Result<Vec<f64>, Error>,
    ) -> Card {
        let statistic = self.skewness.statistic(skewness);
        Card::new(
            self.id,
            family,
            self.formula,
            shape,
            samples.max(statistic.min_samples()),
        )
        .with_statistic(statistic)
    }

    /// The declared law: one skewness per component, from the same
    /// enumeration as the card's statistic; `why` if it failed.
    pub fn enumerated_law(
        &self,
        skewness: impl FnOnce() -> Result<Vec<f64>, Error>,
        why: &'static str,
    ) -> Law {
        self.skewness.law(skewness, Estimator::Mean, why)
    }
}
