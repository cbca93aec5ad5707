//! Inputs `eval` accepts that a framework produces: a float32 softmax row
//! (its sum is 1 only to float32 rounding). No statistical assertion.

use dropmc::engine::Budget;
use dropmc::eval::attn::{attn, float32_row_sum_slack};

/// A softmax computed in float32 the way a framework does it: subtract the
/// max, exponentiate, sum in order, divide.
fn float32_softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f32> = logits.iter().map(|l| (l - max).exp()).collect();
    let s: f32 = e.iter().sum();
    e.iter().map(|v| f64::from(v / s)).collect()
}

#[test]
fn float32_softmax_rows_are_accepted_and_renormalised() {
    let mut off_by_rounding = 0;
    for d in [3usize, 17, 128, 1000] {
        let logits: Vec<f32> = (0..d)
            .map(|i| ((i * 37 % 11) as f32) * 0.37 - 1.5)
            .collect();
        let a = float32_softmax(&logits);
        let total: f64 = a.iter().sum();
        // The derived bound covers the row actually produced.
        assert!(
            (total - 1.0).abs() <= float32_row_sum_slack(d),
            "d = {d}: {total}"
        );
        let out = attn(&a, 0.1, None, Budget::new(200, 1).unwrap()).expect("accepted");
        let warned = out.results.iter().any(|r| !r.warnings.is_empty());
        assert_eq!(warned, total != 1.0, "d = {d}: sum {total}");
        off_by_rounding += usize::from(total != 1.0);
    }
    // The test exercises the renormalisation at least once.
    assert!(off_by_rounding > 0);
}

#[test]
fn a_row_off_by_more_than_rounding_is_refused() {
    let d = 128;
    let mut a = vec![1.0 / d as f64; d];
    a[0] += 2.0 * float32_row_sum_slack(d);
    let err = attn(&a, 0.1, None, Budget::new(200, 1).unwrap()).unwrap_err();
    assert!(err.to_string().contains("--a sums to"), "{err}");
    assert!(
        matches!(err, dropmc::Error::InvalidOption { .. }),
        "{err:?}"
    );
}

/// The progress observer sees the draws of `eval ln`'s kernels and changes
/// no bit of the output (no statistical assertion).
#[test]
fn observing_progress_changes_nothing() {
    use dropmc::eval::LayerNormParams;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    let x: Vec<f64> = (0..40).map(|k| (k as f64 * 0.37).sin() + 0.3).collect();
    let budget = Budget::new(300_000, 3).unwrap();
    let plain = dropmc::eval::norm::ln(&x, 0.2, LayerNormParams::plain(1e-5), budget).unwrap();
    let last = Arc::new(AtomicU64::new(0));
    let seen = Arc::clone(&last);
    let observed = dropmc::ops::fast::observe_progress(
        Box::new(move |done, total| {
            assert!(done <= total);
            seen.store(done, Ordering::Relaxed);
        }),
        || dropmc::eval::norm::ln(&x, 0.2, LayerNormParams::plain(1e-5), budget).unwrap(),
    );
    assert_eq!(plain, observed);
    assert_eq!(last.load(Ordering::Relaxed), budget.samples);
}

mod common;

use common::{agree_to_rounding, dropmc};
use dropmc::eval::{EvalOutput, EvalResult, Values, quantities, range};
use dropmc::exact::CLOSED_FORM_ROUNDINGS;
use serde_json::Value;

fn json(args: &[&str]) -> Value {
    let (code, stdout, stderr) = dropmc(args);
    assert_eq!(code, 0, "{args:?}: {stderr}");
    serde_json::from_str(&stdout).expect("json")
}

fn result<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {v}"))
}

#[test]
fn run_args_prints_the_same_json_as_the_command_line() {
    let flags = ["--x", "1,2,4,-1", "--p", "0.3", "--eps", "torch"];
    let flags: Vec<&str> = flags
        .iter()
        .copied()
        .chain(["--samples", "2000", "--seed", "7"])
        .collect();
    let ln = quantities().into_iter().find(|q| q.name() == "ln").unwrap();
    let owned: Vec<String> = flags.iter().map(|s| s.to_string()).collect();
    let library = serde_json::to_string_pretty(&ln.run_args(&owned).unwrap()).unwrap();
    let mut cli = vec!["eval", "ln"];
    cli.extend(&flags);
    cli.push("--json");
    let (code, stdout, stderr) = dropmc(&cli);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.trim_end(), library);
    // A clap error is a typed error with clap's whole message.
    let err = ln
        .run_args(&["--x".to_string(), "1,2".to_string()])
        .unwrap_err();
    match err {
        dropmc::Error::Usage { message } => assert!(message.contains("--p"), "{message}"),
        other => panic!("{other:?}"),
    }
    let names: Vec<&str> = quantities().iter().map(|q| q.name()).collect();
    assert_eq!(
        names,
        [
            "moments",
            "ln",
            "rms",
            "bypass",
            "compound",
            "attn",
            "bn",
            "linear_path"
        ]
    );
}

