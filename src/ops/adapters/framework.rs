//! What the framework adapters share: reading the keep mask off a
//! framework's output, and the shape of each pass around the framework's
//! own call — the checks made before it, the copy of its output after
//! ([`train_reading_mask`], [`eval_through`], [`backward_through`]); an
//! adapter supplies only the call.
//!
//! # Reading the mask off the output
//!
//! A framework's dropout returns only `z`. For a unit with finite `x_k ≠ 0`,
//! `z_k ≠ 0` iff the unit was kept. A unit with `x_k = 0` (or non-finite)
//! would hide its mask, so [`train_reading_mask`] hands the framework `1.0`
//! there instead and reads the unit's factor (`keep · s`) straight off the
//! framework's output; it then writes `x_k · factor`, the product the
//! framework computes for that unit (both frameworks multiply elementwise,
//! up to association, which is exact since `keep` is 0 or 1).

use crate::error::Error;
use crate::ops::{BackwardPass, EvalPass, TrainPass};

/// Whether a unit's own output shows its mask: finite and non-zero.
fn identifiable(v: f64) -> bool {
    v != 0.0 && v.is_finite()
}

/// A training pass through a framework's dropout `run` (input in, output
/// out), with the mask read off its output (see the module docs).
pub(crate) fn train_reading_mask(
    pass: TrainPass<'_>,
    run: impl FnOnce(&[f64]) -> Result<Vec<f64>, Error>,
) -> Result<(), Error> {
    pass.check_lengths()?;
    let TrainPass { x, out, mask } = pass;
    let probe: Vec<f64> = x
        .iter()
        .map(|&v| if identifiable(v) { v } else { 1.0 })
        .collect();
    let y = run(&probe)?;
    for (((o, m), &v), &z) in out.iter_mut().zip(mask.iter_mut()).zip(x).zip(&y) {
        *m = z != 0.0;
        *o = if identifiable(v) { z } else { v * z };
    }
    Ok(())
}

/// An evaluation pass through a framework's eval-mode forward `run`: the
/// output buffer is checked first, then `run`'s output copied into it.
pub(crate) fn eval_through(
    pass: EvalPass<'_>,
    run: impl FnOnce(&[f64]) -> Result<Vec<f64>, Error>,
) -> Result<(), Error> {
    pass.check_lengths()?;
    pass.out.copy_from_slice(&run(pass.x)?);
    Ok(())
}

/// A backward pass through a framework's autograd `run` (given `∂L/∂z` and
/// the mask, returning `∂L/∂x`). Checked before the framework runs: the
/// buffers hold `grad_out.len()` entries, then the framework accepts the
/// rate `p` (`accepted`); an unaccepted rate is [`Error::InvalidRate`].
pub(crate) fn backward_through(
    pass: BackwardPass<'_>,
    p: f64,
    accepted: bool,
    run: impl FnOnce(&[f64], &[bool]) -> Result<Vec<f64>, Error>,
) -> Result<(), Error> {
    pass.check_lengths()?;
    if !accepted {
        return Err(Error::InvalidRate { p });
    }
    pass.grad_in
        .copy_from_slice(&run(pass.grad_out, pass.mask)?);
    Ok(())
}

/// The number of rows of `x`, read as rows of `d` values (row-major).
pub(crate) fn rows_of(x: &[f64], d: usize) -> Result<usize, Error> {
    if d == 0 || x.is_empty() {
        return Err(Error::Empty { what: "x" });
    }
    if !x.len().is_multiple_of(d) {
        return Err(Error::LengthMismatch {
            what: "x (rows of d values)",
            expected: (x.len() / d + 1) * d,
            got: x.len(),
        });
    }
    Ok(x.len() / d)
}
