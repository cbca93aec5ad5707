//! Run journals: long runs (`calibrate`, `power`) write each finished seed
//! as it ends, so an interrupted run loses nothing and can be resumed.
//!
//! # Format (JSON Lines)
//!
//! ```text
//! {"journal":"dropmc calibrate","version":1,"options":{...}}   header
//! {...}                                                        one finished seed
//! {...}
//! ```
//!
//! Every line is one JSON value followed by `\n`, written with one
//! `write_all` on an unbuffered file, so a line is in the operating system's
//! hands as soon as its seed ends: Ctrl-C (or any kill) loses at most the
//! seed that was running. Numbers are written by `serde_json` in the
//! shortest form that parses back to the same `f64` (ryu), and parsed with
//! its `float_roundtrip` feature (exact parsing), so a record read back is
//! bit-for-bit the record that was written. A non-finite `f64` would be
//! written as `null`; the records written here hold only finite numbers.
//!
//! # Resuming
//!
//! [`Journal::open`] with [`Mode::Resume`] reads the file, checks that the
//! header equals the one the new run would write (the same command, options
//! and claims; otherwise [`Error::Journal`]), keeps every complete record,
//! ignores a last line without its newline or that does not parse (the
//! trace of a kill in mid-write; the file is cut back to the last complete
//! record before anything is appended), and rejects a damaged line anywhere
//! else.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use crate::error::Error;

/// Journal format version (in the header).
pub const VERSION: u64 = 1;

/// Start a new journal or continue one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// `--out FILE`: create (or overwrite) the file.
    Create(PathBuf),
    /// `--resume FILE`: read the finished seeds and append the rest.
    Resume(PathBuf),
}

impl Mode {
    /// The mode the `--out` / `--resume` options ask for; both at once is
    /// an error (`--resume` already appends to its file).
    pub fn from_args(out: Option<PathBuf>, resume: Option<PathBuf>) -> Result<Option<Mode>, Error> {
        match (out, resume) {
            (Some(_), Some(_)) => Err(Error::InvalidOption {
                what: "--out and --resume together: --resume FILE appends to FILE itself".into(),
            }),
            (Some(path), None) => Ok(Some(Mode::Create(path))),
            (None, Some(path)) => Ok(Some(Mode::Resume(path))),
            (None, None) => Ok(None),
        }
    }
}

/// An open journal: the records a resumed run already has, and the file new
/// records are appended to.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
    finished: Vec<Value>,
}

fn journal_error(path: &Path, message: impl Into<String>) -> Error {
    Error::Journal {
        path: path.display().to_string(),
        message: message.into(),
    }
}

/// The header line of a journal of `command` run with `options`.
pub fn header(command: &str, options: Value) -> Value {
    serde_json::json!({ "journal": command, "version": VERSION, "options": options })
}

/// What differs between a journal's header and this run's: the options
/// that differ, with both values.
fn mismatch(journal: &Value, run: &Value) -> String {
    let (Some(a), Some(b)) = (journal["options"].as_object(), run["options"].as_object()) else {
        return format!("not a journal of this command (header {journal})");
    };
    if journal["journal"] != run["journal"] || journal["version"] != run["version"] {
        return format!(
            "written by {} (version {}), not by {} (version {})",
            journal["journal"], journal["version"], run["journal"], run["version"]
        );
    }
    let differ: Vec<String> = b
        .iter()
        .filter(|(k, v)| a.get(*k) != Some(*v))
        .map(|(k, v)| {
            let had = a.get(k).map_or("nothing".to_string(), Value::to_string);
            format!("{k} (journal {had}, this run {v})")
        })
        .collect();
    format!(
        "its options differ from this run's: {}",
        if differ.is_empty() {
            "the journal has options this run does not".to_string()
        } else {
            differ.join("; ")
        }
    )
}

impl Journal {
    /// Opens the journal `mode` names, with `header` as its first line.
    pub fn open(mode: &Mode, header: &Value) -> Result<Journal, Error> {
        match mode {
            Mode::Create(path) => Self::create(path, header),
            Mode::Resume(path) => Self::resume(path, header),
        }
    }

    fn create(path: &Path, header: &Value) -> Result<Journal, Error> {
        let file = File::create(path).map_err(|e| journal_error(path, e.to_string()))?;
        let mut journal = Journal {
            path: path.to_path_buf(),
            file,
            finished: Vec::new(),
        };
        journal.append(header)?;
        Ok(journal)
    }

