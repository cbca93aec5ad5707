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
//!   [`ops::DropoutLayer`];
//! * [`formulas`] — closed forms and derivations, one family per file;
//! * [`exact`] — enumeration oracles;
//! * [`claims`] — claims and the registry;
//! * [`report`], [`eval`], [`cli`] — what users see;
//! * [`verify`] — calibration of the suite itself across seeds.

pub mod adapters;
pub mod claims;
pub mod cli;
pub mod engine;
pub mod error;
pub mod eval;
pub mod exact;
pub mod formulas;
pub mod ops;
pub mod report;
pub mod stats;
pub mod verify;

pub use error::Error;
