//! The normalization quantities of `eval` on one path: `eval ln | rms |
//! bypass | compound` as functions ([`ln`], [`rms`], [`bypass`],
//! [`compound`]), each defined in its own file over the shared machinery of
//! `src/eval/site.rs` (what one draw computes, the exact value, the estimate).

pub use super::bypass::{bypass, bypass_with};
pub use super::compound::{CompoundParams, compound};
pub use super::ln::ln;
pub use super::rms::rms;
pub use super::site::EXACT_LIMIT;
