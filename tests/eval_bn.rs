//! `eval bn` judges each channel on its own (issue 23): a channel whose fold
//! `q·rv − p·rm² ≤ 0` (finite-batch noise in torch-trained buffers does
//! this) is reported by index with the reason, the other channels keep
//! their `c` and folded value, and the run exits 0; bad input still exits 2.

mod common;

use common::{assert_mc_within, assert_rejected, dropmc, numbers};
use serde_json::Value;

fn eval_bn_json(mean: &str, var: &str, p: &str, samples: &str) -> Value {
    let (code, stdout, stderr) = dropmc(&[
        "eval",
        "bn",
        "--running-mean",
        mean,
        "--running-var",
        var,
        "--p",
        p,
        "--samples",
        samples,
        "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    serde_json::from_str(&stdout).expect("json")
}

#[test]
fn the_issues_torch_buffers_fold_channel_0_and_flag_channel_1() {
    // Channel 1 of the issue: p·rm²/(q·rv) = 0.3·3.323²/(0.7·4.360) ≈ 1.09,
    // so q·rv − p·rm² < 0; channel 0 has rm = 0: c² = q, fold = q·rv.
    let (rm1, rv1) = (3.32297881003279_f64, 4.359777602783974_f64);
    let q = 1.0 - 0.3_f64;
    let fold1 = q * rv1 - 0.3 * rm1 * rm1;
    assert!(fold1 < 0.0, "the repro must have no fold: {fold1}");
    let samples = 20_000;
    let v = eval_bn_json(
        "0.0,3.32297881003279",
        "1.43,4.359777602783974",
        "0.3",
        &samples.to_string(),
    );
    assert_eq!(v["d"], 2);
    let channels = v["channels"].as_array().expect("channels");
    assert_eq!(channels.len(), 2);
    assert_eq!(channels[0]["channel"], 0);
    assert_eq!(channels[0]["status"], "folded");
    assert!(channels[0].get("reason").is_none());
    assert_eq!(channels[1]["channel"], 1);
    assert_eq!(channels[1]["status"], "no_fold");
    let reason = channels[1]["reason"].as_str().expect("reason");
    assert!(reason.starts_with("channel 1: "), "{reason}");
    assert!(reason.contains(&format!("= {fold1} <= 0")), "{reason}");
    assert!(reason.contains("finite"), "{reason}");
    assert!(reason.contains("no folded value"), "{reason}");
    let results = v["results"].as_array().unwrap();
    let want = [("c", q.sqrt()), ("folded_running_var", q * 1.43)];
    for (r, (name, value)) in results.iter().zip(want) {
        assert_eq!(r["name"], name);
        assert_eq!(r["units"], serde_json::json!([0]), "{name}");
        assert_eq!(numbers(&r["formula"]), vec![value], "{name}");
        assert_mc_within(
            name,
            &numbers(&r["mc"]),
            &numbers(&r["stderr"]),
            &[value],
            samples,
        );
    }
}

#[test]
fn the_table_names_the_channel_without_a_fold_and_exits_0() {
    let (code, stdout, stderr) = dropmc(&[
        "eval",
        "bn",
        "--running-mean",
        "0.0,3.32297881003279",
        "--running-var",
        "1.43,4.359777602783974",
        "--p",
        "0.3",
        "--samples",
        "0",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("c[0]"), "{stdout}");
    assert!(!stdout.contains("c[1]"), "{stdout}");
    assert!(stdout.contains("channel 1: fold"), "{stdout}");
}

#[test]
fn a_later_channel_keeps_its_own_index_and_exact_values() {
    // rm = (2, 1), rv = (1, 2), p = 1/2: channel 0 folds to 0.5·1 − 0.5·4 =
    // −1.5 (none); channel 1: c² = 0.5 − 0.5·1/2 = 1/4, fold = 0.5·2 − 0.5 =
    // 1/2, all dyadic, so exact in f64.
    let v = eval_bn_json("2,1", "1,2", "0.5", "0");
    assert_eq!(v["channels"][0]["status"], "no_fold");
    assert_eq!(v["channels"][1]["status"], "folded");
    let results = v["results"].as_array().unwrap();
    assert_eq!(results[0]["units"], serde_json::json!([1]));
    assert_eq!(numbers(&results[0]["formula"]), vec![0.5]);
    assert_eq!(numbers(&results[1]["formula"]), vec![0.5]);
    assert!(results[0]["mc"].is_null());
}

#[test]
fn no_channel_with_a_fold_is_a_report_not_an_error() {
    let v = eval_bn_json("10", "1", "0.5", "1000");
    assert_eq!(v["channels"][0]["status"], "no_fold");
    assert_eq!(v["samples"], 0, "nothing to sample");
    for r in v["results"].as_array().unwrap() {
        assert!(numbers(&r["formula"]).is_empty());
    }
}

#[test]
fn bad_buffers_and_rates_still_exit_2_on_one_line() {
    let base = ["eval", "bn", "--samples", "4"];
    for (mean, var, p) in [
        ("0,nan", "1,1", "0.3"),
        ("0,1", "1,-1", "0.3"),
        ("0,1", "1,0", "0.3"),
        ("0,1", "1", "0.3"),
        ("0,1", "1,1", "1"),
        ("0,1", "1,1", "-0.1"),
        ("0,1e200", "1,1", "0.3"),
    ] {
        let mut args = base.to_vec();
        args.extend(["--running-mean", mean, "--running-var", var, "--p", p]);
        assert_rejected(&args);
    }
}