#[test]
fn bypass_takes_eps_gamma_beta_and_every_site_reports_its_eps() {
    // h = (1, 0, 2, -1), v = (0.5, 1, -0.5, 0.3): x = h + v = (1.5, 1, 1.5, -0.7),
    // μ = 0.825, σ² = mean x² − μ² = (2.25 + 1 + 2.25 + 0.49)/4 − 0.680625 = 0.816875,
    // v̄² = (0.25 + 1 + 0.25 + 0.09)/4 = 0.3975; p = 0.3: p/q = 3/7.
    let v = json(&[
        "eval",
        "bypass",
        "--h",
        "1,0,2,-1",
        "--v",
        "0.5,1,-0.5,0.3",
        "--p",
        "0.3",
        "--eps",
        "1e-5",
        "--gamma",
        "1,2,1,1",
        "--beta",
        "0,0,1,0",
        "--samples",
        "0",
        "--json",
    ]);
    assert_eq!(v["eps"], 1e-5);
    let (s2, noise, eps): (f64, f64, f64) = (0.816875, 3.0 / 7.0 * 0.3975, 1e-5);
    let want = ((s2 + eps) / (s2 + noise + eps)).sqrt();
    let c = result(&v, "c_damped")["formula"].as_f64().unwrap();
    // Closed forms of the registry's shape on both sides (d = 4): each within
    // CLOSED_FORM_ROUNDINGS of its value (derived in `exact::enumerate`), c ≤ 1.
    assert!(
        agree_to_rounding(c, want, CLOSED_FORM_ROUNDINGS, 1.0),
        "{c} vs {want}"
    );
    // β_2 = 1 shifts unit 2 and γ_1 = 2 scales unit 1 of E[LN(y)] = β + c γ (x − μ)/sqrt(σ² + ε).
    let e = result(&v, "E[LN(y)]")["formula"]
        .as_array()
        .unwrap()
        .clone();
    let unit = |k: usize, x: f64, g: f64, b: f64| {
        let got = e[k].as_f64().unwrap();
        let term = c * g * (x - 0.825) / (s2 + eps).sqrt();
        let want = b + term;
        assert!(
            agree_to_rounding(got, want, CLOSED_FORM_ROUNDINGS, b.abs() + term.abs()),
            "unit {k}: {got} vs {want}"
        );
    };
    unit(1, 1.0, 2.0, 0.0);
    unit(2, 1.5, 1.0, 1.0);
    for args in [
        vec!["eval", "ln", "--x", "1,2,3", "--p", "0.1", "--eps", "flax"],
        vec![
            "eval", "rms", "--x", "1,2,3", "--p", "0.1", "--eps", "torch",
        ],
        vec![
            "eval", "compound", "--x", "1,2,3", "--p", "0.1", "--gamma1", "1,1,1", "--beta1",
            "0,0.1,0", "--eps", "1e-3",
        ],
    ] {
        let want = match args[7] {
            "flax" => 1e-6,
            "torch" => 1e-5,
            _ => 1e-3,
        };
        let mut full = args.clone();
        full.extend(["--samples", "0", "--json"]);
        assert_eq!(json(&full)["eps"], want, "{args:?}");
        // The table says it too.
        let mut table = args.clone();
        table.extend(["--samples", "0"]);
        let (_, stdout, _) = dropmc(&table);
        assert!(
            stdout
                .lines()
                .next()
                .unwrap()
                .contains(&format!("eps = {want}")),
            "{stdout}"
        );
    }
}

