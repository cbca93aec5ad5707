//! `eval ln | rms | bypass | compound` against an exact computation written
//! here from the definitions, independently of the crate (its own mask loop,
//! its own LayerNorm and RMSNorm), on random inputs with d ≤ 14.
//!
//! False-alarm accounting: `mc_within_error_of_the_exact_value` z-tests every
//! `mc` component once at the suite's per-assertion level; for the widths
//! `WIDTHS` that is Σ_d [(4 + d) + (1 + d) + (2 + d) + (2 + d)] components,
//! counted in `tests/zz_budget.rs`.

mod common;

use common::dropmc;

use dropmc::engine::Budget;
use dropmc::eval::norm::{self, CompoundParams};
use dropmc::eval::{EvalOutput, LayerNormParams};
use dropmc::stats::Estimate;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::Value;

/// Two independent enumerations of at most 2^14 masks (`tests` here, the
/// crate's grouped/full oracle there) each round `2^d` weighted additions
/// (Higham 4.4) and at most `8 d + 64` operations per mask (two reductions
/// over `d`, a square root, a division, the affine map, the weight): `2 (2^14
/// + 8·14 + 64)` roundings in all.
const ENUMERATION_ROUNDINGS: f64 = 2.0 * (16_384.0 + 8.0 * 14.0 + 64.0);

/// The bound of [`ENUMERATION_ROUNDINGS`] on the terms' magnitude. Every
/// enumerated quantity is a mean of per-mask values bounded by `|β| + |γ|
/// √(d−1) ≤ 0.5 + 1.5 √13 < 6` (a standardized entry is at most `√(d−1)` in
/// size; moments and least-squares factors of these are of the same order),
/// so `Σ w |f| ≤ 6 + |value|` is charged as `8 (1 + |value|)`.
fn enumeration_agreement(value: f64) -> f64 {
    dropmc::stats::tolerance::bound(ENUMERATION_ROUNDINGS, 8.0 * (1.0 + value.abs()))
}

/// Roundings between a closed form written out here and the crate's (each
/// at most 12 operations on `μ`, `σ²`, `p`, `d`, plus the two-pass moments
/// over `d ≤ 14` values): `2 (12 + 2·14)`.
const CLOSED_FORM_ROUNDINGS: f64 = 2.0 * (12.0 + 2.0 * 14.0);

/// The widths of the random inputs.
pub const WIDTHS: [usize; 3] = [4, 9, 14];
const SAMPLES: u64 = 20_000;

/// E[f(y)] over all masks of y = h + m v / q, written out directly.
fn expect(h: &[f64], v: &[f64], p: f64, dim: usize, f: &dyn Fn(&[f64]) -> Vec<f64>) -> Vec<f64> {
    let d = h.len();
    let q = 1.0 - p;
    let mut acc = vec![0.0; dim];
    for bits in 0u32..(1 << d) {
        let mut w = 1.0;
        let y: Vec<f64> = (0..d)
            .map(|k| {
                if bits >> k & 1 == 1 {
                    w *= q;
                    h[k] + v[k] / q
                } else {
                    w *= p;
                    h[k]
                }
            })
            .collect();
        for (a, b) in acc.iter_mut().zip(f(&y)) {
            *a += w * b;
        }
    }
    acc
}

fn mean(y: &[f64]) -> f64 {
    y.iter().sum::<f64>() / y.len() as f64
}

fn var(y: &[f64]) -> f64 {
    let m = mean(y);
    y.iter().map(|a| (a - m) * (a - m)).sum::<f64>() / y.len() as f64
}

/// LayerNorm; a constant input gives β (the crate's documented rule).
fn layernorm(y: &[f64], g: &[f64], b: &[f64], eps: f64) -> Vec<f64> {
    let (m, s) = (mean(y), (var(y) + eps).sqrt());
    let constant = y.iter().all(|a| *a == y[0]);
    (0..y.len())
        .map(|k| {
            if constant {
                b[k]
            } else {
                g[k] * (y[k] - m) / s + b[k]
            }
        })
        .collect()
}

fn rmsnorm(y: &[f64], g: &[f64], eps: f64) -> Vec<f64> {
    let r = (y.iter().map(|a| a * a).sum::<f64>() / y.len() as f64 + eps).sqrt();
    (0..y.len())
        .map(|k| if r == 0.0 { 0.0 } else { g[k] * y[k] / r })
        .collect()
}

/// The least-squares factor of (out − β) on u.
fn ls(out: &[f64], beta: &[f64], u: &[f64]) -> f64 {
    let num: f64 = (0..out.len()).map(|k| (out[k] - beta[k]) * u[k]).sum();
    num / u.iter().map(|a| a * a).sum::<f64>()
}

fn minus(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x - y).collect()
}

struct Input {
    x: Vec<f64>,
    h: Vec<f64>,
    p: f64,
    g1: Vec<f64>,
    b1: Vec<f64>,
    g2: Vec<f64>,
    b2: Vec<f64>,
    eps: f64,
}

