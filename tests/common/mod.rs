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
