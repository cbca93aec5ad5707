//! The crate's one error type: every public constructor and entry point
//! validates its input and returns one of these instead of panicking.

use std::fmt;

/// Why an input was rejected.
///
/// Each variant names what was wrong and, in its message, what to do about
/// it. The enum is `#[non_exhaustive]`: match the variants you handle and
/// keep a wildcard arm.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// A drop rate outside `[0, 1)` or not a number. `p = 1` is rejected on
    /// purpose: inverted dropout divides by `q = 1 - p`.
    InvalidRate { p: f64 },
    /// A vector that must hold at least one value was empty.
    Empty { what: &'static str },
    /// A value that must be finite was NaN or infinite.
    NonFinite {
        what: &'static str,
        index: usize,
        value: f64,
    },
    /// Two vectors that must have the same length did not.
    LengthMismatch {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    /// A Monte Carlo run was asked for with fewer samples than it needs.
    TooFewSamples { needed: u64, got: u64 },
    /// A formula's quantity is undefined for this input (for example σ = 0).
    Degenerate { what: String },
    /// A result does not fit in an `f64` for this input (it overflowed to
    /// ±∞ or became NaN); rescaling the input usually helps.
    Overflow { what: String },
    /// A family name (`--family`) that the registry does not hold.
    UnknownFamily { name: String, known: String },
    /// A claim id that the registry does not hold.
    UnknownClaim { name: String, known: String },
    /// An `eval` quantity that no registered family provides; `near` is
    /// the registered name one edit away, if any.
    UnknownQuantity {
        name: String,
        near: Option<String>,
        known: String,
    },
    /// A figure name that no registered family draws.
    UnknownFigure { name: String, known: String },
    /// A file or directory that cannot be created, written or read.
    Io { path: String, message: String },
    /// A figure that the plotting backend could not draw.
    Plot { message: String },
    /// A list given on the command line did not parse.
    Parse { what: String, token: String },
    /// The input is too large for the exact oracle or the engine.
    TooLarge {
        what: &'static str,
        limit: usize,
        got: usize,
    },
    /// A command option outside its domain (for example `--seeds 0`).
    InvalidOption { what: String },
    /// A subject name (`--subject`) that is neither `reference` nor a
    /// mutant of the gallery; `known` lists the accepted names.
    UnknownSubject { name: String, known: String },
    /// A run journal (`--out`, `--resume`) that cannot be written or read,
    /// or whose header does not match the run's options.
    Journal { path: String, message: String },
    /// One line of a run journal read on `--resume` that is damaged or was
    /// changed: its checksum does not match, or it does not parse.
    JournalLine {
        path: String,
        /// 1-based line number in the file.
        line: usize,
        message: String,
    },
    /// A framework behind an adapter (`candle`, `burn`) returned an error.
    Framework {
        framework: &'static str,
        message: String,
    },
    /// Arguments that clap refused (an unknown flag, a missing argument, a
    /// value that does not parse); `message` is clap's whole message, with
    /// the usage line and any "did you mean" suggestion.
    Usage { message: String },
    /// A valid input outside what this computation handles (for example a
    /// site with two dropped terms for a one-term oracle).
    Unsupported { what: String },
    /// An invariant of the crate did not hold; a bug to report.
    Internal { what: String },
    /// The caller asked the run to stop ([`crate::engine::cancel`]: Ctrl-C
    /// in Python); nothing was computed.
    Interrupted,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidRate { p } => {
                write!(
                    f,
                    "drop rate p = {p} is invalid: it must be a number with 0 <= p < 1"
                )?;
                // The remark explains the one boundary value users try.
                if *p == 1.0 {
                    write!(f, " (p = 1 would divide by the keep probability q = 0)")?;
                }
                Ok(())
            }
            Error::Empty { what } => write!(f, "{what} is empty: give at least one value"),
            Error::NonFinite { what, index, value } => {
                write!(f, "{what}[{index}] = {value} is not a finite number")
            }
            Error::LengthMismatch {
                what,
                expected,
                got,
            } => {
                let values = if *got == 1 { "value" } else { "values" };
                write!(f, "{what} has {got} {values} but {expected} were expected")
            }
            Error::TooFewSamples { needed, got } => {
                write!(f, "{got} samples is too few: at least {needed} are needed")
            }
            Error::Degenerate { what } => write!(f, "undefined for this input: {what}"),
            Error::Overflow { what } => {
                write!(f, "{what} overflows f64 for this input; rescale it")
            }
            Error::UnknownFamily { name, known } => {
                write!(f, "no family named {name:?}; known families: {known}")
            }
            Error::UnknownClaim { name, known } => {
                write!(f, "no claim named {name:?}; known claims: {known}")
            }
            Error::UnknownQuantity { name, near, known } => {
                write!(f, "no eval quantity named {name:?}; ")?;
                if let Some(near) = near {
                    write!(f, "did you mean {near:?}? ")?;
                }
                write!(f, "known quantities: {known}")
            }
            Error::UnknownFigure { name, known } => {
                write!(f, "no figure named {name:?}; figures: {known}")
            }
            Error::Io { path, message } => write!(f, "{path}: {message}"),
            Error::Plot { message } => write!(f, "cannot draw the figure: {message}"),
            Error::Parse { what, token } => {
                write!(f, "cannot read {what}: {token:?} is not a finite number")
            }
            Error::TooLarge { what, limit, got } => {
                write!(f, "{what} = {got} is larger than the limit {limit}")
            }
            Error::InvalidOption { what } => write!(f, "invalid option: {what}"),
            Error::UnknownSubject { name, known } => {
                write!(f, "unknown subject {name:?}; known subjects: {known}")
            }
            Error::Journal { path, message } => write!(f, "journal {path}: {message}"),
            Error::JournalLine {
                path,
                line,
                message,
            } => write!(f, "journal {path}, line {line}: {message}"),
            Error::Framework { framework, message } => write!(f, "{framework}: {message}"),
            Error::Usage { message } => write!(f, "{}", message.trim_end()),
            Error::Unsupported { what } => write!(f, "not supported: {what}"),
            Error::Internal { what } => {
                write!(f, "internal error (please report it): {what}")
            }
            Error::Interrupted => write!(f, "interrupted"),
        }
    }
}

