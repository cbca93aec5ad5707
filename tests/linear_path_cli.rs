//! `dropmc eval linear_path` as a user runs it: a dropout of `u` through a
//! `Linear` and an added `h` into LayerNorm / RMSNorm, against values
//! written out here from the definitions (the four masks of `m = 2` units at
//! `p = 0.5`, each of weight 1/4), independently of the crate.

mod common;

use common::{assert_mc_within, assert_same_len, dropmc, numbers};

use dropmc::stats::tolerance;
use serde_json::Value;

const U: [f64; 2] = [1.0, -2.0];
/// `W` (3 × 2), row-major.
const W: [[f64; 2]; 3] = [[1.0, 0.0], [0.5, 1.0], [-1.0, 2.0]];
const B: [f64; 3] = [0.0, 0.1, 0.0];
const H: [f64; 3] = [0.2, -0.1, 0.3];
const SAMPLES: u64 = 200_000;

/// Roundings between the values written out here and the crate's closed
/// form or its 2²-mask enumeration: per mask the mat-vec (2 products, 2
/// sums per unit, 3 units), the bias and `h` (6), the mean and variance (8),
/// the square root and division, the affine map (3 · 3); then 4 weighted
/// additions. On the crate's side the covariance rule (`W diag Wᵀ`, 12) and
/// the trace. 64 in all, on magnitudes below 64 (`|y_k| ≤ 10`, `V ≤ 64`).
const ROUNDINGS: f64 = 64.0;
const MAGNITUDE: f64 = 64.0;

/// `E[(V(y), norm(y))]` over the four masks, with `norm` LayerNorm
/// (`rms` false) or RMSNorm (γ = 1, β = 0, ε = 0), and the spread of `ȳ`'s
/// norm output (the eval output).
fn by_hand(rms: bool) -> (f64, Vec<f64>, Vec<f64>) {
    let forward = |z: [f64; 2]| -> [f64; 3] {
        std::array::from_fn(|k| W[k][0] * z[0] + W[k][1] * z[1] + B[k] + H[k])
    };
    let norm = |y: [f64; 3]| -> (f64, Vec<f64>) {
        let mean = y.iter().sum::<f64>() / 3.0;
        let var = y.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / 3.0;
        if rms {
            let r2 = y.iter().map(|v| v * v).sum::<f64>() / 3.0;
            (r2, y.iter().map(|v| v / r2.sqrt()).collect())
        } else {
            (var, y.iter().map(|v| (v - mean) / var.sqrt()).collect())
        }
    };
    let (mut spread, mut out) = (0.0, vec![0.0; 3]);
    for mask in 0..4u32 {
        // Kept units are scaled by 1/q = 2.
        let z = [0, 1].map(|j| if mask >> j & 1 == 1 { 2.0 * U[j] } else { 0.0 });
        let (s, o) = norm(forward(z));
        spread += s / 4.0;
        out.iter_mut().zip(&o).for_each(|(a, v)| *a += v / 4.0);
    }
    (spread, out, norm(forward(U)).1)
}

fn run(extra: &[&str]) -> Value {
    let w: Vec<String> = W.iter().flatten().map(f64::to_string).collect();
    let (u, b, h) = (
        U.map(|v| v.to_string()).join(","),
        B.map(|v| v.to_string()).join(","),
        H.map(|v| v.to_string()).join(","),
    );
    let (w, samples) = (w.join(","), SAMPLES.to_string());
    let mut args = vec![
        "eval",
        "linear_path",
        "--u",
        &u,
        "--p",
        "0.5",
        "--w",
        &w,
        "--b",
        &b,
        "--h",
        &h,
        "--samples",
        &samples,
        "--json",
    ];
    args.extend(extra);
    let (code, stdout, stderr) = dropmc(&args);
    assert_eq!(code, 0, "{stderr}");
    serde_json::from_str(&stdout).expect("json")
}

fn close(what: &str, got: &[f64], want: &[f64]) {
    assert_same_len(what, &[got.len()], want.len());
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= tolerance::bound(ROUNDINGS, MAGNITUDE),
            "{what}: {g} vs {w}"
        );
    }
}

fn check(rms: bool) {
    let v = run(if rms { &["--rms"] } else { &[] });
    assert_eq!(v["quantity"], "linear_path");
    assert_eq!(v["d"], 3);
    let (spread, output, eval) = by_hand(rms);
    let names = if rms {
        ["E[R^2]", "c_rms", "E[RMSNorm(y)]"]
    } else {
        ["E[V]", "c", "E[LN(y)]"]
    };
    let r = v["results"].as_array().unwrap();
    assert_eq!(r.len(), 3);
    for (result, name) in r.iter().zip(names) {
        assert_eq!(result["name"], name);
    }
    // The spread's closed form is exact: formula and enumeration both agree
    // with the hand enumeration; Monte Carlo within its error (1 assertion).
    close(names[0], &numbers(&r[0]["formula"]), &[spread]);
    close(names[0], &numbers(&r[0]["exact"]), &[spread]);
    assert_mc_within(
        names[0],
        &numbers(&r[0]["mc"]),
        &numbers(&r[0]["stderr"]),
        &[spread],
        SAMPLES,
    );
    // The output's closed form is leading order: only its enumeration, its
    // Monte Carlo (3 assertions) and the eval output it replaces are exact.
    close(names[2], &numbers(&r[2]["exact"]), &output);
    close("uncorrected", &numbers(&r[2]["uncorrected"]), &eval);
    assert_mc_within(
        names[2],
        &numbers(&r[2]["mc"]),
        &numbers(&r[2]["stderr"]),
        &output,
        SAMPLES,
    );
}

#[test]
fn eval_linear_path_layernorm_agrees_with_the_masks_written_out() {
    check(false);
}

#[test]
fn eval_linear_path_rmsnorm_agrees_with_the_masks_written_out() {
    check(true);
}

#[test]
fn eval_linear_path_rejects_bad_input_with_one_line_and_exit_2() {
    let w = "1,0,0.5,1,-1,2";
    for args in [
        vec!["--u", "1,-2", "--p", "0.5", "--w", "1,0,0.5,1,-1"],
        vec!["--u", "1,-2", "--p", "0.5", "--w", w, "--h", "1,2"],
        vec!["--u", "1,-2", "--p", "0.5", "--w", w, "--b", "1,2,3,4"],
        vec!["--u", "1,-2", "--p", "1", "--w", w],
        vec!["--u", "1,nan", "--p", "0.5", "--w", w],
        vec![
            "--u", "1,-2", "--p", "0.5", "--w", w, "--rms", "--beta", "0,0,0",
        ],
        vec!["--u", "1,-2", "--p", "0.5", "--w", w, "--gamma", "1,1"],
    ] {
        let mut full = vec!["eval", "linear_path"];
        full.extend(&args);
        let (code, stdout, stderr) = dropmc(&full);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    }
}
