//! Exact oracles: expectations computed by enumerating masks, not sampling.

mod enumerate;
mod grouped;
pub mod linear_path;
mod moments;
pub mod network;
mod norm;

pub use enumerate::{
    CLOSED_FORM_ROUNDINGS, MAX_ENUMERATION_D, Oracle, enumerate_masks, enumerated_gap, sum_oracle,
    unit_expectation, variance_from_moments,
};
pub use grouped::{MAX_GROUPED_TERMS, NEGLIGIBLE_WEIGHT, binomial_weights, enumerate_counts};
pub use moments::{central_moments_by, gap_moments, mask_moments};
pub use norm::{Pipeline, grouped_pipeline, site_expectation, site_pipeline};