impl std::error::Error for Error {}

/// Checks a drop rate: finite and `0 <= p < 1`.
pub fn check_rate(p: f64) -> Result<f64, Error> {
    if p.is_finite() && (0.0..1.0).contains(&p) {
        Ok(p)
    } else {
        Err(Error::InvalidRate { p })
    }
}

/// Checks a normalization `ε` (LayerNorm, RMSNorm, BatchNorm): finite and
/// `≥ 0`; anything else is an [`Error::InvalidOption`] naming `what`.
pub fn check_eps(what: &str, eps: f64) -> Result<f64, Error> {
    if eps.is_finite() && eps >= 0.0 {
        Ok(eps)
    } else {
        Err(Error::InvalidOption {
            what: format!("{what} = {eps} must be a finite number >= 0"),
        })
    }
}

/// Checks that a vector is non-empty and every entry finite.
pub fn check_finite_vec(what: &'static str, x: &[f64]) -> Result<(), Error> {
    if x.is_empty() {
        return Err(Error::Empty { what });
    }
    check_all_finite(what, x)
}

/// Checks that every entry of a (possibly empty) vector is finite.
pub fn check_all_finite(what: &'static str, x: &[f64]) -> Result<(), Error> {
    match x.iter().position(|v| !v.is_finite()) {
        Some(index) => Err(Error::NonFinite {
            what,
            index,
            value: x[index],
        }),
        None => Ok(()),
    }
}

/// Checks that `x` has exactly `expected` entries.
pub fn check_len(what: &'static str, x: &[f64], expected: usize) -> Result<(), Error> {
    if x.len() == expected {
        Ok(())
    } else {
        Err(Error::LengthMismatch {
            what,
            expected,
            got: x.len(),
        })
    }
}

/// Parses a comma-separated list of finite numbers, as the CLI takes them.
pub fn parse_list(what: &str, text: &str) -> Result<Vec<f64>, Error> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(Error::Parse {
            what: what.to_string(),
            token: String::new(),
        });
    }
    trimmed
        .split(',')
        .map(|token| {
            let token = token.trim();
            match token.parse::<f64>() {
                Ok(v) if v.is_finite() => Ok(v),
                _ => Err(Error::Parse {
                    what: what.to_string(),
                    token: token.to_string(),
                }),
            }
        })
        .collect()
}
