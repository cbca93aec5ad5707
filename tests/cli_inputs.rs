//! Issue 44's hostile command lines: each refused with exit 2 and a message
//! naming its argument and the real limit, before any computing; bare
//! `dropmc` says what it runs before it runs it.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::dropmc;

#[test]
fn a_count_beyond_u64_is_called_too_large_not_fractional() {
    let (code, _, stderr) = dropmc(&["report", "--samples", "1e30"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--samples"), "{stderr}");
    assert!(stderr.contains("too large"), "{stderr}");
    assert!(!stderr.contains("not a whole number"), "{stderr}");
    // Digits alone beyond u64 too; a fraction is still not whole.
    let (_, _, stderr) = dropmc(&["report", "--samples", "99999999999999999999999"]);
    assert!(stderr.contains("too large"), "{stderr}");
    let (_, _, stderr) = dropmc(&["report", "--samples", "1.5"]);
    assert!(stderr.contains("not a whole number"), "{stderr}");
}

#[test]
fn the_stack_depth_limit_stated_is_the_real_one() {
    let (code, _, stderr) = dropmc(&["stack", "--depth", "100000"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("depth"), "{stderr}");
    assert!(stderr.contains("limit 64"), "{stderr}");
    assert!(!stderr.contains("1024"), "{stderr}");
}

#[test]
fn a_negative_seed_is_refused_naming_the_seed() {
    let (code, _, stderr) = dropmc(&["report", "--seed", "-1"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--seed"), "{stderr}");
    assert!(stderr.contains("-1"), "{stderr}");
    assert!(!stderr.contains("unexpected argument"), "{stderr}");
}

#[test]
fn an_unwritable_journal_fails_before_computing() {
    let start = std::time::Instant::now();
    let (code, _, stderr) = dropmc(&[
        "calibrate",
        "--seeds",
        "200",
        "--out",
        "/nonexistent-dir-of-dropmc/journal.jsonl",
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--out"), "{stderr}");
    // 200 seeds of the whole registry take many minutes; a refusal before
    // computing takes well under one.
    assert!(start.elapsed().as_secs() < 30, "{:?}", start.elapsed());
}

#[test]
fn bare_dropmc_first_says_what_it_runs_and_where_help_is() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_dropmc"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("dropmc starts");
    let mut first = String::new();
    let stderr = child.stderr.take().expect("piped stderr");
    BufReader::new(stderr)
        .read_line(&mut first)
        .expect("a first line on stderr");
    child.kill().expect("the report is stopped");
    let _ = child.wait();
    assert!(first.contains("report"), "{first}");
    assert!(first.contains("minute"), "{first}");
    assert!(first.contains("dropmc --help"), "{first}");
}
