//! Verifying the verifier: does the suite fail at the rate it states, and
//! are its p-values uniform when the implementation is correct?

pub mod calibrate;
pub mod journal;
#[cfg(feature = "cli")]
pub(crate) mod perturb;
pub mod power;
#[cfg(feature = "cli")]
pub(crate) mod size;

use std::ops::Range;

use crate::error::Error;
use crate::ops::Subject;

/// Which seeds a repeated run uses and which family it runs: the plan that
/// `calibrate`, `power` and `size` share.
///
/// The draws per claim are not part of it, because the three mean different
/// things by them: `calibrate` overrides each claim's budget, `power` caps it,
/// and `size` sweeps a list of budgets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replication {
    /// Number of independent seeds, K.
    pub seeds: u64,
    /// Seeds used are `first_seed .. first_seed + K`.
    pub first_seed: u64,
    /// Only this family (`None`: the command's own default selection).
    pub family: Option<String>,
}

impl Replication {
    /// The `i`-th seed of the run, `first_seed + i`.
    pub fn seed(&self, i: u64) -> u64 {
        self.first_seed + i
    }

    /// Every seed of the run, in order.
    pub fn seed_range(&self) -> Range<u64> {
        self.first_seed..self.first_seed + self.seeds
    }
}

/// The name of the reference subject for `--subject`.
pub const REFERENCE_SUBJECT: &str = "reference";

/// The subject `name` names: [`REFERENCE_SUBJECT`] (the crate's inverted
/// dropout) or the id of a mutant of the gallery ([`crate::conformance::mutants::gallery`],
/// as `dropmc mutants` lists them). Any other name is
/// [`Error::UnknownSubject`], listing the known names.
pub fn subject(name: &str) -> Result<Subject<'static>, Error> {
    if name == REFERENCE_SUBJECT {
        return Ok(Subject::reference());
    }
    let gallery = crate::conformance::mutants::gallery();
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
