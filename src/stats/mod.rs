//! Statistics: mergeable accumulators, z-tests, and the suite-wide
//! false-alarm budget.

mod accumulator;
mod family;
mod ks;
mod ztest;

pub use accumulator::{CovarianceAccumulator, Estimate, MeanAccumulator, per_draw_dof};
pub use family::{
    FAMILY_ALPHA, POWER, SUITE_ASSERTION_BUDGET, assertion_alpha, critical_z, power_z,
};
pub use ks::{KsTest, ks_uniform, min_sample_for, smallest_p_value};
pub use ztest::{ZTest, minimum_detectable_effect, rejection_probability, two_sided_p, z_test};
