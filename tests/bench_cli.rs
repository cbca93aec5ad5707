//! `dropmc bench` as a user runs it (no timing is asserted).

mod common;

use common::dropmc;

use serde_json::Value;

#[test]
fn bench_json_reports_both_paths_for_every_workload() {
    let (code, stdout, stderr) = dropmc(&["bench", "--masks", "3000", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let v: Value = serde_json::from_str(&stdout).expect("json");
    let rows = v["results"].as_array().expect("results");
    assert_eq!(rows.len(), 6);
    for (row, (w, path)) in rows.iter().zip([
        ("W1", "reference"),
        ("W1", "fast"),
        ("W2", "reference"),
        ("W2", "fast"),
        ("W3", "reference"),
        ("W3", "fast"),
    ]) {
        assert_eq!(row["workload"], w);
        assert_eq!(row["path"], path);
        let masks = row["masks"].as_u64().unwrap();
        let width = match w {
            "W1" => 512,
            "W2" => 4096,
            _ => 128,
        };
        assert_eq!(row["elements"].as_u64().unwrap(), masks * width);
        assert!(row["elements_per_second"].as_f64().unwrap() > 0.0);
    }
    // The reference runs a tenth of the masks by default.
    assert_eq!(rows[0]["masks"], 300);
    assert_eq!(rows[1]["masks"], 3000);
}

#[test]
fn bench_one_workload_as_text() {
    let (code, stdout, _) = dropmc(&[
        "bench",
        "--workload",
        "W3",
        "--masks",
        "2000",
        "--reference-masks",
        "100",
    ]);
    assert_eq!(code, 0);
    assert!(stdout.contains("W3  fast"), "{stdout}");
    assert!(stdout.contains("mask elements/s"), "{stdout}");
    assert!(!stdout.contains("W1"), "{stdout}");
}

#[test]
fn bench_bad_input_exits_2_with_the_parsers_message() {
    // Too few masks is the library's refusal: one line.
    common::assert_rejected(&["bench", "--masks", "1"]);
    for (args, flag) in [
        (&["bench", "--workload", "W9"][..], "--workload"),
        (&["bench", "--masks", "-5"][..], "-5"),
    ] {
        common::assert_usage_error(args, flag);
    }
}
