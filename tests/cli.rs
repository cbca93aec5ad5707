//! The command line as a user runs it.

mod common;

use common::{assert_mc_within, assert_rejected, assert_same_len, dropmc, numbers};

use dropmc::stats::tolerance;
use serde_json::Value;

/// Draws of `eval` when `--samples` is not given.
const DEFAULT_EVAL_SAMPLES: u64 = 1_000_000;

/// Roundings allowed between a closed form written out in a test (at most
/// four operations on the inputs) and the crate's formula or its 2³-mask
/// enumeration (8 terms, 3 weight factors each, then `E[z²] − E[z]²`):
/// `8 + 3 + 4 + 4 ≤ 24`, charged on the magnitude `|E[z²]|` the variance
/// cancels from (at most `|want| / p`, `p = 0.3`, so `4 |want|`).
const MOMENT_ROUNDINGS: f64 = 24.0;

#[test]
fn eval_moments_json_has_closed_forms_and_estimates_within_error() {
    let (code, stdout, _) = dropmc(&[
        "eval",
        "moments",
        "--x",
        "0.5,-1.2,3",
        "--p",
        "0.3",
        "--json",
    ]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(v["quantity"], "moments");
    assert_eq!(v["d"], 3);
    assert_eq!(v["p"], 0.3);
    let q: f64 = 0.7;
    let x = [0.5, -1.2, 3.0];
    // Closed forms written out here, independently of the crate.
    let expected: [(&str, Vec<f64>); 5] = [
        ("E[z]", x.to_vec()),
        ("E[z^2]", x.iter().map(|a| a * a / q).collect()),
        ("Var[z]", x.iter().map(|a| a * a * 0.3 / q).collect()),
        ("E[S]", vec![2.3]),
        ("Var[S]", vec![(0.25 + 1.44 + 9.0) * 0.3 / q]),
    ];
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), expected.len());
    for (r, (name, want)) in results.iter().zip(&expected) {
        assert_eq!(r["name"], *name);
        for field in ["formula", "exact"] {
            let got = numbers(&r[field]);
            assert_same_len(&format!("{name} {field}"), &[got.len()], want.len());
            for (g, w) in got.iter().zip(want) {
                assert!(
                    (g - w).abs() <= tolerance::bound(MOMENT_ROUNDINGS, 4.0 * w.abs()),
                    "{name} {field}: {g} vs {w}"
                );
            }
        }
        // Statistical: 11 components, recorded by tests/common.
        let (mc, se) = (numbers(&r["mc"]), numbers(&r["stderr"]));
        assert_mc_within(name, &mc, &se, want, DEFAULT_EVAL_SAMPLES);
    }
}

#[test]
fn scalars_are_numbers_and_per_unit_quantities_arrays() {
    let (_, stdout, _) = dropmc(&[
        "eval",
        "moments",
        "--x",
        "1,2",
        "--p",
        "0.5",
        "--samples",
        "1000",
        "--json",
    ]);
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert!(v["results"][0]["mc"].is_array());
    assert!(v["results"][3]["mc"].is_number());
}

#[test]
fn bad_input_exits_2_with_one_line() {
    let cases: &[&[&str]] = &[
        &["eval", "moments", "--x", "0.5,abc", "--p", "0.3"],
        &["eval", "moments", "--x", "", "--p", "0.3"],
        &["eval", "moments", "--x", "1,nan", "--p", "0.3"],
        &["eval", "moments", "--x", "1,inf", "--p", "0.3"],
        &["eval", "moments", "--x", "1", "--p", "1"],
        &["eval", "moments", "--x", "1", "--p", "-0.1"],
        &["eval", "moments", "--x", "1", "--p", "NaN"],
        &[
            "eval",
            "moments",
            "--x",
            "1",
            "--p",
            "0.2",
            "--samples",
            "1",
        ],
        &["report", "--family", "no-such-family"],
    ];
    for args in cases {
        assert_rejected(args);
    }
}

#[test]
fn argument_errors_exit_2_with_the_parsers_whole_message() {
    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "eval",
                "moments",
                "--x",
                "1",
                "--p",
                "0.2",
                "--samples",
                "-5",
            ],
            "-5",
        ),
        (&["eval", "moments", "--p", "0.2"], "--x <X>"),
        (&["eval", "nothing"], "nothing"),
        (&["--bogus"], "--bogus"),
    ];
    for (args, flag) in cases {
        common::assert_usage_error(args, flag);
    }
}

#[test]
fn list_names_every_registered_claim() {
    let (code, stdout, _) = dropmc(&["list"]);
    assert_eq!(code, 0);
    for claim in dropmc::claims::registry() {
        assert!(
            stdout.contains(claim.id()),
            "{} missing from list",
            claim.id()
        );
    }
}

#[test]
fn eval_bn_matches_the_closed_forms_exactly() {
    // rm = (1, 0), rv = (2, 1), p = 0.5: c² = 0.5 − 0.5·1/2 = 0.25 and
    // 0.5 − 0 = 0.5; folded = 0.5·2 − 0.5·1 = 0.5 and 0.5·1 = 0.5. Every
    // intermediate is a dyadic rational, so the closed forms are exact in f64.
    let (code, stdout, _) = dropmc(&[
        "eval",
        "bn",
        "--running-mean",
        "1,0",
        "--running-var",
        "2,1",
        "--p",
        "0.5",
        "--samples",
        "200000",
        "--json",
    ]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(v["quantity"], "bn");
    assert_eq!(v["d"], 2);
    let results = v["results"].as_array().unwrap();
    assert_eq!(results[0]["name"], "c");
    assert_eq!(numbers(&results[0]["formula"]), vec![0.5, 0.5f64.sqrt()]);
    assert_eq!(results[1]["name"], "folded_running_var");
    assert_eq!(numbers(&results[1]["formula"]), vec![0.5, 0.5]);
    // The Monte Carlo check agrees with the closed forms (4 assertions,
    // recorded by tests/common).
    for r in results {
        let (f, mc, se) = (
            numbers(&r["formula"]),
            numbers(&r["mc"]),
            numbers(&r["stderr"]),
        );
        assert_same_len("eval bn", &[f.len()], 2);
        assert_mc_within(&r["name"].to_string(), &mc, &se, &f, 200_000);
    }
}

#[test]
fn eval_bn_rejects_mismatched_buffers_on_one_line() {
    let (code, stdout, stderr) = dropmc(&[
        "eval",
        "bn",
        "--running-mean",
        "1",
        "--running-var",
        "2,1",
        "--p",
        "0.5",
    ]);
    assert_eq!(code, 2);
    assert!(stdout.is_empty());
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn stack_prints_a_table_and_json() {
    let (code, stdout, _) = dropmc(&["stack", "--depth", "2", "--p", "0.5", "--replicates", "2"]);
    assert_eq!(code, 0);
    assert!(stdout.contains("dropout->BN"), "{stdout}");
    let (code, stdout, _) = dropmc(&[
        "stack",
        "--depth",
        "2",
        "--p",
        "0.5",
        "--replicates",
        "2",
        "--json",
    ]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&stdout).expect("json");
    // p = 0 is added as the null.
    assert_eq!(v["rates"].as_array().unwrap().len(), 2);
    assert_eq!(v["rates"][1]["p"], 0.5);
    let (code, _, stderr) = dropmc(&["stack", "--p", "1.5"]);
    assert_eq!(code, 2);
    assert_eq!(stderr.lines().count(), 1);
}