fn random_input(rng: &mut ChaCha8Rng, d: usize) -> Input {
    let mut vec = |lo: f64, hi: f64| -> Vec<f64> {
        (0..d)
            .map(|_| lo + (hi - lo) * rng.random::<f64>())
            .collect()
    };
    let (x, h, g1, b1, g2, b2) = (
        vec(-2.0, 2.0),
        vec(-1.0, 1.0),
        vec(0.5, 1.5),
        vec(-0.5, 0.5),
        vec(0.5, 1.5),
        vec(-0.5, 0.5),
    );
    let p = 0.1 + 0.5 * rng.random::<f64>();
    let eps = if rng.random::<bool>() { 0.1 } else { 0.0 };
    Input {
        x,
        h,
        p,
        g1,
        b1,
        g2,
        b2,
        eps,
    }
}

/// The crate's outputs and the independent exact values, for one input.
fn cases(input: &Input, seed: u64) -> Vec<(EvalOutput, Vec<Vec<f64>>)> {
    let Input {
        x,
        h,
        p,
        g1,
        b1,
        g2,
        b2,
        eps,
    } = input;
    let (d, p, eps) = (x.len(), *p, *eps);
    let zero = vec![0.0; d];
    let one = vec![1.0; d];
    let budget = Budget::new(SAMPLES, seed).unwrap();
    let q = 1.0 - p;
    let (mu, s2) = (mean(x), var(x));
    let c_formula = (q / (1.0 + p * mu * mu / s2)).sqrt();

    // ln
    let ln_params = LayerNormParams {
        gamma: Some(g1.clone()),
        beta: Some(b1.clone()),
        eps,
    };
    let ln = norm::ln(x, p, ln_params, budget).unwrap();
    let u = minus(&layernorm(x, g1, b1, eps), b1);
    let e = expect(&zero, x, p, 3 + d, &|y| {
        let mut o = vec![mean(y), mean(y) * mean(y), var(y)];
        o.extend(layernorm(y, g1, b1, eps));
        o
    });
    let e_ln = e[3..].to_vec();
    let ln_exact = vec![
        vec![e[0]],
        vec![e[1] - e[0] * e[0]],
        vec![e[2]],
        vec![ls(&e_ln, b1, &u)],
        e_ln,
    ];

    // rms
    let rms = norm::rms(x, p, Some(g1.clone()), eps, budget).unwrap();
    let e = expect(&zero, x, p, 1 + d, &|y| {
        let mut o = vec![y.iter().map(|a| a * a).sum::<f64>() / d as f64];
        o.extend(rmsnorm(y, g1, eps));
        o
    });
    let rms_exact = vec![vec![e[0]], e[1..].to_vec()];

    // bypass: y = h + dropout(x), plain LayerNorm
    let by = norm::bypass(h, x, p, budget).unwrap();
    let clean = minus(h, &x.iter().map(|a| -a).collect::<Vec<_>>());
    let u = layernorm(&clean, &one, &zero, 0.0);
    let e = expect(h, x, p, 1 + d, &|y| {
        let mut o = vec![var(y)];
        o.extend(layernorm(y, &one, &zero, 0.0));
        o
    });
    let e_ln = e[1..].to_vec();
    let bypass_exact = vec![vec![e[0]], vec![ls(&e_ln, &zero, &u)], e_ln];

    // compound: LN1 (g1, b1), LN2 (g2, b2), ε = 0
    let params = CompoundParams {
        gamma1: g1.clone(),
        beta1: b1.clone(),
        gamma2: Some(g2.clone()),
        beta2: Some(b2.clone()),
        eps: 0.0,
    };
    let co = norm::compound(x, p, params, budget).unwrap();
    let ln1_x = layernorm(x, g1, b1, 0.0);
    let u1 = minus(&ln1_x, b1);
    let c1_hat: Vec<f64> = (0..d).map(|k| b1[k] + c_formula * u1[k]).collect();
    let u2 = minus(&layernorm(&c1_hat, g2, b2, 0.0), b2);
    let e = expect(&zero, x, p, 2 * d, &|y| {
        let first = layernorm(y, g1, b1, 0.0);
        let mut o = layernorm(&first, g2, b2, 0.0);
        o.extend(first);
        o
    });
    let (e_out, e_first) = (e[..d].to_vec(), e[d..].to_vec());
    let compound_exact = vec![
        vec![ls(&e_first, b1, &u1)],
        vec![ls(&e_out, b2, &u2)],
        e_out,
    ];

    // The closed forms of the exact scalar claims, from the definitions.
    let ln_formula_check = [
        mu,
        p * (s2 + mu * mu) / (q * d as f64),
        (s2 + p * mu * mu) / q - p * (s2 + mu * mu) / (q * d as f64),
    ];
    for (r, want) in ln.results.iter().zip(ln_formula_check) {
        let got = r.formula.as_slice()[0];
        assert!(
            (got - want).abs()
                <= dropmc::stats::tolerance::bound(
                    CLOSED_FORM_ROUNDINGS,
                    (want.abs() + mu * mu + s2) / q
                ),
            "{}: {got} vs {want}",
            r.name
        );
    }
    let r2 = x.iter().map(|a| a * a).sum::<f64>() / d as f64 / q;
    assert!(
        (rms.results[0].formula.as_slice()[0] - r2).abs()
            <= dropmc::stats::tolerance::bound(CLOSED_FORM_ROUNDINGS, r2)
    );
    vec![
        (ln, ln_exact),
        (rms, rms_exact),
        (by, bypass_exact),
        (co, compound_exact),
    ]
}

