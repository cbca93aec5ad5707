//! Shorthands over [`crate::registry::Registry::default`], the crate's own
//! families: what the tests read when they need every claim.

use super::Claim;
use crate::registry::Registry;

/// Every claim of the default registry, family by family.
pub fn registry() -> Vec<&'static dyn Claim> {
    Registry::default().claims()
}

/// The default registry's family names, in order.
pub fn family_names() -> Vec<&'static str> {
    Registry::default().family_names()
}
