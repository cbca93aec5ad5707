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

/// The exit status of a run that decided nothing: every claim that ran
/// passed, but some ran below their minimum budget.
pub(crate) const INCONCLUSIVE: u8 = 3;

/// Exit 0 when the run passed, 1 when it did not (bad input exits 2).
pub(crate) fn passed(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// The exit code of a report: 1 when a claim failed, else
/// [`INCONCLUSIVE`] (with one line on stderr naming the budget that would
/// decide them) when some claim ran below its minimum budget, else 0.
pub(crate) fn verdict(report: &crate::conformance::report::Report) -> ExitCode {
    if !report.passed() {
        return ExitCode::from(1);
    }
    match report.largest_missing_budget() {
        None => ExitCode::SUCCESS,
        Some(min) => {
            eprintln!("{}", inconclusive_line(report.inconclusive(), min));
            ExitCode::from(INCONCLUSIVE)
        }
    }
}

/// The line `verdict` prints when a run decided nothing for `n` claims.
pub(crate) fn inconclusive_line(n: usize, min: u64) -> String {
    let claims = if n == 1 { "claim" } else { "claims" };
    format!(
        "inconclusive: {n} {claims} below their minimum budget (the largest is {min} draws): \
         run with --samples {min} or more, or without --samples for each claim's own budget"
    )
}
