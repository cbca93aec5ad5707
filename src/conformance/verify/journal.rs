//! Run journals: long runs (`calibrate`, `power`) write each finished seed
//! as it ends, so an interrupted run loses nothing and can be resumed.
//!
//! # Format (JSON Lines, each line checksummed)
//!
//! ```text
//! {"fnv1a64":"<16 hex>","record":{"journal":"dropmc calibrate","version":2,"options":{...}}}   header
//! {"fnv1a64":"<16 hex>","record":{...}}                                                      one finished seed
//! ```
//!
//! Each line wraps its record with the 64-bit FNV-1a hash ([`fnv1a64`]) of
//! the record's bytes exactly as written (the text after `"record":` up to
//! the closing `}`). On `--resume` a line whose record does not hash to its
//! checksum is refused as [`Error::JournalLine`] naming the file and the
//! line: a tampered value (`"failed":false` → `true`, one digit of a z) or
//! a damaged block is never read back as a result.
//!
//! FNV-1a is hand-written here (ten lines, no dependency): it guards
//! against accidents and casual edits, not against an adversary (anyone can
//! recompute it), which is all a local journal needs. It detects **every**
//! single-byte substitution: each step `h ← (h ⊕ b) · P` is a bijection of
//! the 64-bit state for a fixed byte (P is odd), so two inputs that differ
//! in one byte differ in the state after that byte and stay different
//! through the identical steps that follow. Other changes (insertions,
//! several bytes) go unseen with probability about `2⁻⁶⁴`.
//!
//! Journals of version 1 (no checksums) are refused with a message saying
//! so: their results cannot be told from edited ones, and a rerun with
//! `--out` rebuilds them.
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
//! record before anything is appended), and rejects a line whose checksum
//! fails anywhere, the last complete line included (a kill cannot leave a
//! complete line with a wrong checksum: the newline is its last byte).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use crate::error::Error;

/// Journal format version (in the header): 2 since every line carries a
/// checksum.
pub const VERSION: u64 = 2;

/// The start of every line, before the 16 hex digits of the checksum.
const LINE_PREFIX: &str = "{\"fnv1a64\":\"";
/// Between the checksum and the record.
const RECORD_KEY: &str = "\",\"record\":";

/// 64-bit FNV-1a (Fowler–Noll–Vo) of `bytes`: offset basis
/// `0xcbf29ce484222325`, prime `0x100000001b3` (module docs for why).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET_BASIS, |h, &b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

/// One journal line (without its newline) for the serialized `record`.
fn checksummed(record: &str) -> String {
    format!(
        "{LINE_PREFIX}{:016x}{RECORD_KEY}{record}}}",
        fnv1a64(record.as_bytes())
    )
}

/// The record of one line, if its checksum matches; else why not.
fn verified(line: &str) -> Result<&str, String> {
    let digits = line
        .strip_prefix(LINE_PREFIX)
        .ok_or("no checksum (not a line of a version-2 journal)")?;
    let (hex, rest) = digits.split_at_checked(16).ok_or("cut short")?;
    let record = rest
        .strip_prefix(RECORD_KEY)
        .and_then(|r| r.strip_suffix('}'))
        .ok_or("malformed line (no record after the checksum)")?;
    let stated =
        u64::from_str_radix(hex, 16).map_err(|_| format!("checksum {hex:?} is not hex"))?;
    let actual = fnv1a64(record.as_bytes());
    if stated != actual {
        return Err(format!(
            "checksum mismatch (line says {stated:016x}, its record hashes to {actual:016x}): \
             the line was changed or damaged; rerun with --out to rebuild the journal"
        ));
    }
    Ok(record)
}

