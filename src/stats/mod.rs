//! Statistics: mergeable accumulators, Student-t and exact binomial tests,
//! minimum budgets, and the suite-wide false-alarm budget.

mod accumulator;
mod batch_cumulants;
mod bernstein;
mod binomial;
mod composite;
mod exact_size;
mod family;
mod ks;
mod skewness;
mod statistic;
pub mod tolerance;
mod ztest;

pub use accumulator::{CovarianceAccumulator, Estimate, MeanAccumulator, per_draw_dof};
pub use batch_cumulants::{BatchCumulants, ema_skewness};
pub use bernstein::{
    NULL_RANGE_SLACK, RANGE_TERM, TWO_SIDED_TAILS, VARIANCE_TERM, bernstein_deviation,
    bernstein_p_value, bernstein_test,
};
pub use binomial::{
    BinomialTest, binomial_mid_p, binomial_test, proportion_mid_p, proportion_test,
};
pub use composite::{interval_test, nearest_in};
pub use exact_size::{
    binomial_test_size, size_over_counts, two_point_mean_t_size, two_point_variance_t_size,
};
pub use family::{
    FAMILY_ALPHA, POWER, SUITE_ASSERTION_BUDGET, assertion_alpha, critical_z, masks_to_resolve,
    power_z,
};
pub use ks::{KsTest, ks_uniform, min_sample_for, smallest_p_value};
pub use skewness::{
    CentralMoments, dropped_raw_moments, linearized_ratio_skewness, normal_raw_moments,
};
pub use statistic::{
    DEFAULT_SKEWNESS, MEAN_SIZE_FACTOR, Statistic, mean_min_samples, reads_as_two_valued,
    two_point_skewness,
};
pub use ztest::{
    NORMAL_DOF, ZTest, critical_value, critical_value_at, exact_agreement,
    minimum_detectable_effect, rejection_probability, two_sided_p, two_sided_t_p, z_test,
};
