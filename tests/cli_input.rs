//! What the command line accepts and how it refuses: clap's whole message
//! on argument errors, counts written as `1e6`, lists from files, ε by
//! framework name. No statistical assertion: every check is exact.

mod common;

use common::{assert_usage_error, dropmc};
use serde_json::Value;

#[test]
fn a_missing_argument_is_named() {
    assert_usage_error(&["eval", "moments", "--x", "1,2,3"], "--p <P>");
}

#[test]
fn a_misspelt_flag_gets_the_suggestion() {
    let (_, _, stderr) = dropmc(&["report", "--sample", "10"]);
    assert!(
        stderr.contains("a similar argument exists: '--samples'"),
        "{stderr}"
    );
    assert_usage_error(&["report", "--sample", "10"], "--sample");
}

#[test]
fn a_negative_seed_is_refused_with_the_accepted_forms() {
    let (_, _, stderr) = dropmc(&["report", "--seed=-1"]);
    assert!(stderr.contains("1e6"), "{stderr}");
    assert_usage_error(&["report", "--seed=-1"], "--seed");
}

fn eval_json(args: &[&str]) -> Value {
    let (code, stdout, stderr) = dropmc(args);
    assert_eq!(code, 0, "{args:?}: {stderr}");
    serde_json::from_str(&stdout).expect("JSON")
}

/// `dropmc eval QUANTITY --x X --p P --json` with `extra` flags.
fn eval_x(quantity: &str, x: &str, p: &str, extra: &[&str]) -> Value {
    let mut args = vec!["eval", quantity, "--x", x, "--p", p, "--json"];
    args.extend_from_slice(extra);
    eval_json(&args)
}

#[test]
fn counts_in_scientific_notation_are_the_same_count() {
    let plain = eval_x("moments", "1,2", "0.2", &["--samples", "3000"]);
    let sci = eval_x("moments", "1,2", "0.2", &["--samples", "3e3"]);
    assert_eq!(plain["samples"], 3000);
    // Same count, same seed: the same bits.
    assert_eq!(plain, sci);
}

#[test]
fn a_list_from_a_file_is_the_same_list() {
    let path = std::env::temp_dir().join(format!("dropmc-cli-x-{}.txt", std::process::id()));
    std::fs::write(&path, "0.5\n-1.25 2\n3,4\n").unwrap();
    let file = format!("@{}", path.display());
    let inline = eval_x("ln", "0.5,-1.25,2,3,4", "0.1", &["--samples", "2000"]);
    let from_file = eval_x("ln", &file, "0.1", &["--samples", "2000"]);
    std::fs::remove_file(&path).unwrap();
    assert_eq!(inline["d"], 5);
    assert_eq!(inline, from_file);
}

#[test]
fn a_missing_list_file_is_one_line_naming_the_flag() {
    common::assert_rejected(&[
        "eval",
        "ln",
        "--x",
        "@/nonexistent/dropmc-x.txt",
        "--p",
        "0.1",
    ]);
    let (_, _, stderr) = dropmc(&[
        "eval",
        "ln",
        "--x",
        "@/nonexistent/dropmc-x.txt",
        "--p",
        "0.1",
    ]);
    assert!(stderr.contains("--x"), "{stderr}");
}

#[test]
fn eps_by_framework_name_is_that_eps() {
    let named = eval_x(
        "ln",
        "1,2,4",
        "0.1",
        &["--eps", "torch", "--samples", "2000"],
    );
    let number = eval_x(
        "ln",
        "1,2,4",
        "0.1",
        &["--eps", "1e-5", "--samples", "2000"],
    );
    assert_eq!(named, number);
}

#[test]
fn list_fits_the_width_and_speaks_json() {
    for columns in ["120", "80"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_dropmc"))
            .arg("list")
            .env("COLUMNS", columns)
            .output()
            .expect("runs");
        let text = String::from_utf8_lossy(&out.stdout);
        let widest = text.lines().map(|l| l.chars().count()).max().unwrap_or(0);
        assert!(
            widest <= columns.parse().unwrap(),
            "COLUMNS={columns}: {widest}\n{text}"
        );
    }
    let (code, stdout, _) = dropmc(&["list", "--json"]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&stdout).expect("JSON");
    let ids: Vec<&str> = v["claims"]
        .as_array()
        .expect("claims")
        .iter()
        .map(|c| c["id"].as_str().expect("id"))
        .collect();
    let registry: Vec<&str> = dropmc::claims::registry().iter().map(|c| c.id()).collect();
    assert_eq!(ids, registry);
}

#[test]
fn the_report_fits_the_width_and_wide_does_not() {
    let run = |extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_dropmc"))
            .args(["report", "--family", "layernorm", "--samples", "4000"])
            .args(extra)
            .env("COLUMNS", "120")
            .output()
            .expect("runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let widest = |text: &str| text.lines().map(|l| l.chars().count()).max().unwrap_or(0);
    let fitted = run(&[]);
    assert!(widest(&fitted) <= 120, "{fitted}");
    // The formula moved to its own line, and nothing was lost.
    assert!(fitted.contains("\n    E[M] = mu\n"), "{fitted}");
    let wide = run(&["--wide"]);
    assert!(widest(&wide) > 120, "{wide}");
}
