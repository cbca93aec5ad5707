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
//!    [`conformance`]; the [`conformance::mutants`] show what the claims
//!    catch.
//! 7. **A new formula.** `examples/new_formula.rs` adds one end to end.
//!
//! ## How to read a claim
//!
//! A [`Claim`] is one statement: a closed form
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
//! The public modules are the extension API; everything else is internal.
//!
//! * [`engine`] — seeded portable streams, the parallel deterministic loop;
//! * [`stats`] — accumulators, z-tests, the false-alarm budget, and
//!   [`stats::tolerance`] (every rounding bound counted in roundings);
//! * [`ops`] — the layers under test and the conformance trait
//!   [`ops::DropoutLayer`]; LayerNorm, RMSNorm and dropout sites
//!   `y = h + Σ dropout(v_j)`; their SIMD kernels ([`ops::fast`]) and the
//!   framework adapters ([`ops::adapters`], behind `candle` / `burn`);
//! * [`formulas`] — closed forms and derivations, one family per file;
//! * [`exact`] — enumeration oracles;
//! * [`claims`] — the claims, one file per family; the open registry
//!   ([`Registry`], [`Family`]) is re-exported at the crate root;
//! * [`eval`] — the formulas on your numbers, and the deep-stack BatchNorm
//!   experiment ([`eval::stack`]);
//! * [`audit`] — the per-token audit of captured sites;
//! * [`conformance`] — run the claims against any dropout layer: the
//!   report ([`conformance::report`]), the known-wrong layers and the kill
//!   matrix ([`conformance::mutants`]), calibration and power of the suite
//!   across seeds ([`conformance::verify`]);
//! * `cli` — the `dropmc` command line, its tables, plots and progress
//!   (the `cli` cargo feature, on by default; the Python binding builds
//!   without it).
//!
//! The types an external family needs are re-exported here: a claim
//! ([`Claim`], [`Card`], [`Kind`], [`Shape`]), what it samples ([`Subject`],
//! [`DropoutLayer`], [`Rate`], [`Budget`], [`Sampler`], [`estimate`],
//! [`Oracle`], [`Statistic`], [`Estimate`]), where it goes ([`Family`],
//! [`Registry`], [`Figure`]) and what can go wrong ([`Error`]).

mod error;
mod plot;
mod registry;
mod table;

pub mod audit;
pub mod claims;
#[cfg(feature = "cli")]
pub mod cli;
pub mod conformance;
pub mod engine;
pub mod eval;
pub mod exact;
pub mod formulas;
pub mod ops;
pub mod stats;

pub use claims::{Card, Claim, ClaimResult, Kind, SamplerKind, Shape, Verdict, check};
pub use engine::{Budget, Sampler, Stream, estimate};
pub use error::{Error, check_finite_vec, check_len};
pub use eval::input::{read_list, read_number};
pub use eval::{EvalOutput, EvalQuantity, EvalResult, Values, monte_carlo};
pub use exact::{MAX_ENUMERATION_D, Oracle, enumerate_masks};
pub use ops::{DropoutLayer, Rate, Subject, TrainPass};
pub use plot::Figure;
pub use registry::{Family, Registry};
pub use stats::{Estimate, Statistic};