#[test]
fn eps_makes_a_constant_x_valid() {
    // LN of a constant vector with ε > 0 is β; by exchangeability E[LN(z)] = β too.
    let v = json(&[
        "eval",
        "ln",
        "--x",
        "1,1,1,1",
        "--p",
        "0.1",
        "--eps",
        "1e-5",
        "--beta",
        "0.5,0,-1,2",
        "--samples",
        "20000",
        "--json",
    ]);
    let ln = result(&v, "E[LN(z)]");
    assert_eq!(ln["kind"], "exact");
    let formula: Vec<f64> = ln["formula"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(formula, [0.5, 0.0, -1.0, 2.0]);
    // c_ε = sqrt(ε / (p μ²/q + ε)) with μ = 1, p = 0.1; its least-squares target is 0/0.
    let c = result(&v, "c");
    let want = (1e-5f64 / (0.1 / 0.9 + 1e-5)).sqrt();
    let closed = |got: f64, want: f64| agree_to_rounding(got, want, CLOSED_FORM_ROUNDINGS, want);
    assert!(closed(c["formula"].as_f64().unwrap(), want));
    assert!(c["exact"].is_null() && c["mc"].is_null());
    assert!(c["warning"].as_str().unwrap().contains("0/0"), "{c}");
    // Var M = p μ²/(q d) and E[V] = (p/q) μ² (1 − 1/d), exact.
    let var_m = result(&v, "Var[M]")["formula"].as_f64().unwrap();
    assert!(closed(var_m, 0.1 / 0.9 / 4.0));
    let e_v = result(&v, "E[V]")["formula"].as_f64().unwrap();
    assert!(closed(e_v, 0.1 / 0.9 * 0.75));
    // RMSNorm of the zero vector with ε > 0: everything is 0, exactly.
    let v = json(&[
        "eval",
        "rms",
        "--x",
        "0,0,0",
        "--p",
        "0.3",
        "--eps",
        "1e-5",
        "--samples",
        "100",
        "--json",
    ]);
    assert_eq!(
        result(&v, "E[RMSNorm(z)]")["formula"],
        serde_json::json!([0.0, 0.0, 0.0])
    );
    // Bypass with a constant h + v.
    let v = json(&[
        "eval",
        "bypass",
        "--h",
        "1,0",
        "--v",
        "0,1",
        "--p",
        "0.3",
        "--eps",
        "1e-5",
        "--samples",
        "0",
        "--json",
    ]);
    assert!(result(&v, "c_damped")["warning"].is_string());
    // With ε = 0 a constant x stays an error naming σ = 0.
    let (code, _, stderr) = dropmc(&["eval", "ln", "--x", "1,1,1,1", "--p", "0.1"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("σ = 0"), "{stderr}");
}

#[test]
fn every_result_says_exact_or_leading_order_and_exact_forms_are_filled_at_d_512() {
    let x: Vec<String> = (0..512)
        .map(|k| format!("{}", (k % 7) as f64 - 2.5))
        .collect();
    let x = x.join(",");
    let v = json(&[
        "eval",
        "ln",
        "--x",
        &x,
        "--p",
        "0.2",
        "--samples",
        "0",
        "--json",
    ]);
    // μ = mean of (k mod 7) − 2.5 over 512 values; Var M = p (σ² + μ²)/(q d) = p mean x²/(q d).
    let values: Vec<f64> = (0..512).map(|k| (k % 7) as f64 - 2.5).collect();
    let mu = values.iter().sum::<f64>() / 512.0;
    let mean_sq = values.iter().map(|a| a * a).sum::<f64>() / 512.0;
    let var_m = 0.2 / 0.8 * mean_sq / 512.0;
    let e_v = (mean_sq - mu * mu + 0.2 * mu * mu) / 0.8 - var_m;
    // Each side sums 512 terms (511 roundings) into a closed form of the
    // registry's shape; the terms' absolute values sum to at most
    // (mean x² + μ²)/q per unit, the scale of every quantity here.
    let roundings = 511.0 + CLOSED_FORM_ROUNDINGS;
    let scale = (mean_sq + mu * mu) / 0.8;
    for (name, want) in [("E[M]", mu), ("Var[M]", var_m), ("E[V]", e_v)] {
        let r = result(&v, name);
        assert_eq!(r["kind"], "exact", "{name}");
        assert!(r["order"].is_null(), "{name}");
        let exact = r["exact"].as_f64().unwrap_or_else(|| panic!("{name}: {r}"));
        assert!(
            agree_to_rounding(exact, want, roundings, scale),
            "{name}: {exact} vs {want}"
        );
    }
    for name in ["c", "E[LN(z)]"] {
        let r = result(&v, name);
        assert_eq!(r["kind"], "leading_order", "{name}");
        assert_eq!(r["order"], 1, "{name}");
        assert!(
            r["exact"].is_null(),
            "{name}: no enumeration of 512 mask bits"
        );
    }
    let bypass = json(&[
        "eval",
        "bypass",
        "--h",
        &x,
        "--v",
        &x,
        "--p",
        "0.2",
        "--samples",
        "0",
        "--json",
    ]);
    assert!(result(&bypass, "E[V]")["exact"].is_number());
    let rms = json(&[
        "eval",
        "rms",
        "--x",
        &x,
        "--p",
        "0.2",
        "--samples",
        "0",
        "--json",
    ]);
    let r2 = result(&rms, "E[R^2]")["exact"].as_f64().unwrap();
    assert!(agree_to_rounding(r2, mean_sq / 0.8, roundings, r2));
    let moments = json(&[
        "eval",
        "moments",
        "--x",
        &x,
        "--p",
        "0.2",
        "--samples",
        "0",
        "--json",
    ]);
    let var_s = result(&moments, "Var[S]")["exact"].as_f64().unwrap();
    assert!(agree_to_rounding(
        var_s,
        0.2 / 0.8 * mean_sq * 512.0,
        roundings,
        var_s
    ));
}

#[test]
fn zero_samples_gives_closed_forms_only_and_one_sample_is_refused() {
    let v = json(&[
        "eval",
        "rms",
        "--x",
        "1,2,-1",
        "--p",
        "0.3",
        "--samples",
        "0",
        "--json",
    ]);
    assert_eq!(v["samples"], 0);
    for r in v["results"].as_array().unwrap() {
        assert!(
            r["mc"].is_null() && r["stderr"].is_null() && r["sampler"].is_null(),
            "{r}"
        );
        assert!(r["formula"].is_number() || r["formula"].is_array());
    }
    let (code, stdout, _) = dropmc(&[
        "eval",
        "rms",
        "--x",
        "1,2,-1",
        "--p",
        "0.3",
        "--samples",
        "0",
    ]);
    assert_eq!(code, 0);
    assert!(stdout.contains("no Monte Carlo"), "{stdout}");
    // Every row shows "—" for Monte Carlo and leaves z empty.
    let rows: Vec<&str> = stdout.lines().filter(|l| l.starts_with("E[")).collect();
    assert_eq!(rows.len(), 4, "{stdout}");
    assert!(rows.iter().all(|l| l.contains('—')), "{stdout}");
    let (code, _, stderr) = dropmc(&[
        "eval",
        "rms",
        "--x",
        "1,2,-1",
        "--p",
        "0.3",
        "--samples",
        "1",
    ]);
    assert_eq!(code, 2, "{stderr}");
}

#[test]
fn results_outside_their_useful_range_carry_a_warning() {
    // p close to 1: q d = 4e-7 kept units on average.
    let v = json(&[
        "eval",
        "ln",
        "--x",
        "1,2,4,-1",
        "--p",
        "0.9999999",
        "--samples",
        "0",
        "--json",
    ]);
    let w = result(&v, "E[LN(z)]")["warning"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(w.contains("1/(qd)"), "{w}");
    assert!(
        result(&v, "E[M]")["warning"].is_null(),
        "exact forms hold at any p"
    );
    // p = 0.1, d = 4: sqrt(p/(qd)) = 0.17, inside the range; no kept-count warning.
    let v = json(&[
        "eval",
        "ln",
        "--x",
        "1,2,4,-1",
        "--p",
        "0.1",
        "--samples",
        "0",
        "--json",
    ]);
    let w = result(&v, "E[LN(z)]")["warning"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(!w.contains("1/(qd)"), "{w}");
    // d = 3: the second order removes little of the first order's error.
    let v = json(&[
        "eval",
        "ln",
        "--x",
        "1,2,4",
        "--p",
        "0.3",
        "--samples",
        "0",
        "--json",
    ]);
    let w = result(&v, "E[LN(z)]")["warning"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(w.contains("second order at d = 3"), "{w}");
    // The table prints the warning under it.
    let (_, stdout, _) = dropmc(&["eval", "ln", "--x", "1,2,4", "--p", "0.3", "--samples", "0"]);
    assert!(
        stdout.contains("warning (E[LN(z)]): second order"),
        "{stdout}"
    );
}

#[test]
fn a_correction_farther_from_the_truth_than_the_uncorrected_value_is_flagged() {
    let make = |formula: f64| EvalOutput {
        quantity: "made up",
        p: 0.1,
        d: 100,
        samples: 0,
        seed: 1,
        eps: None,
        results: vec![
            EvalResult::leading("c", Values::Scalar(formula), Some(vec![1.0]))
                .with_uncorrected(vec![0.9]),
        ],
        channels: Vec::new(),
    };
    // Exact 1, uncorrected 0.9 (off by 0.1): a correction to 0.5 makes it worse, to 0.95 better.
    let mut worse = make(0.5);
    range::annotate(&mut worse);
    assert_eq!(worse.results[0].warnings.len(), 1, "{:?}", worse.results[0]);
    assert!(worse.results[0].warnings[0].contains("farther"));
    let mut better = make(0.95);
    range::annotate(&mut better);
    assert!(
        better.results[0].warnings.is_empty(),
        "{:?}",
        better.results[0]
    );
}

#[test]
fn eval_tables_fit_the_width() {
    for columns in ["80", "100"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_dropmc"))
            .args([
                "eval",
                "ln",
                "--x",
                "1,2,4",
                "--p",
                "0.3",
                "--samples",
                "1000",
            ])
            .env("COLUMNS", columns)
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let width: usize = columns.parse().unwrap();
        for line in text.lines() {
            assert!(line.chars().count() <= width, "COLUMNS={columns}: {line:?}");
        }
    }
}
