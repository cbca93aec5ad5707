//! The suite stays within its declared false-alarm budget, by count.
//!
//! Every statistical assertion of `tests/` goes through a helper of
//! `tests/common` (`assert_pass`, `assert_consistent`, `assert_positive`,
//! `assert_same`, `assert_count`, `assert_mc_within`, `record`), which adds
//! it, with its size in multiples of the per-assertion α, to a record of its
//! test binary under `$CARGO_TARGET_TMPDIR/assertions/`. This file sums the
//! records, so a new test file is counted without editing anything here.
//!
//! # Why the name
//!
//! Cargo runs the integration-test binaries one after another in name
//! order; `zz_` puts this one last, after every binary whose record it
//! reads. Run alone (`cargo test --test zz_budget`) it reads the records of
//! the last run of each binary, and refuses, with the command that fixes it:
//! * a record written by an older build of its binary (the binary was
//!   rebuilt but not run since);
//! * a record of a filtered run (a name filter or `--skip`), which counts
//!   only part of its file;
//! * a test file that calls a recording helper but has no record at all.
//!
//! `tests/frameworks_*.rs` run only with `--features candle,burn`; their
//! records are summed when present and fresh, and not required.
//! `tests/mutants.rs` makes no assertion that can fail by chance: kills are
//! expected rejections.

use std::path::{Path, PathBuf};

use dropmc::Registry;
use dropmc::stats::{FAMILY_ALPHA, SUITE_ASSERTION_BUDGET, assertion_alpha, critical_z};
use serde_json::Value;

mod common;

/// Helper calls that make a test file's record required.
const RECORDING_HELPERS: [&str; 8] = [
    "assert_pass(",
    "assert_consistent",
    "assert_positive(",
    "assert_same(",
    "assert_count(",
    "assert_mc_within(",
    "assert_not_rejected(",
    "common::record(",
];

/// Files that run only under optional features.
fn optional(name: &str) -> bool {
    name.starts_with("frameworks_")
}

/// One binary's record, checked for freshness.
struct Record {
    file: String,
    assertions: u64,
    size: f64,
    problem: Option<String>,
}

fn modified_ns(path: &Path) -> Option<u128> {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos())
}

fn read_record(path: &Path) -> Record {
    let file = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let (mut assertions, mut size) = (0, 0.0);
    if let Some(tests) = v["tests"].as_object() {
        for t in tests.values() {
            assertions += t["assertions"].as_u64().unwrap_or(0);
            size += t["size"].as_f64().unwrap_or(0.0);
        }
    }
    let exe = PathBuf::from(v["exe"].as_str().unwrap_or(""));
    let recorded: Option<u128> = v["exe_modified_ns"].as_str().and_then(|s| s.parse().ok());
    let rerun = format!("cargo test --release --test {file}");
    let problem = if v.is_null() {
        Some(format!(
            "unreadable record {}; run `{rerun}`",
            path.display()
        ))
    } else if v["filtered"].as_bool() != Some(false) {
        Some(format!(
            "the last run of tests/{file}.rs was filtered, so its record counts part of the file; run `{rerun}`"
        ))
    } else if modified_ns(&exe).is_none() || modified_ns(&exe) != recorded {
        Some(format!(
            "tests/{file}.rs was rebuilt (or its binary removed) since its record was written; run `{rerun}`"
        ))
    } else {
        None
    };
    Record {
        file,
        assertions,
        size,
        problem,
    }
}

/// Test files (by stem) whose source calls a recording helper.
fn files_that_record() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).expect("tests folder").flatten() {
        let path = entry.path();
        let Some(stem) = path.file_stem().map(|s| s.to_string_lossy().into_owned()) else {
            continue;
        };
        if path.extension().is_none_or(|e| e != "rs") || stem == "zz_budget" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        if RECORDING_HELPERS.iter().any(|h| text.contains(h)) {
            names.push(stem);
        }
    }
    names.sort();
    names
}

#[test]
fn the_suite_makes_no_more_assertions_than_its_budget() {
    let dir = common::records_dir();
    let records: Vec<Record> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "json"))
                .map(|p| read_record(&p))
                .collect()
        })
        .unwrap_or_default();
    let mut problems: Vec<String> = Vec::new();
    for name in files_that_record() {
        match records.iter().find(|r| r.file == name) {
            None if !optional(&name) => problems.push(format!(
                "tests/{name}.rs records statistical assertions but has no record in {}; run `cargo test --release` (the whole suite) or `cargo test --release --test {name}` first",
                dir.display()
            )),
            Some(r) if !optional(&name) => problems.extend(r.problem.clone()),
            _ => {}
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let counted: Vec<&Record> = records.iter().filter(|r| r.problem.is_none()).collect();
    let assertions: u64 = counted.iter().map(|r| r.assertions).sum();
    let size: f64 = counted.iter().map(|r| r.size).sum();
    let table: String = counted
        .iter()
        .map(|r| {
            format!(
                "  tests/{}.rs: {} assertions, size {} α\n",
                r.file, r.assertions, r.size
            )
        })
        .collect();
    // Each mean assertion may spend twice α (its leading-order size bound),
    // an exact binomial test α; the union bound over the recorded sizes must
    // stay within the family rate.
    assert!(
        size <= SUITE_ASSERTION_BUDGET as f64,
        "recorded size {size} α ({assertions} assertions) exceeds the budget of {SUITE_ASSERTION_BUDGET}:\n{table}"
    );
    assert!(size * assertion_alpha() <= FAMILY_ALPHA, "{table}");
    // The registry is counted: the report snapshot's assert_pass records one
    // assertion per component of every claim of the default registry.
    let components: u64 = Registry::default()
        .claims()
        .iter()
        .map(|c| c.analytic().map_or(1, |a| a.len().max(1)) as u64)
        .sum();
    assert!(
        counted
            .iter()
            .any(|r| r.file == "report_snapshot" && r.assertions == components),
        "the registry's {components} claim components were not all recorded:\n{table}"
    );
    println!("{assertions} statistical assertions, size {size} α:\n{table}");
}

#[test]
fn the_critical_value_matches_the_normal_table() {
    // Φ⁻¹(1 − 5·10⁻¹¹) = 6.466951 by Python's statistics.NormalDist, an
    // implementation independent of statrs.
    // Seven significant digits: within half a unit of the last, 5·10⁻⁷.
    const HALF_LAST_DIGIT: f64 = 5e-7;
    assert!(
        (critical_z() - 6.466951).abs() <= HALF_LAST_DIGIT,
        "critical z = {}",
        critical_z()
    );
}
