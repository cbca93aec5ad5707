//! The one list of claims that the tests, the report and the CLI read.

use super::Claim;

/// Every registered claim, family by family. A new family adds one line.
pub fn registry() -> Vec<&'static dyn Claim> {
    let mut all: Vec<&'static dyn Claim> = Vec::new();
    all.extend(super::dropout::claims());
    all.extend(super::batchnorm::claims());
    all
}

/// The family names in registry order, without repeats.
pub fn family_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = Vec::new();
    for claim in registry() {
        if !names.contains(&claim.family()) {
            names.push(claim.family());
        }
    }
    names
}
