//! # dropmc — dropout Monte Carlo
//!
//! Inverted dropout keeps the mean of an activation and inflates its second
//! moment by `1/q`. Any layer after it that measures spread (LayerNorm,
//! RMSNorm, BatchNorm's running statistics) therefore sees different inputs in
//! training and in evaluation. dropmc states the closed forms that describe
//! this, derives each one in its source, and checks it three ways: by
//! sampling millions of masks, by exact enumeration where that is possible,
//! and by property tests over random configurations.
//!
//! ## A guided tour
//!
//! 1. **The result.** Start at a formula file: [`formulas::dropout`] (the
//!    moments of inverted dropout), then [`formulas::layernorm`] (the shrink
//!    factor `c(μ,σ)`), [`formulas::rmsnorm`], [`formulas::bypass`],
//!    [`formulas::compound`], [`formulas::batchnorm`], and the next order in
//!    [`formulas::second_order`]. Each page states the result, derives it
//!    step by step, names its assumptions and its order of error.
//! 2. **The check.** The same family in [`claims`] (for example
//!    [`claims::layernorm`]) says how the result is tested: which
//!    configuration, which exact oracle, which per-draw statistic.
//! 3. **The oracle.** [`exact`] computes expectations without sampling: all
//!    `2^d` masks for small `d`, kept counts per group for large `d`.
//! 4. **The statistics.** [`stats`] explains the one false-alarm rate the
//!    whole suite shares and how each threshold follows from it.
//! 5. **Your numbers.** `dropmc eval ln --x 1,2,3 --p 0.1` evaluates a
//!    family's formulas on your input beside the exact value and a Monte
//!    Carlo estimate ([`eval`]).
//! 6. **Your layer.** Implement [`ops::DropoutLayer`] and run
//!    [`conformance`]; the [`mutants`] show what the claims catch.
//! 7. **A new formula.** `examples/new_formula.rs` adds one end to end.
//!
//! ## How to read a claim
//!
//! A [`claims::Claim`] is one statement: a closed form
//! ([`formulas`]), an exact oracle ([`exact`]) where one exists, and a Monte
//! Carlo estimator run by the [`engine`]. [`claims::check`] compares them
//! with the statistics of [`stats`]: every component is a two-sided z-test at
//! a level derived from one suite-wide false-alarm rate
//! ([`stats::FAMILY_ALPHA`]), and every verdict carries `z`, its p-value and
//! the minimum detectable effect. Leading-order statements are compared with
//! exact oracles, never tested as if exact.
//!
//! ## Map
//!
//! * [`engine`] — seeded portable streams, the parallel deterministic loop;
//! * [`stats`] — accumulators, z-tests, the false-alarm budget;
//! * [`ops`] — the layers under test and the conformance trait
//!   [`ops::DropoutLayer`]; LayerNorm, RMSNorm and dropout sites
//!   `y = h + Σ dropout(v_j)`;
//! * [`formulas`] — closed forms and derivations, one family per file;
//! * [`exact`] — enumeration oracles;
//! * [`claims`] — claims and the registry;
//! * [`conformance`] — run the claims against any dropout layer;
//! * [`mutants`] — known-wrong layers and the kill matrix;
//! * [`report`], [`eval`], [`cli`], [`table`] — what users see;
//! * [`stack`] — the deep-stack BatchNorm experiment;
//! * [`verify`] — calibration and power of the suite itself across seeds.

pub mod adapters;
pub mod audit;
pub mod claims;
pub mod cli;
pub mod conformance;
pub mod engine;
pub mod error;
pub mod eval;
pub mod exact;
pub mod fast;
pub mod formulas;
pub mod input;
pub mod mutants;
pub mod ops;
pub mod plot;
pub mod registry;
pub mod report;
pub mod stack;
pub mod stats;
pub mod table;
pub mod tolerance;
pub mod verify;

pub use error::Error;
