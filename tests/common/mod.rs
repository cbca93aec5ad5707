//! Helpers shared by the integration tests, and the recorder of the
//! suite's statistical assertions.
//!
//! # The counted budget
//!
//! Every statistical assertion of `tests/` goes through one of the helpers
//! below ([`assert_pass`], [`assert_consistent`], [`assert_positive`],
//! [`assert_same`], [`assert_not_rejected`], or [`record`] for an assertion
//! made elsewhere, such as a calibration run). Each call adds its count and
//! its size (in multiples of the per-assertion α, see
//! [`dropmc::stats::Statistic::size_factor`]) to a record of the running
//! test binary, rewritten at every assertion to
//! `$CARGO_TARGET_TMPDIR/assertions/<test file>.json` together with the
//! binary's path and modification time and whether the run was filtered.
//! `tests/zz_budget.rs`, which cargo runs after every other test binary
//! (binaries run in name order), sums the records and checks them against
//! [`dropmc::stats::SUITE_ASSERTION_BUDGET`]; it refuses records written by
//! an older build of their binary, records of filtered runs, and a test
//! file that calls a helper but has no record.
#![allow(dead_code)]

pub mod family_kernels;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

use dropmc::claims::{ClaimResult, Verdict};
use dropmc::stats::{
    Estimate, MEAN_SIZE_FACTOR, Statistic, ZTest, assertion_alpha, critical_value_at,
};

/// Per test function: assertions and their size in units of α.
static RECORD: Mutex<BTreeMap<String, (u64, f64)>> = Mutex::new(BTreeMap::new());

/// The folder the records go to (shared by every test binary of a build).
pub fn records_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("assertions")
}

/// True when libtest was asked to run a subset (a name filter or `--skip`).
fn filtered() -> bool {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let with_value = [
        "--skip",
        "--test-threads",
        "--format",
        "--color",
        "-Z",
        "--logfile",
        "--report-time",
        "--shuffle-seed",
    ];
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a == "--skip" || a == "--exact" {
            return true;
        }
        if with_value.contains(&a.as_str()) {
            i += 2;
            continue;
        }
        if !a.starts_with('-') {
            return true;
        }
        i += 1;
    }
    false
}

/// Records `count` statistical assertions of the running test, each
/// spending `size_factor` times the per-assertion level.
pub fn record(count: u64, size_factor: f64) {
    let test = std::thread::current().name().unwrap_or("main").to_string();
    let mut map = RECORD.lock().unwrap_or_else(|e| e.into_inner());
    let entry = map.entry(test).or_insert((0, 0.0));
    entry.0 += count;
    entry.1 += count as f64 * size_factor;
    let exe = std::env::current_exe().expect("test binary path");
    let modified = std::fs::metadata(&exe)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    let tests: BTreeMap<&String, serde_json::Value> = map
        .iter()
        .map(|(k, (n, w))| (k, serde_json::json!({ "assertions": n, "size": w })))
        .collect();
    let body = serde_json::json!({
        "test_file": env!("CARGO_CRATE_NAME"),
        "exe": exe.to_string_lossy(),
        "exe_modified_ns": modified.to_string(),
        "filtered": filtered(),
        "tests": tests,
    });
    let dir = records_dir();
    std::fs::create_dir_all(&dir).expect("records folder");
    let path = dir.join(format!("{}.json", env!("CARGO_CRATE_NAME")));
    let tmp = dir.join(format!(
        "{}.json.{}",
        env!("CARGO_CRATE_NAME"),
        std::process::id()
    ));
    std::fs::write(&tmp, body.to_string()).expect("write record");
    std::fs::rename(&tmp, &path).expect("move record");
}

/// Asserts a mean estimate is consistent with `target` (two-sided
/// Student-t at the estimate's degrees of freedom); one assertion.
pub fn assert_consistent(what: &str, estimate: Estimate, target: f64) {
    let statistic = Statistic::default();
    record(1, statistic.size_factor());
    let t = statistic.test(estimate, target);
    assert!(
        !t.rejected,
        "{what}: estimate {estimate:?} vs target {target}: z = {} (critical {})",
        t.z, t.critical
    );
}

/// Asserts a test made elsewhere did not reject; one assertion of size
/// `size_factor` α.
pub fn assert_not_rejected(what: &str, test: ZTest, size_factor: f64) {
    record(1, size_factor);
    assert!(!test.rejected, "{what}: {test:?}");
}

/// Asserts `estimate` is above zero by the one-sided Student-t test at the
/// per-assertion level; one assertion.
pub fn assert_positive(what: &str, estimate: Estimate) {
    record(1, MEAN_SIZE_FACTOR);
    let critical = critical_value_at(2.0 * assertion_alpha(), estimate.dof);
    let t = estimate.value / estimate.stderr;
    assert!(
        t > critical,
        "{what}: {} ± {} (t = {t:.2}, one-sided critical {critical:.2} at {} dof)",
        estimate.value,
        estimate.stderr,
        estimate.dof
    );
}

