//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod family_kernels;

use dropmc::claims::{ClaimResult, Verdict};

/// Panics with the full result (parameters, z, p, MDE) when a claim fails.
pub fn assert_pass(result: &ClaimResult) {
    assert_eq!(
        result.verdict,
        Verdict::Pass,
        "claim {} failed (seed {}, {} samples): error {:?}\n target {:?}\n estimate {:?}\n tests {:?}\n oracle agrees {:?}",
        result.id,
        result.seed,
        result.samples,
        result.error,
        result.target,
        result.estimate,
        result.tests,
        result.oracle_agrees
    );
}

/// Runs the `dropmc` binary with `args`: exit code, stdout, stderr.
pub fn dropmc(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dropmc"))
        .args(args)
        .output()
        .expect("runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A JSON number or array of numbers as a vector.
pub fn numbers(v: &serde_json::Value) -> Vec<f64> {
    match v {
        serde_json::Value::Array(a) => a.iter().map(|x| x.as_f64().expect("number")).collect(),
        other => vec![other.as_f64().expect("number")],
    }
}

/// Asserts that `args` is refused by the argument parser (an unknown flag, a
/// missing argument, a count that is not a count): exit 2, nothing on
/// stdout, clap's whole message on stderr — its first line names `flag`,
/// and it ends by pointing at `--help` — no panic.
pub fn assert_usage_error(args: &[&str], flag: &str) {
    let (code, stdout, stderr) = dropmc(args);
    assert_eq!(code, 2, "{args:?}: exit {code}, stderr {stderr}");
    assert!(stdout.is_empty(), "{args:?}: printed {stdout:?}");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    let first = stderr.lines().next().unwrap_or_default();
    assert!(first.starts_with("error:"), "{args:?}: {stderr}");
    assert!(
        stderr.contains(flag),
        "{args:?}: {flag} not named in {stderr}"
    );
    assert!(
        stderr.trim_end().ends_with("try '--help'."),
        "{args:?}: {stderr}"
    );
}

/// Asserts that `args` is rejected as bad input: exit 2, nothing on stdout,
/// exactly one line on stderr, no panic.
pub fn assert_rejected(args: &[&str]) {
    let (code, stdout, stderr) = dropmc(args);
    assert_eq!(code, 2, "{args:?}: exit {code}, stderr {stderr}");
    assert_eq!(
        stderr.trim_end().lines().count(),
        1,
        "{args:?}: stderr {stderr:?}"
    );
    assert!(stdout.is_empty(), "{args:?}: printed {stdout:?}");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    assert!(stderr.starts_with("error:"), "{args:?}: {stderr}");
}
