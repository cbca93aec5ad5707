//! The one way a command prints its result: a table for people, JSON for
//! programs, and the exit code that says whether the run passed.

use std::process::ExitCode;

use serde::Serialize;

/// Prints `value` as pretty JSON when `json`, else the text `table()`
/// renders.
pub(crate) fn emit<T: Serialize + ?Sized>(json: bool, value: &T, table: impl FnOnce() -> String) {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(value).unwrap_or_default()
        );
    } else {
        print!("{}", table());
    }
}

/// Exit 0 when the run passed, 1 when it did not (bad input exits 2).
pub(crate) fn passed(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
