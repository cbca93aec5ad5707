//! The one list of claims that the tests, the report and the CLI read.

use super::Claim;

/// Every registered claim, family by family. A new family adds one line.
pub fn registry() -> Vec<&'static dyn Claim> {
    let mut all: Vec<&'static dyn Claim> = Vec::new();
    all.extend(super::dropout::claims());
    all.extend(super::layernorm::claims());
    all.extend(super::rmsnorm::claims());
    all.extend(super::bypass::claims());
    all.extend(super::compound::claims());
    all.extend(super::semantics::claims());
    all.extend(super::attention::claims());
    all.extend(super::mask_shape::claims());
    all.extend(super::ensemble::claims());
    all.extend(super::batchnorm::claims());
    all.extend(super::second_order::claims());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_claim_is_conclusive_at_its_default_budget() {
        for claim in registry() {
            assert!(
                claim.default_samples() >= claim.min_samples(),
                "{}: default {} draws is below its minimum budget {}",
                claim.id(),
                claim.default_samples(),
                claim.min_samples()
            );
        }
    }
}
