//! Masks over a `T × d` block of activations (positions × features), and a
//! generator wrapper that counts what a layer draws.
//!
//! # Mask shapes
//!
//! An activation block `X ∈ R^{T×d}` (row-major: entry `(t, k)` at index
//! `t·d + k`) can be dropped with one independent mask per entry
//! ([`MaskShape::Independent`], what plain dropout does) or with one mask per
//! feature shared by every position ([`MaskShape::SharedOverPositions`], as
//! "variational" or channel dropout does). Which one a model specifies
//! changes the variance of anything summed over positions; the claims of
//! [`crate::claims::mask_shape`] tell them apart.

use std::convert::Infallible;

use rand::{Rng, TryRng};

use crate::error::Error;

/// Which entries of a `T × d` block share a mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaskShape {
    /// One independent mask per entry `(t, k)`.
    Independent,
    /// One mask per feature `k`, shared by all `T` positions.
    SharedOverPositions,
}

/// The row width `d` of a `T × d` block stored in `len` values.
pub fn row_width(len: usize, positions: usize) -> Result<usize, Error> {
    if positions == 0 || len == 0 {
        return Err(Error::Empty {
            what: "activation block",
        });
    }
    if !len.is_multiple_of(positions) {
        return Err(Error::LengthMismatch {
            what: "activation block (T rows of equal width)",
            expected: positions * len.div_ceil(positions),
            got: len,
        });
    }
    Ok(len / positions)
}

/// A generator that forwards to another and counts every call made to it
/// (`next_u32`, `next_u64` and `fill_bytes` each count one draw).
///
/// The evaluation-mode claim wraps the stream in one of these: a correct
/// layer leaves the count at zero.
pub struct CountingRng<'a> {
    inner: &'a mut dyn Rng,
    draws: u64,
}

impl<'a> CountingRng<'a> {
    /// Wraps `inner` with a count of zero.
    pub fn new(inner: &'a mut dyn Rng) -> Self {
        CountingRng { inner, draws: 0 }
    }

    /// Calls made so far.
    pub fn draws(&self) -> u64 {
        self.draws
    }
}

impl TryRng for CountingRng<'_> {
    type Error = Infallible;
    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        self.draws += 1;
        Ok(self.inner.next_u32())
    }
    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        self.draws += 1;
        Ok(self.inner.next_u64())
    }
    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        self.draws += 1;
        self.inner.fill_bytes(dst);
        Ok(())
    }
}