    fn resume(path: &Path, header: &Value) -> Result<Journal, Error> {
        let text = std::fs::read_to_string(path).map_err(|e| journal_error(path, e.to_string()))?;
        let mut finished = Vec::new();
        let mut kept = 0; // bytes of complete, parsed lines
        let mut rest = text.as_str();
        let mut line_no = 0;
        while !rest.is_empty() {
            line_no += 1;
            let Some(end) = rest.find('\n') else {
                break; // a last line without its newline: cut by a kill
            };
            let line = &rest[..end];
            rest = &rest[end + 1..];
            match serde_json::from_str::<Value>(line) {
                Ok(value) if line_no == 1 => {
                    if &value != header {
                        return Err(journal_error(path, mismatch(&value, header)));
                    }
                }
                Ok(value) => finished.push(value),
                Err(_) if rest.is_empty() => break, // a damaged last line
                Err(e) => {
                    return Err(journal_error(
                        path,
                        format!("line {line_no} is damaged ({e}) and is not the last line"),
                    ));
                }
            }
            kept += end + 1;
        }
        if line_no == 0 || kept == 0 {
            return Err(journal_error(path, "no header line: not a dropmc journal"));
        }
        let file = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| journal_error(path, e.to_string()))?;
        file.set_len(kept as u64)
            .map_err(|e| journal_error(path, e.to_string()))?;
        let mut journal = Journal {
            path: path.to_path_buf(),
            file,
            finished,
        };
        std::io::Seek::seek(&mut journal.file, std::io::SeekFrom::End(0))
            .map_err(|e| journal_error(path, e.to_string()))?;
        Ok(journal)
    }

    /// The records read from a resumed journal (each once; empty for a new
    /// journal).
    pub fn take_finished(&mut self) -> Vec<Value> {
        std::mem::take(&mut self.finished)
    }

    /// Appends `record` as one line and hands it to the operating system.
    pub fn append(&mut self, record: &impl Serialize) -> Result<(), Error> {
        let mut line =
            serde_json::to_string(record).map_err(|e| journal_error(&self.path, e.to_string()))?;
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .and_then(|()| self.file.flush())
            .map_err(|e| journal_error(&self.path, e.to_string()))
    }

    /// A record read back from this journal that does not have the expected
    /// shape.
    pub fn bad_record(&self, index: usize, message: impl std::fmt::Display) -> Error {
        journal_error(
            &self.path,
            format!("record {} (line {}): {message}", index + 1, index + 2),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("dropmc-journal-{}-{name}", std::process::id()))
    }

    #[test]
    fn a_cut_last_line_is_dropped_and_a_wrong_header_is_refused() {
        let path = temp("cut");
        let head = header("test", serde_json::json!({ "seeds": 3 }));
        let mut j = Journal::open(&Mode::Create(path.clone()), &head).unwrap();
        let x: f64 = 0.1 + 0.2; // 0.30000000000000004: needs all 17 digits
        j.append(&serde_json::json!({ "seed": 1, "x": x })).unwrap();
        j.append(&serde_json::json!({ "seed": 2, "x": x })).unwrap();
        drop(j);
        // A kill in mid-write leaves part of the third record.
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("{\"seed\":3,\"x\":0.3");
        std::fs::write(&path, &text).unwrap();
        let mut j = Journal::open(&Mode::Resume(path.clone()), &head).unwrap();
        let done = j.take_finished();
        assert_eq!(done.len(), 2);
        assert_eq!(done[1]["x"].as_f64().unwrap().to_bits(), x.to_bits());
        j.append(&serde_json::json!({ "seed": 3 })).unwrap();
        drop(j);
        let lines: Vec<String> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(String::from)
            .collect();
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert_eq!(lines[3], "{\"seed\":3}");
        let other = header("test", serde_json::json!({ "seeds": 4 }));
        let err = Journal::open(&Mode::Resume(path.clone()), &other).unwrap_err();
        assert!(matches!(err, Error::Journal { .. }), "{err:?}");
        // A damaged line that is not the last is refused.
        std::fs::write(&path, format!("{head}\n{{oops\n{{\"seed\":2}}\n")).unwrap();
        let err = Journal::open(&Mode::Resume(path.clone()), &head).unwrap_err();
        assert!(err.to_string().contains("line 2"), "{err}");
        std::fs::remove_file(&path).unwrap();
    }
}
