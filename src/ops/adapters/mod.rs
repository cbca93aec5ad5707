//! Adapters: the dropout and normalization layers of other Rust frameworks,
//! behind this crate's conformance trait [`crate::ops::DropoutLayer`].
//!
//! Each adapter lives behind a cargo feature, so the default build does not
//! compile the frameworks:
//!
//! * `candle` (module `adapters::candle`): `candle_nn::ops::dropout` /
//!   `candle_nn::Dropout` (candle-nn 0.11.1) and candle's `LayerNorm` /
//!   `RmsNorm` forward passes on `f64` slices;
//! * `burn` (module `adapters::burn`): `burn::nn::Dropout` on the ndarray
//!   backend with autodiff (burn 0.22.1), and burn's `LayerNorm` and
//!   `BatchNorm` (with its running statistics) on `f64` slices.
//!
//! [`rounding`] (no feature) bounds how far a framework's normalization of
//! one row may be from the exact value, given the precision it computes in.
//!
//! # What goes through the trait, and what cannot
//!
//! The trait passes the generator in, so that a test controls every random
//! number. Neither framework can draw from a caller's generator: candle's CPU
//! backend draws from the thread-local generator of `rand` 0.9 and refuses
//! to be seeded (`set_seed` returns an error); burn's ndarray backend draws
//! from one process-wide `StdRng`, which can be seeded. The burn adapter
//! therefore seeds burn from one `u64` of the passed generator before every
//! call (reproducible); the candle adapter cannot (its samples are valid
//! draws but not reproducible). Statistical claims need only independent
//! draws, so both run the registry's dropout family.
//!
//! Neither framework returns its keep mask: each adapter derives it from the
//! output (the shared `framework` module reads it off), and its backward pass rebuilds the framework's
//! mask tensor from the given mask and differentiates the framework's own
//! product with the framework's autograd. The findings, each pinned by a
//! test in `tests/frameworks_candle.rs` / `tests/frameworks_burn.rs`, are
//! listed in the README's "Frameworks" section; `tests/frameworks_norm.rs`
//! runs the normalization layers against the normalization and BatchNorm
//! claims.

#[cfg(feature = "burn")]
pub mod burn;
#[cfg(feature = "candle")]
pub mod candle;
#[cfg(any(feature = "burn", feature = "candle"))]
mod framework;
pub mod rounding;
