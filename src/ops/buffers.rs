//! The length check every pass of a layer makes before it writes.
//!
//! A training pass writes `x.len()` outputs and as many mask entries; a
//! backward pass writes `grad_out.len()` gradients given as many mask
//! entries. [`check_buffers`] is that one check, shared by the reference,
//! the mutant gallery, the framework adapters and the perturbed layers, so
//! that every layer rejects a short buffer the same way instead of letting a
//! `zip` silently truncate it. The passes' own checks
//! ([`TrainPass::check_lengths`](super::TrainPass::check_lengths),
//! [`BackwardPass::check_lengths`](super::BackwardPass::check_lengths)) are
//! this check on their buffers.

use crate::error::{Error, check_len};

/// Checks that the value buffer `values` (named `what` in the error: the
/// `"output buffer"` of a training pass, the `"gradient buffer"` of a
/// backward pass) and the mask buffer both hold `n` entries.
///
/// Errors with [`Error::LengthMismatch`] naming the first buffer that is off.
pub fn check_buffers(
    what: &'static str,
    values: &[f64],
    mask: &[bool],
    n: usize,
) -> Result<(), Error> {
    check_len(what, values, n)?;
    if mask.len() != n {
        return Err(Error::LengthMismatch {
            what: "mask buffer",
            expected: n,
            got: mask.len(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_short_buffer_is_named() {
        let what = |r: Result<(), Error>| match r {
            Err(Error::LengthMismatch { what, .. }) => what,
            other => panic!("{other:?}"),
        };
        assert!(check_buffers("output buffer", &[0.0; 3], &[false; 3], 3).is_ok());
        assert_eq!(
            what(check_buffers("output buffer", &[0.0; 2], &[false; 3], 3)),
            "output buffer"
        );
        assert_eq!(
            what(check_buffers("gradient buffer", &[0.0; 3], &[false; 4], 3)),
            "mask buffer"
        );
    }
}
