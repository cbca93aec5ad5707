//! `dropmc eval attn` and `dropmc mutants` as a user runs them.

mod common;

use common::{assert_mc_within, assert_same_len, dropmc, numbers};

use dropmc::stats::tolerance;
use serde_json::Value;

/// Roundings between the hand-written values and the crate's formula or its
/// 2³-mask enumeration: 8 terms of 3 weight factors and up to 3 divisions,
/// then `E[o²] − E[o]²` (`8 + 3 + 3 + 4 ≤ 24`), on magnitudes at most 3
/// (`E[o²] = 2.65 + 1.21 < 4`, charged as 4).
const ROW_ROUNDINGS: f64 = 24.0;

#[test]
fn eval_attn_reproduces_the_seed_case() {
    let (code, stdout, _) = dropmc(&[
        "eval",
        "attn",
        "--a",
        "0.2,0.3,0.5",
        "--p",
        "0.5",
        "--values",
        "1,-2,3",
        "--samples",
        "200000",
        "--json",
    ]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(v["quantity"], "attn");
    assert_eq!(v["d"], 3);
    // Written out by hand from the 8 equally likely masks (p/q = 1):
    // Var R = 0.04 + 0.09 + 0.25, E[o] = 0.2 − 0.6 + 1.5,
    // Var o = 0.04·1 + 0.09·4 + 0.25·9.
    let expected: [(&str, Vec<f64>); 5] = [
        ("E[b]", vec![0.2, 0.3, 0.5]),
        ("E[R]", vec![1.0]),
        ("Var[R]", vec![0.38]),
        ("E[o]", vec![1.1]),
        ("Var[o]", vec![2.65]),
    ];
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), expected.len());
    for (r, (name, want)) in results.iter().zip(&expected) {
        assert_eq!(r["name"], *name);
        // Closed form and enumeration: a few roundings on values <= 3.
        for field in ["formula", "exact"] {
            let got = numbers(&r[field]);
            assert_same_len(&format!("{name} {field}"), &[got.len()], want.len());
            for (g, w) in got.iter().zip(want) {
                assert!(
                    (g - w).abs() <= tolerance::bound(ROW_ROUNDINGS, 4.0),
                    "{name} {field} {g} vs {w}"
                );
            }
        }
        // 7 statistical assertions, recorded by tests/common.
        let (mc, se) = (numbers(&r["mc"]), numbers(&r["stderr"]));
        assert_mc_within(name, &mc, &se, want, 200_000);
    }
}

#[test]
fn eval_attn_rejects_bad_rows_and_rates() {
    for args in [
        ["--a", "0.2,0.3,0.6", "--p", "0.5"],
        ["--a", "-0.2,0.7,0.5", "--p", "0.5"],
        ["--a", "0.2,0.3,0.5", "--p", "1"],
        ["--a", "0.2,0.3,0.5", "--p", "nan"],
    ] {
        let mut full = vec!["eval", "attn"];
        full.extend(args);
        let (code, stdout, stderr) = dropmc(&full);
        assert_eq!(code, 2, "{args:?}");
        assert!(stdout.is_empty());
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
}

#[test]
fn mutants_json_lists_every_mutant_with_its_killers() {
    let (code, stdout, _) = dropmc(&["mutants", "--json", "--samples", "500"]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&stdout).expect("json");
    let mutants = v["mutants"].as_array().unwrap();
    assert!(mutants.len() >= 14);
    for m in mutants {
        assert!(m["id"].is_string() && m["mistake"].is_string());
        let killed = m["killed_by"].as_array().unwrap();
        if m["equivalent"].as_bool().unwrap() {
            assert!(killed.is_empty(), "{m}");
        } else {
            assert!(!killed.is_empty(), "{} survived", m["id"]);
            assert!(
                killed
                    .iter()
                    .all(|c| c.as_str().is_some_and(|s| s.contains('.')))
            );
        }
    }
}

#[test]
fn eval_attn_fills_exact_beyond_the_enumeration_and_skips_monte_carlo_at_zero_samples() {
    // d = 30 > 22: no enumeration, but every attention form is exact.
    let a: Vec<f64> = (0..30).map(|i| (i + 1) as f64 / 465.0).collect(); // Σ (i+1) = 465
    let text: Vec<String> = a.iter().map(|v| format!("{v}")).collect();
    let (code, stdout, stderr) = dropmc(&[
        "eval",
        "attn",
        "--a",
        &text.join(","),
        "--p",
        "0.25",
        "--samples",
        "0",
        "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    // Var R = (p/q) Σ a² = (1/3) Σ (i+1)² / 465² = (1/3) · 9455 / 216225.
    let want_var = 9455.0 / 216_225.0 / 3.0;
    for r in v["results"].as_array().unwrap() {
        assert_eq!(r["kind"], "exact", "{r}");
        assert!(!r["exact"].is_null(), "{r}");
        assert!(r["mc"].is_null() && r["stderr"].is_null(), "{r}");
        if r["name"] == "Var[R]" {
            let got = r["exact"].as_f64().unwrap();
            // The crate: 30 quotients a_i (read back exactly), their
            // squares, 29 additions, p/q and one product, all of one sign:
            // 62 roundings of the value; here two. 64 in all.
            assert!(
                common::agree_to_rounding(got, want_var, 64.0, want_var),
                "{got} vs {want_var}"
            );
        }
    }
}
