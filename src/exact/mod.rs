//! Exact oracles: expectations computed by enumerating masks, not sampling.

mod enumerate;

pub use enumerate::{MAX_ENUMERATION_D, Oracle, enumerate_masks, unit_expectation};
