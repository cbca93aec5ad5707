//! A family registered from outside the crate (`examples/new_formula.rs`,
//! compiled here as a module) reaches the report, its JSON, `dropmc list`
//! and the conformance kit through the registry alone — and its claim can
//! fail: a layer with the wrong inverted scale is caught.

mod common;

#[path = "../examples/new_formula.rs"]
#[allow(dead_code)] // the example's `main` is not called here
mod example;

use dropmc::conformance::report::{self, Options};
use dropmc::conformance::{self, Options as ConformanceOptions};
use dropmc::ops::Subject;
use dropmc::stats::{Estimate, per_draw_dof};

const ID: &str = "example.pair_product";

#[test]
fn the_outside_family_runs_in_the_report_and_its_json() {
    let registry = example::registry();
    let options = Options {
        family: Some("example".into()),
        ..Options::default()
    };
    let run = report::run(&registry, &Subject::reference(), &options).expect("runs");
    assert_eq!(run.results.len(), 1);
    common::assert_pass(&run.results[0]);
    let json = report::to_json(&run);
    assert_eq!(json["claims"][0]["id"], ID);
    assert_eq!(json["claims"][0]["family"], "example");
    // The whole registry still holds the crate's families before it.
    let all = report::select(&registry, &Options::default()).expect("selects");
    assert_eq!(all.last().map(|c| c.id()), Some(ID));
    assert!(all.len() > 40);
}

#[test]
fn the_outside_family_is_listed_and_run_by_the_conformance_kit() {
    let registry = example::registry();
    let listed = dropmc::cli::list::json(&registry);
    let ids: Vec<_> = listed["claims"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|c| c["id"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(ids.iter().any(|id| id == ID), "{ids:?}");
    let chosen = conformance::claims_in(&registry, &ConformanceOptions::default());
    assert!(chosen.iter().any(|c| c.id() == ID));
    // The crate's default registry does not know it.
    assert!(dropmc::Registry::default().claim(ID).is_err());
}

#[test]
fn the_outside_claim_catches_a_layer_without_the_inverted_scale() {
    // The gallery's `multiply_by_q` scales survivors by q instead of 1/q,
    // so E[z_j z_k] = q⁴ x_j x_k, not x_j x_k.
    let wrong = dropmc::conformance::verify::subject("multiply_by_q").expect("a gallery mutant");
    let registry = example::registry();
    let options = ConformanceOptions {
        families: Some(&["example"]),
        samples: Some(100_000),
        ..ConformanceOptions::default()
    };
    let run = conformance::run_in(&registry, &wrong, &options).expect("runs");
    assert_eq!(run.failed(), [ID]);
}

#[test]
fn the_outside_eval_quantity_runs_with_the_cli_flags() {
    let registry = example::registry();
    let pairs = registry.quantity("pairs").expect("registered");
    let args = ["--x", "1,2,-3", "--p", "0.2", "--samples", "200000"].map(String::from);
    let out = pairs.run_args(&args).expect("runs");
    let result = &out.results[0];
    // Closed form x_j x_k over (0,1), (0,2), (1,2), and the enumeration.
    assert_eq!(result.formula.as_slice(), [2.0, -3.0, -6.0]);
    let exact = result.exact.as_ref().expect("enumerated at d = 3");
    for (e, f) in exact.as_slice().iter().zip(result.formula.as_slice()) {
        assert!((e - f).abs() <= 16.0 * f64::EPSILON * f.abs(), "{e} vs {f}");
    }
    let (mc, se) = result.estimate().expect("sampled");
    for k in 0..3 {
        let estimate = Estimate {
            value: mc[k],
            stderr: se[k],
            n: out.samples,
            dof: per_draw_dof(out.samples),
        };
        common::assert_consistent(
            &format!("pairs[{k}]"),
            estimate,
            result.formula.as_slice()[k],
        );
    }
    // Bad input is a typed error, not a panic.
    let bad = ["--x", "1,2", "--p", "1"].map(String::from);
    assert!(matches!(
        pairs.run_args(&bad),
        Err(dropmc::Error::InvalidRate { .. })
    ));
    // The crate's own registry has no such quantity.
    assert!(dropmc::Registry::default().quantity("pairs").is_err());
}
