//! Hostile input: every public constructor, formula and parser returns a
//! typed error or a finite, correct value — no panic, no hang, no silent NaN.

use dropmc::engine::Budget;
use dropmc::eval::moments::moments;
use dropmc::exact::{MAX_ENUMERATION_D, enumerate_masks};
use dropmc::formulas::second_order::{NoisyUnits, layer_norm_expectation, rms_norm_expectation};
use dropmc::ops::Rate;
use dropmc::{Error, read_list};
use proptest::prelude::*;

/// Any f64 at all, weighted towards the troublesome ones.
fn hostile_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(0.0),
        Just(-0.0),
        Just(1.0),
        Just(1.0 - f64::EPSILON / 2.0),
        Just(f64::MIN_POSITIVE / 8.0),
        Just(f64::MAX),
        Just(1e-300),
        Just(1e300),
        any::<f64>(),
        -2.0..2.0f64,
    ]
}

/// Vectors from empty to moderate, of hostile values.
fn hostile_vec() -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(hostile_f64(), 0..12)
}

fn all_finite(output: &dropmc::eval::EvalOutput) -> bool {
    output
        .results
        .iter()
        .all(|r| r.numbers().all(f64::is_finite))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: Some(Box::new(
        proptest::test_runner::FileFailurePersistence::Direct("proptest-regressions/hostile.txt"))), ..ProptestConfig::default() })]

    #[test]
    fn rate_accepts_exactly_the_unit_interval(p in hostile_f64()) {
        let ok = p.is_finite() && (0.0..1.0).contains(&p);
        prop_assert_eq!(Rate::new(p).is_ok(), ok);
        if let Ok(rate) = Rate::new(p) {
            prop_assert!(rate.q() > 0.0);
        }
    }

    #[test]
    fn list_parsing_never_panics_and_returns_only_finite_numbers(text in "([^@].{0,39})?") {
        // A list that starts with `@` names a file; the rest is parsed as written.
        if let Ok(values) = read_list("--x", &text) {
            prop_assert!(!values.is_empty());
            prop_assert!(values.iter().all(|v| v.is_finite()));
        }
    }

    #[test]
    fn eval_moments_is_an_error_or_finite(x in hostile_vec(), p in hostile_f64(), samples in 0u64..40) {
        match moments(&x, p, Budget { samples, seed: 1 }) {
            Ok(output) => {
                prop_assert!(all_finite(&output));
                // --samples 0 is closed forms only; 1 cannot give a standard error.
                prop_assert!(!x.is_empty() && samples != 1);
                prop_assert_eq!(
                    output.results.iter().all(|r| r.mc.is_none() && r.stderr.is_none()),
                    samples == 0
                );
            }
            Err(e) => {
                // moments validates x, then p, then the budget, in that order, and
                // reports an overflow of its moments as Overflow.
                let want = if x.is_empty() {
                    matches!(e, Error::Empty { what: "x" })
                } else if let Some(i) = x.iter().position(|v| !v.is_finite()) {
                    matches!(e, Error::NonFinite { what: "x", index, .. } if index == i)
                } else if !(p.is_finite() && (0.0..1.0).contains(&p)) {
                    matches!(e, Error::InvalidRate { .. })
                } else if samples == 1 {
                    matches!(e, Error::TooFewSamples { got: 1, .. })
                } else {
                    // Valid input whose moments overflow f64 (x = 1e300).
                    matches!(e, Error::Overflow { .. })
                };
                prop_assert!(want, "x {:?} p {} samples {}: {:?}", x, p, samples, e);
            }
        }
    }

    #[test]
    fn second_order_is_an_error_or_finite(v in hostile_vec(), h_len in 0usize..12, p in hostile_f64(), eps in hostile_f64()) {
        let Ok(rate) = Rate::new(p) else { return Ok(()) };
        let h = vec![0.25; h_len];
        if let Ok(units) = NoisyUnits::bypass(&h, &v, rate) {
            let d = v.len();
            let (ones, zeros) = (vec![1.0; d], vec![0.0; d]);
            let results = [layer_norm_expectation(&units, &ones, &zeros, eps), rms_norm_expectation(&units, &ones, eps)];
            for values in results.into_iter().flatten() {
                prop_assert!(values.iter().all(|x| x.is_finite()), "{values:?}");
            }
        }
    }
}