/// Asserts two independent estimates of the same expectation agree: the
/// difference over `√(se_a² + se_b²)` with the smaller of the two degrees
/// of freedom (conservative for Welch's); one assertion.
pub fn assert_same(what: &str, a: Estimate, b: Estimate) {
    let difference = Estimate {
        value: a.value - b.value,
        stderr: (a.stderr * a.stderr + b.stderr * b.stderr).sqrt(),
        n: a.n.min(b.n),
        dof: a.dof.min(b.dof),
    };
    assert_consistent(what, difference, 0.0);
}

/// Asserts `count` successes in `trials` Bernoulli trials are consistent
/// with success probability `p0` (exact two-sided binomial test); one
/// assertion.
pub fn assert_count(what: &str, count: u64, trials: u64, p0: f64) {
    record(1, 1.0);
    let t = dropmc::stats::proportion_test(count as f64 / trials as f64, trials, p0);
    assert!(
        !t.rejected,
        "{what}: {count} of {trials} vs p0 = {p0}: {t:?}"
    );
}

/// Panics with the full result (parameters, z, p, MDE) when a claim does
/// not pass; records one assertion per component at its test's size.
pub fn assert_pass(result: &ClaimResult) {
    record(
        result.tests.len().max(1) as u64,
        result.statistic.size_factor(),
    );
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
/// Whether two computations of one closed form agree to rounding: each is
/// within `roundings` roundings of terms whose absolute values sum to
/// `magnitude` (Higham's `γ_n Σ |t_i|`, [`dropmc::stats::tolerance::bound`]), so
/// they differ by at most twice that. The caller states the count.
pub fn agree_to_rounding(a: f64, b: f64, roundings: f64, magnitude: f64) -> bool {
    (a - b).abs() <= 2.0 * dropmc::stats::tolerance::bound(roundings, magnitude)
}

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

/// Asserts each Monte Carlo component `mc[k] ± se[k]` of an `eval` output
/// made from `samples` draws agrees with `want[k]` (Student-t at `samples −
/// 1` degrees of freedom), after checking the three have the same length;
/// one assertion per component.
pub fn assert_mc_within(what: &str, mc: &[f64], se: &[f64], want: &[f64], samples: u64) {
    assert_same_len(what, &[mc.len(), se.len()], want.len());
    for k in 0..want.len() {
        let estimate = Estimate {
            value: mc[k],
            stderr: se[k],
            n: samples,
            dof: dropmc::stats::per_draw_dof(samples),
        };
        assert_consistent(&format!("{what}[{k}]"), estimate, want[k]);
    }
}

/// Asserts every length in `got` is `expected` (before zipping, so that an
/// empty or short array cannot pass a loop vacuously).
pub fn assert_same_len(what: &str, got: &[usize], expected: usize) {
    for &n in got {
        assert_eq!(
            n, expected,
            "{what}: {n} values where {expected} were expected"
        );
    }
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

/// The `dropmc` binary as a command whose child starts with SIGINT at its
/// default action. A harness started in the background by a
/// non-interactive shell (`cargo test &`) inherits SIGINT *ignored*, and
/// `exec` keeps an ignored signal ignored: the Ctrl-C tests would then wait
/// for a signal their child never receives and fail whatever the binary
/// does. The disposition is what a user's terminal gives, set explicitly.
#[cfg(unix)]
pub fn binary_with_default_sigint() -> std::process::Command {
    use std::os::unix::process::CommandExt;
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_dropmc"));
    // SAFETY: runs in the forked child before exec; `signal` is
    // async-signal-safe and touches only the child's own disposition.
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    command
}

/// Runs `dropmc args`, sends SIGINT after `after`, and returns how long
/// the process took to end after it (at most a little over 5 s: then it
/// is killed).
#[cfg(unix)]
pub fn stopped_after_sigint(args: &[&str], after: std::time::Duration) -> std::time::Duration {
    use std::time::Instant;
    let mut child = binary_with_default_sigint()
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("runs");
    std::thread::sleep(after);
    assert!(child.try_wait().unwrap().is_none(), "{args:?} ended early");
    let sent = Instant::now();
    // SAFETY: sends SIGINT to the child this test spawned and still owns.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGINT);
    }
    loop {
        if child.try_wait().unwrap().is_some() {
            return sent.elapsed();
        }
        if sent.elapsed() > std::time::Duration::from_secs(5) {
            let _ = child.kill();
            let _ = child.wait();
            return sent.elapsed();
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}
