//! The buffers of one pass of a [`DropoutLayer`](super::DropoutLayer), each
//! pass's as one value.
//!
//! Every method of the conformance trait reads one input buffer and writes
//! one or two output buffers of the same length; bundling them keeps the
//! drop rate `p` and the generator — the two arguments that say *how* a pass
//! runs — apart from the slices it runs *on*:
//!
//! | pass | reads | writes |
//! |---|---|---|
//! | [`TrainPass`] | `x` | `out`, `mask` |
//! | [`EvalPass`] | `x` | `out` |
//! | [`BackwardPass`] | `grad_out`, `mask` | `grad_in` |
//! | [`BlockPass`] | `x` as `positions` rows, `shape` | `out`, `mask` |
//!
//! Building a pass checks nothing: an implementation checks, in the
//! reference's order, the rate first ([`Rate::new`](super::Rate::new)), then
//! the buffers' lengths (each pass's `check_lengths`, which is
//! [`check_buffers`] or [`check_len`]), so that every layer reports a bad
//! call with the same error.

use super::buffers::check_buffers;
use super::shape::MaskShape;
use crate::error::{Error, check_len};

/// The buffers of a training-mode forward pass: the input `x`, and the
/// output `out` and keep mask `mask` the pass writes (both `x.len()` long;
/// the implementation checks).
#[derive(Debug)]
pub struct TrainPass<'a> {
    /// The input values.
    pub x: &'a [f64],
    /// The output: a kept unit's scaled value, a dropped unit's `0`.
    pub out: &'a mut [f64],
    /// The keep mask: `true` where the unit was kept.
    pub mask: &'a mut [bool],
}

impl<'a> TrainPass<'a> {
    /// The pass reading `x` and writing `out` and `mask`.
    pub fn new(x: &'a [f64], out: &'a mut [f64], mask: &'a mut [bool]) -> Self {
        TrainPass { x, out, mask }
    }

    /// Checks that `out` and `mask` hold `x.len()` entries
    /// ([`Error::LengthMismatch`] names the `"output buffer"` or the
    /// `"mask buffer"`).
    pub fn check_lengths(&self) -> Result<(), Error> {
        check_buffers("output buffer", self.out, self.mask, self.x.len())
    }
}

/// The buffers of an evaluation-mode forward pass: the input `x` and the
/// output `out` (`x.len()` long; the implementation checks).
#[derive(Debug)]
pub struct EvalPass<'a> {
    /// The input values.
    pub x: &'a [f64],
    /// The output; a correct layer writes `x` unchanged.
    pub out: &'a mut [f64],
}

impl<'a> EvalPass<'a> {
    /// The pass reading `x` and writing `out`.
    pub fn new(x: &'a [f64], out: &'a mut [f64]) -> Self {
        EvalPass { x, out }
    }

    /// Checks that `out` holds `x.len()` entries ([`Error::LengthMismatch`]
    /// names the `"eval output buffer"`).
    pub fn check_lengths(&self) -> Result<(), Error> {
        check_len("eval output buffer", self.out, self.x.len())
    }
}

/// The buffers of a backward pass: the gradient `grad_out` with respect to
/// the forward pass's output, that pass's keep mask `mask`, and the
/// gradient `grad_in` with respect to its input the pass writes (all
/// `grad_out.len()` long; the implementation checks).
#[derive(Debug)]
pub struct BackwardPass<'a> {
    /// `∂L/∂z`, the gradient with respect to the forward output.
    pub grad_out: &'a [f64],
    /// The keep mask the forward pass wrote.
    pub mask: &'a [bool],
    /// `∂L/∂x`, written by the pass.
    pub grad_in: &'a mut [f64],
}

impl<'a> BackwardPass<'a> {
    /// The pass reading `grad_out` and `mask` and writing `grad_in`.
    pub fn new(grad_out: &'a [f64], mask: &'a [bool], grad_in: &'a mut [f64]) -> Self {
        BackwardPass {
            grad_out,
            mask,
            grad_in,
        }
    }

    /// Checks that `grad_in` and `mask` hold `grad_out.len()` entries
    /// ([`Error::LengthMismatch`] names the `"gradient buffer"` or the
    /// `"mask buffer"`).
    pub fn check_lengths(&self) -> Result<(), Error> {
        check_buffers(
            "gradient buffer",
            self.grad_in,
            self.mask,
            self.grad_out.len(),
        )
    }
}

/// The buffers of a training pass over a `T × d` block: `x` row-major with
/// `positions` rows (`T`), the mask shape asked for, and the output and
/// mask the pass writes (both `x.len()` long; the implementation checks,
/// and that `positions` divides `x.len()`).
#[derive(Debug)]
pub struct BlockPass<'a> {
    /// The block's buffers, `T·d` entries each.
    pub pass: TrainPass<'a>,
    /// The number of rows `T` (positions) of the block.
    pub positions: usize,
    /// Which entries share a mask.
    pub shape: MaskShape,
}

impl<'a> BlockPass<'a> {
    /// The pass over `pass`'s buffers read as `positions` rows, masked with
    /// `shape`.
    pub fn new(pass: TrainPass<'a>, positions: usize, shape: MaskShape) -> Self {
        BlockPass {
            pass,
            positions,
            shape,
        }
    }

    /// The same block with the mask shape `shape` instead.
    pub fn with_shape(self, shape: MaskShape) -> Self {
        BlockPass { shape, ..self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The buffer a length error names, or `None` for `Ok`.
    fn named(r: Result<(), Error>) -> Option<&'static str> {
        match r {
            Ok(()) => None,
            Err(Error::LengthMismatch { what, .. }) => Some(what),
            Err(e) => panic!("not a length error: {e}"),
        }
    }

    #[test]
    fn each_pass_names_its_short_buffer() {
        let x = [1.0, 2.0, 3.0];
        let (mut out, mut short, mut mask) = ([0.0; 3], [0.0; 2], [false; 3]);
        assert_eq!(
            named(TrainPass::new(&x, &mut out, &mut mask).check_lengths()),
            None
        );
        let train = TrainPass::new(&x, &mut short, &mut mask);
        assert_eq!(named(train.check_lengths()), Some("output buffer"));
        let train = TrainPass::new(&x, &mut out, &mut mask[..2]);
        assert_eq!(named(train.check_lengths()), Some("mask buffer"));
        assert_eq!(named(EvalPass::new(&x, &mut out).check_lengths()), None);
        let eval = EvalPass::new(&x, &mut short);
        assert_eq!(named(eval.check_lengths()), Some("eval output buffer"));
        let back = BackwardPass::new(&x, &mask, &mut out);
        assert_eq!(named(back.check_lengths()), None);
        let back = BackwardPass::new(&x, &mask, &mut short);
        assert_eq!(named(back.check_lengths()), Some("gradient buffer"));
        let back = BackwardPass::new(&x, &mask[..1], &mut out);
        assert_eq!(named(back.check_lengths()), Some("mask buffer"));
    }

    #[test]
    fn with_shape_keeps_the_buffers_and_rows() {
        let x = [1.0; 4];
        let (mut out, mut mask) = ([0.0; 4], [false; 4]);
        let block = BlockPass::new(
            TrainPass::new(&x, &mut out, &mut mask),
            2,
            MaskShape::Independent,
        );
        let shared = block.with_shape(MaskShape::SharedOverPositions);
        assert_eq!(shared.shape, MaskShape::SharedOverPositions);
        assert_eq!((shared.positions, shared.pass.x.len()), (2, 4));
    }
}