/// Why a first line that fails [`verified`] is not a journal this version
/// reads: an old journal without checksums says so.
fn unreadable_header(line: &str, why: String) -> String {
    match serde_json::from_str::<Value>(line) {
        Ok(v) if v.get("journal").is_some() => format!(
            "written by an older dropmc (journal version {}, no checksums); this version reads \
             only version {VERSION} journals: rerun with --out to rebuild it",
            v["version"]
        ),
        _ => why,
    }
}

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
            let line_error = |message: String| Error::JournalLine {
                path: path.display().to_string(),
                line: line_no,
                message,
            };
            let record = match verified(line) {
                Ok(record) => record,
                Err(why) if line_no == 1 => {
                    return Err(line_error(unreadable_header(line, why)));
                }
                Err(why) => return Err(line_error(why)),
            };
            let value = serde_json::from_str::<Value>(record)
                .map_err(|e| line_error(format!("its record does not parse ({e})")))?;
            if line_no == 1 {
                if &value != header {
                    return Err(journal_error(path, mismatch(&value, header)));
                }
            } else {
                finished.push(value);
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
        let record =
            serde_json::to_string(record).map_err(|e| journal_error(&self.path, e.to_string()))?;
        let mut line = checksummed(&record);
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
        // A kill in mid-write leaves part of the third line.
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str(&checksummed("{\"seed\":3,\"x\":0.3")[..30]);
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
        assert_eq!(lines[3], checksummed("{\"seed\":3}"));
        let other = header("test", serde_json::json!({ "seeds": 4 }));
        let err = Journal::open(&Mode::Resume(path.clone()), &other).unwrap_err();
        assert!(matches!(err, Error::Journal { .. }), "{err:?}");
        // A damaged line that is not the last is refused.
        let head_line = checksummed(&head.to_string());
        let seed2 = checksummed("{\"seed\":2}");
        std::fs::write(&path, format!("{head_line}\n{{oops\n{seed2}\n")).unwrap();
        let err = Journal::open(&Mode::Resume(path.clone()), &head).unwrap_err();
        assert!(matches!(err, Error::JournalLine { line: 2, .. }), "{err:?}");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn fnv1a64_matches_the_published_test_vectors() {
        // From the FNV reference (isthe.com/chongo/tech/comp/fnv): the empty
        // string is the offset basis; "a" and "foobar" as listed there.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn a_changed_digit_or_a_valid_json_tamper_is_refused_naming_the_line() {
        let path = temp("tamper");
        let head = header("test", serde_json::json!({ "seeds": 2 }));
        let mut j = Journal::open(&Mode::Create(path.clone()), &head).unwrap();
        j.append(&serde_json::json!({ "seed": 1, "failed": false, "z": 1.25 }))
            .unwrap();
        j.append(&serde_json::json!({ "seed": 2, "failed": false, "z": -0.5 }))
            .unwrap();
        drop(j);
        let text = std::fs::read_to_string(&path).unwrap();
        let tampers = [
            // One digit of a z on line 2.
            (text.replacen("1.25", "1.35", 1), 2),
            // Valid JSON, different result, on the last line.
            (
                text.replacen(
                    "\"failed\":false,\"seed\":2",
                    "\"failed\":true,\"seed\":2",
                    1,
                ),
                3,
            ),
        ];
        for (tampered, line) in tampers {
            assert_ne!(tampered, text);
            std::fs::write(&path, &tampered).unwrap();
            let err = Journal::open(&Mode::Resume(path.clone()), &head).unwrap_err();
            let shown = err.to_string();
            assert!(
                matches!(&err, Error::JournalLine { line: l, .. } if *l == line),
                "{err:?}"
            );
            assert!(shown.contains(&path.display().to_string()), "{shown}");
            assert!(
                shown.contains(&format!("line {line}: checksum mismatch")),
                "{shown}"
            );
        }
        // A truncated last line (a kill in mid-write) is the documented
        // recovery: dropped, the file cut back, the seed run again.
        std::fs::write(&path, &text[..text.len() - 7]).unwrap();
        let mut j = Journal::open(&Mode::Resume(path.clone()), &head).unwrap();
        assert_eq!(j.take_finished().len(), 1);
        drop(j);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            text.lines()
                .take(2)
                .map(|l| format!("{l}\n"))
                .collect::<String>()
        );
        // An old journal (version 1, no checksums) is refused, saying so.
        std::fs::write(
            &path,
            "{\"journal\":\"test\",\"version\":1,\"options\":{\"seeds\":2}}\n",
        )
        .unwrap();
        let err = Journal::open(&Mode::Resume(path.clone()), &head).unwrap_err();
        assert!(
            err.to_string().contains("older dropmc (journal version 1"),
            "{err}"
        );
        std::fs::remove_file(&path).unwrap();
    }
}