fn all_cases() -> Vec<(EvalOutput, Vec<Vec<f64>>)> {
    let mut rng = ChaCha8Rng::seed_from_u64(20261130);
    WIDTHS
        .iter()
        .enumerate()
        .flat_map(|(i, &d)| cases(&random_input(&mut rng, d), 100 + i as u64))
        .collect()
}

#[test]
fn exact_matches_an_independent_enumeration_and_mc_is_within_error() {
    let mut components = 0;
    for (output, exact) in all_cases() {
        assert_eq!(output.results.len(), exact.len(), "{}", output.quantity);
        for (r, want) in output.results.iter().zip(&exact) {
            let got = r
                .exact
                .as_ref()
                .expect("d <= 20 has an exact value")
                .as_slice();
            let (mc, se) = r.estimate().expect("a Monte Carlo run");
            assert_eq!(got.len(), want.len());
            for k in 0..want.len() {
                assert!(
                    (got[k] - want[k]).abs() <= enumeration_agreement(want[k]),
                    "{} {}[{k}] at d = {}: exact {} vs independent {}",
                    output.quantity,
                    r.name,
                    output.d,
                    got[k],
                    want[k]
                );
                let estimate = Estimate {
                    value: mc[k],
                    stderr: se[k],
                    n: output.samples,
                    dof: dropmc::stats::per_draw_dof(output.samples),
                };
                common::assert_consistent(
                    &format!("{} {}[{k}] at d = {}", output.quantity, r.name, output.d),
                    estimate,
                    want[k],
                );
                components += 1;
            }
        }
    }
    // The count tests/zz_budget.rs sums.
    let declared: usize = WIDTHS.iter().map(|d| 9 + 4 * d).sum();
    assert_eq!(components, declared);
}

#[test]
fn the_cli_prints_the_documented_json_and_rejects_degenerate_input() {
    let cases: [(&[&str], &str, &[&str]); 4] = [
        (
            &["ln", "--x", "1,2,-1", "--p", "0.3", "--eps", "0.1"],
            "ln",
            &["E[M]", "Var[M]", "E[V]", "c", "E[LN(z)]"],
        ),
        (
            &["rms", "--x", "1,2,-1", "--p", "0.3"],
            "rms",
            &["E[R^2]", "E[RMSNorm(z)]"],
        ),
        (
            &["bypass", "--h", "1,0,2", "--v", "0.5,1,-1", "--p", "0.3"],
            "bypass",
            &["E[V]", "c_damped", "E[LN(y)]"],
        ),
        (
            &[
                "compound", "--x", "1,2,-1", "--p", "0.3", "--gamma1", "1,2,1", "--beta1",
                "0,0.5,0",
            ],
            "compound",
            &["c1", "c2", "E[LN2(LN1(z))]"],
        ),
    ];
    for (args, quantity, names) in cases {
        let mut full = vec!["eval"];
        full.extend_from_slice(args);
        full.extend_from_slice(&["--samples", "1000", "--json"]);
        let (code, stdout, stderr) = dropmc(&full);
        assert_eq!(code, 0, "{stderr}");
        let v: Value = serde_json::from_str(&stdout).expect("json");
        assert_eq!(v["quantity"], quantity);
        assert_eq!(v["d"], 3);
        let got: Vec<&str> = v["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(got, names);
        for r in v["results"].as_array().unwrap() {
            assert!(!r["exact"].is_null() && !r["mc"].is_null() && !r["stderr"].is_null());
        }
    }
    // Above 20 mask bits there is no enumeration: exact is null.
    let x: Vec<String> = (0..21).map(|k| format!("{}", k % 5)).collect();
    let (code, stdout, _) = dropmc(&[
        "eval",
        "ln",
        "--x",
        &x.join(","),
        "--p",
        "0.3",
        "--samples",
        "100",
        "--json",
    ]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert!(v["results"][4]["exact"].is_null());
    // Degenerate inputs: one line on stderr, exit 2.
    for args in [
        vec!["eval", "ln", "--x", "2,2,2", "--p", "0.3"],
        vec!["eval", "ln", "--x", "0,0", "--p", "0.3"],
        vec!["eval", "ln", "--x", "1", "--p", "0.3"],
        vec!["eval", "ln", "--x", "1,2", "--p", "0.3", "--gamma", "1,2,3"],
        vec!["eval", "rms", "--x", "0,0,0", "--p", "0.3"],
        vec!["eval", "bypass", "--h", "1,1", "--v", "0,0", "--p", "0.3"],
        vec![
            "eval", "compound", "--x", "1,2", "--p", "0.3", "--gamma1", "1", "--beta1", "0",
        ],
    ] {
        let (code, stdout, stderr) = dropmc(&args);
        assert_eq!(code, 2, "{args:?}");
        assert!(stdout.is_empty());
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
}