#[test]
fn sample_counts_of_zero_and_one_are_rejected_by_the_engine() {
    for n in [0, 1] {
        assert!(matches!(
            Budget::new(n, 1),
            Err(Error::TooFewSamples { .. })
        ));
    }
    assert!(Budget::new(2, 1).is_ok());
}

#[test]
fn eval_takes_zero_samples_as_closed_forms_only_and_refuses_one() {
    let budget = |samples| Budget { samples, seed: 1 };
    assert!(matches!(
        moments(&[1.0], 0.5, budget(1)),
        Err(Error::TooFewSamples { got: 1, .. })
    ));
    let out = moments(&[1.0, -2.0], 0.5, budget(0)).unwrap();
    assert_eq!(out.samples, 0);
    for r in &out.results {
        assert!(
            r.mc.is_none() && r.stderr.is_none() && r.sampler.is_none(),
            "{r:?}"
        );
        assert!(r.exact.is_some(), "{}: every moment is exact", r.name);
    }
    // E[z^2] of x = -2 at p = 0.5 is x^2/q = 8, by hand.
    let second = out.results.iter().find(|r| r.name == "E[z^2]").unwrap();
    assert_eq!(second.formula.as_slice()[1], 8.0);
}

#[test]
fn enumeration_rejects_empty_and_oversized_inputs() {
    let rate = Rate::new(0.5).unwrap();
    assert!(matches!(
        enumerate_masks(0, rate, 1, |_, _| {}),
        Err(Error::Empty { .. })
    ));
    assert!(matches!(
        enumerate_masks(MAX_ENUMERATION_D + 1, rate, 1, |_, _| {}),
        Err(Error::TooLarge { .. })
    ));
}

#[test]
fn constant_x_has_no_layer_norm_spread_and_is_a_typed_error() {
    let rate = Rate::new(0.0).unwrap();
    let units = NoisyUnits::dropout(&[2.0, 2.0, 2.0], rate).unwrap();
    assert!(matches!(
        layer_norm_expectation(&units, &[1.0; 3], &[0.0; 3], 0.0),
        Err(Error::Degenerate { .. })
    ));
    assert!(matches!(
        layer_norm_expectation(&units, &[1.0; 2], &[0.0; 3], 0.0),
        Err(Error::LengthMismatch { .. })
    ));
}

/// A negative, infinite or NaN ε is refused as an invalid option by every
/// norm that takes one (one check, the crate's `check_eps`), and ε = 0 is
/// accepted.
#[test]
fn an_out_of_range_eps_is_an_invalid_option_everywhere() {
    use dropmc::formulas::bypass::damped;
    use dropmc::ops::{BatchNorm, LayerNorm, RmsNorm, Site};
    let site = Site::new(vec![1.0, 2.0, 4.0], vec![(vec![0.5, -1.0, 2.0], 0.3)]).unwrap();
    let invalid = |r: Result<(), Error>| matches!(r, Err(Error::InvalidOption { .. }));
    for eps in [-1e-5, f64::INFINITY, f64::NAN] {
        assert!(
            invalid(LayerNorm::plain(3, eps).map(|_| ())),
            "LayerNorm eps = {eps}"
        );
        assert!(
            invalid(RmsNorm::new(vec![1.0; 3], eps).map(|_| ())),
            "RMSNorm eps = {eps}"
        );
        let bn = BatchNorm::new(3).unwrap();
        assert!(
            invalid(bn.with_eps(eps).map(|_| ())),
            "BatchNorm eps = {eps}"
        );
        assert!(
            invalid(damped(&site, eps).map(|_| ())),
            "damped eps = {eps}"
        );
    }
    assert!(LayerNorm::plain(3, 0.0).is_ok());
    assert!(damped(&site, 0.0).is_ok());
}
