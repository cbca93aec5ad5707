//! Verifying the verifier: does the suite fail at the rate it states, and
//! are its p-values uniform when the implementation is correct?

pub mod calibrate;
pub mod journal;
pub mod order;
pub mod perturb;
pub mod power;
pub mod size;

use crate::error::Error;
use crate::ops::Subject;

/// The name of the reference subject for `--subject`.
pub const REFERENCE_SUBJECT: &str = "reference";

/// The subject `name` names: [`REFERENCE_SUBJECT`] (the crate's inverted
/// dropout) or the id of a mutant of the gallery ([`crate::mutants::gallery`],
/// as `dropmc mutants` lists them). Any other name is
/// [`Error::UnknownSubject`], listing the known names.
pub fn subject(name: &str) -> Result<Subject<'static>, Error> {
    if name == REFERENCE_SUBJECT {
        return Ok(Subject::reference());
    }
    let gallery = crate::mutants::gallery();
    match gallery.iter().find(|m| m.id == name) {
        Some(m) => Ok(Subject::with_dropout(m.layer)),
        None => Err(Error::UnknownSubject {
            name: name.to_string(),
            known: std::iter::once(REFERENCE_SUBJECT)
                .chain(gallery.iter().map(|m| m.id))
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}
