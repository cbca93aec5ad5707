//! Hostile input for the normalization layers, BatchNorm, attention, mask
//! shape, the stack configuration and the verify options: every public
//! constructor, formula and `eval` entry point returns a typed error or a
//! finite value — no panic, no hang, no silent NaN. (The foundation's are in
//! tests/hostile.rs.) Sample counts are kept tiny (0..6): the properties are
//! about validation and arithmetic, not about the estimates.

use dropmc::Error;
use dropmc::engine::Budget;
use dropmc::eval::{self, EvalOutput};
use dropmc::formulas::{batchnorm as fbn, bypass as fb, layernorm as fl, rmsnorm as fr};
use dropmc::ops::{BatchNorm, LayerNorm, Rate, RmsNorm, Site};
use proptest::prelude::*;
use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};

/// Any f64, weighted towards the troublesome ones.
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
        Just(-f64::MAX),
        Just(1e-300),
        Just(1e300),
        any::<f64>(),
        -2.0..2.0f64,
        -2.0..2.0f64,
    ]
}

/// A drop rate: mostly valid, including 0 and just below 1, sometimes not.
fn hostile_p() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(0.0),
        Just(1.0),
        Just(1.0 - f64::EPSILON / 2.0),
        Just(f64::NAN),
        Just(-0.1),
        0.0..1.0f64,
        0.0..1.0f64,
    ]
}

/// Vectors of hostile values, empty and d = 1 included.
fn hostile_vec() -> impl Strategy<Value = Vec<f64>> {
    prop_oneof![
        prop::collection::vec(hostile_f64(), 0..6),
        prop::collection::vec(-3.0..3.0f64, 1..6),
        (1usize..6).prop_map(|d| vec![0.0; d]),
        (1usize..6, hostile_f64()).prop_map(|(d, v)| vec![v; d]),
    ]
}

fn budget() -> impl Strategy<Value = Budget> {
    (0u64..6).prop_map(|samples| Budget { samples, seed: 3 })
}

/// Every number an `eval` output reports is finite.
fn all_finite(output: &EvalOutput) -> bool {
    output
        .results
        .iter()
        .all(|r| r.numbers().all(f64::is_finite))
}

/// The inputs of the running proptest case, which an error must be
/// explained by.
#[derive(Default, Clone)]
struct Case {
    vectors: Vec<Vec<f64>>,
    scalars: Vec<f64>,
    rates: Vec<f64>,
    samples: Option<u64>,
}

thread_local! {
    static CASE: std::cell::RefCell<Case> = std::cell::RefCell::new(Case::default());
}

/// Declares the running case's inputs: vectors, finite-or-not scalars,
/// drop rates and the sample count (if any).
fn case(vectors: &[&[f64]], scalars: &[f64], rates: &[f64], samples: Option<u64>) {
    CASE.with(|c| {
        *c.borrow_mut() = Case {
            vectors: vectors.iter().map(|v| v.to_vec()).collect(),
            scalars: scalars.to_vec(),
            rates: rates.to_vec(),
            samples,
        }
    });
}

/// True when the case's inputs can cause `e`: `Empty` needs an empty
/// vector, `NonFinite { index, value }` a vector holding that non-finite
/// value at that index (or a non-finite scalar), `LengthMismatch` two
/// vectors of different lengths, `InvalidRate` an invalid rate,
/// `TooFewSamples` one sample (eval takes 0: closed forms only); `Degenerate`, `Overflow` and
/// `TooLarge` (σ = 0, a constant input, a result past f64, a size limit)
/// are always possible; any other variant (a name lookup, a file, a
/// framework) cannot come from these numeric entry points.
fn explained(e: &Error) -> bool {
    CASE.with(|c| {
        let c = c.borrow();
        let same = |a: f64, b: f64| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
        match e {
            Error::Empty { .. } => c.vectors.iter().any(|v| v.is_empty()),
            Error::NonFinite { index, value, .. } => {
                // An input holding that value, or an overflow of a derived
                // quantity (a sum or square of the inputs): possible once
                // some input exceeds √f64::MAX / 12 ≈ 1.1e153 (12 terms at
                // most), charged from 1e150.
                let overflow = value.is_infinite()
                    && c.vectors
                        .iter()
                        .flatten()
                        .chain(&c.scalars)
                        .any(|x| x.abs() > 1e150);
                let held = c
                    .vectors
                    .iter()
                    .any(|v| v.get(*index).is_some_and(|x| same(*x, *value)))
                    || c.scalars.iter().chain(&c.rates).any(|x| same(*x, *value));
                !value.is_finite() && (overflow || held)
            }
            Error::LengthMismatch { .. } => c
                .vectors
                .iter()
                .any(|v| c.vectors.iter().any(|w| w.len() != v.len())),
            Error::InvalidRate { p } => c
                .rates
                .iter()
                .any(|r| same(*r, *p) && !(r.is_finite() && (0.0..1.0).contains(r))),
            // eval takes 0 samples (closed forms only); one cannot give a
            // standard error.
            Error::TooFewSamples { got, .. } => c.samples == Some(*got) && *got == 1,
            Error::Degenerate { .. }
            | Error::Overflow { .. }
            | Error::Unsupported { .. }
            | Error::TooLarge { .. }
            | Error::InvalidOption { .. } => true,
            _ => false,
        }
    })
}

/// `Ok` values must be finite; an error must be one the inputs explain
/// ([`explained`]) and say something.
fn finite_or_error(result: Result<Vec<f64>, Error>) -> Result<(), TestCaseError> {
    match result {
        Ok(values) => prop_assert!(values.iter().all(|v| v.is_finite()), "{values:?}"),
        Err(e) => prop_assert!(
            explained(&e) && !e.to_string().is_empty(),
            "unexplained {e:?}"
        ),
    }
    Ok(())
}

fn eval_ok(result: Result<EvalOutput, Error>) -> Result<(), TestCaseError> {
    match result {
        Ok(output) => prop_assert!(all_finite(&output)),
        Err(e) => prop_assert!(
            explained(&e) && !e.to_string().is_empty(),
            "unexplained {e:?}"
        ),
    }
    Ok(())
}

#[test]
fn a_bypass_whose_term_squares_overflow_is_an_error_not_nan() {
    // x = h + v = (0, 0, 0, 1) is harmless, but v² overflows and p = 0
    // makes the noise 0 · ∞ (a proptest draw once found this as NaN).
    let max = f64::MAX;
    let site = Site::new(
        vec![0.0, 0.0, max, 0.0],
        vec![(vec![0.0, 0.0, -max, 1.0], 0.0)],
    )
    .unwrap();
    for result in [
        fb::mean_of_v(&site),
        fb::rho2(&site),
        fb::damped(&site, 0.0),
    ] {
        assert!(matches!(result, Err(Error::Overflow { .. })), "{result:?}");
    }
    let ln = LayerNorm::plain(site.dim(), 0.0).unwrap();
    assert!(matches!(
        fb::corrected(&site, &ln),
        Err(Error::Overflow { .. })
    ));
}

fn config(cases: u32, file: &'static str) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::Direct(file),
        )),
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config(200, "proptest-regressions/hostile_norm.txt"))]

    #[test]
    fn norm_constructors_and_forward_are_errors_or_finite(
        gamma in hostile_vec(), beta in hostile_vec(), eps in hostile_f64(), z in hostile_vec()
    ) {
        if let Ok(ln) = LayerNorm::new(gamma.clone(), beta, eps) {
            prop_assert!(ln.eps().is_finite() && ln.eps() >= 0.0);
            let mut out = vec![0.0; z.len()];
            if ln.forward(&z, &mut out).is_ok() {
                prop_assert!(out.iter().all(|v| v.is_finite()), "{out:?}");
            }
        }
        if let Ok(rms) = RmsNorm::new(gamma, eps) {
            let mut out = vec![0.0; z.len()];
            if rms.forward(&z, &mut out).is_ok() {
                prop_assert!(out.iter().all(|v| v.is_finite()), "{out:?}");
            }
        }
    }

    #[test]
    fn layernorm_and_rmsnorm_formulas_are_errors_or_finite(
        x in hostile_vec(), p in hostile_p(), mu in hostile_f64(), sigma in hostile_f64(), eps in hostile_f64()
    ) {
        case(&[&x], &[mu, sigma, eps], &[p], None);
        finite_or_error(fl::input_moments(&x).map(|(a, b)| vec![a, b]))?;
        finite_or_error(fl::mean_of_m(&x).map(|v| vec![v]))?;
        finite_or_error(fr::mean_square(&x).map(|v| vec![v]))?;
        if let Ok(rate) = Rate::new(p) {
            finite_or_error(fl::variance_of_m(&x, rate).map(|v| vec![v]))?;
            finite_or_error(fl::mean_of_v(&x, rate).map(|v| vec![v]))?;
            finite_or_error(fl::shrink(mu, sigma, rate).map(|v| vec![v]))?;
            finite_or_error(fr::mean_of_r2(&x, rate).map(|v| vec![v]))?;
            if let Ok(ln) = LayerNorm::plain(x.len(), eps) {
                finite_or_error(fl::corrected(&x, &ln, rate))?;
                finite_or_error(fl::uncorrected(&x, &ln))?;
            }
            if let Ok(rms) = RmsNorm::new(vec![1.0; x.len()], eps) {
                finite_or_error(fr::corrected(&x, &rms, rate))?;
                finite_or_error(fr::uncorrected(&x, &rms))?;
            }
        }
    }

    #[test]
    fn site_and_bypass_formulas_are_errors_or_finite(
        h in hostile_vec(), v in hostile_vec(), p in hostile_p(), eps in hostile_f64()
    ) {
        case(&[&h, &v], &[eps], &[p], None);
        if let Ok(site) = Site::new(h.clone(), vec![(v, p)]) {
            finite_or_error(fb::mean_of_v(&site).map(|v| vec![v]))?;
            finite_or_error(fb::rho2(&site).map(|v| vec![v]))?;
            finite_or_error(fb::damped(&site, eps).map(|v| vec![v]))?;
            if let Ok(ln) = LayerNorm::plain(site.dim(), 0.0) {
                finite_or_error(fb::corrected(&site, &ln))?;
                finite_or_error(fb::uncorrected(&site, &ln))?;
            }
        }
        if let Ok(site) = Site::plain(&h, p) {
            prop_assert_eq!(site.dim(), h.len());
        }
    }

    #[test]
    fn batchnorm_constructors_and_formulas_are_errors_or_finite(
        channels in 0usize..4, gamma in hostile_vec(), beta in hostile_vec(),
        eps in hostile_f64(), momentum in hostile_f64(), p in hostile_p(),
        mean in hostile_vec(), var in hostile_vec(), mu in hostile_f64(), sigma in hostile_f64()
    ) {
        case(&[&gamma, &beta, &mean, &var], &[eps, momentum, mu, sigma], &[p], None);
        if let Ok(bn) = BatchNorm::new(channels) {
            prop_assert_eq!(bn.channels(), channels);
            let _ = bn.clone().with_affine(&gamma, &beta);
            if let Ok(bn) = bn.clone().with_eps(eps) {
                prop_assert!(bn.eps().is_finite() && bn.eps() >= 0.0);
            }
            if let Ok(bn) = bn.clone().with_momentum(momentum) {
                prop_assert!((0.0..=1.0).contains(&bn.momentum()));
            }
            let mut folded = bn;
            if folded.fold_dropout(p).is_ok() {
                prop_assert!(folded.running_var().iter().all(|v| v.is_finite()));
            }
        }
        if let Ok(rate) = Rate::new(p) {
            finite_or_error(fbn::c_squared(mu, sigma, rate).map(|v| vec![v]))?;
            finite_or_error(fbn::fold_running_var(&mean, &var, rate))?;
            finite_or_error(fbn::c_from_buffers(&mean, &var, rate))?;
        }
    }

    #[test]
    fn eval_norm_entry_points_are_errors_or_finite(
        x in hostile_vec(), h in hostile_vec(), g in prop::option::of(hostile_vec()),
        b in prop::option::of(hostile_vec()), p in hostile_p(), eps in hostile_f64(), budget in budget()
    ) {
        case(&[&x, &h, g.as_deref().unwrap_or(&[]), b.as_deref().unwrap_or(&[])], &[eps], &[p], Some(budget.samples));
        let ln_params = eval::LayerNormParams { gamma: g.clone(), beta: b.clone(), eps };
        eval_ok(eval::norm::ln(&x, p, ln_params.clone(), budget))?;
        eval_ok(eval::norm::rms(&x, p, g.clone(), eps, budget))?;
        eval_ok(eval::norm::bypass_with(&h, &x, p, ln_params, budget))?;
        let params = eval::norm::CompoundParams {
            gamma1: g.clone().unwrap_or_else(|| vec![1.0; x.len()]),
            beta1: b.clone().unwrap_or_else(|| vec![0.0; x.len()]),
            gamma2: g,
            beta2: b,
            eps,
        };
        eval_ok(eval::norm::compound(&x, p, params, budget))?;
    }

    #[test]
    fn eval_attn_and_bn_are_errors_or_finite(
        a in hostile_vec(), values in prop::option::of(hostile_vec()), mean in hostile_vec(),
        var in hostile_vec(), p in hostile_p(), budget in budget()
    ) {
        case(&[&a, values.as_deref().unwrap_or(&[]), &mean, &var], &[], &[p], Some(budget.samples));
        eval_ok(eval::attn::attn(&a, p, values.as_deref(), budget))?;
        // A probability row built from the vector, to get past validation.
        let total: f64 = a.iter().map(|v| if v.is_finite() { v.abs() } else { 0.0 }).sum();
        if total.is_finite() && total > 0.0 {
            let row: Vec<f64> = a.iter().map(|v| if v.is_finite() { v.abs() / total } else { 0.0 }).collect();
            eval_ok(eval::attn::attn(&row, p, values.as_deref(), budget))?;
        }
        eval_ok(eval::bn::bn(&mean, &var, p, budget))?;
    }

    #[test]
    fn stack_configuration_is_validated(
        width in 0usize..3, depth in 0usize..3, batch in 0usize..3, refresh_batches in 0u32..2,
        eval_examples in 0usize..3, input_mean in hostile_f64(), eps in hostile_f64(), p in hostile_p()
    ) {
        let cfg = dropmc::eval::stack::StackConfig {
            width, depth, batch, refresh_batches, eval_examples, input_mean, eps,
        };
        let subject = dropmc::ops::Subject::reference();
        if let Ok(table) = dropmc::eval::stack::run(cfg, &[p], &subject, Budget { samples: 2, seed: 1 }) {
            prop_assert!(width > 0 && depth > 0);
            let shown = format!("{table:?}");
            prop_assert!(!shown.contains("NaN"), "{}", shown);
        }
    }
}

proptest! {
    #![proptest_config(config(150, "proptest-regressions/hostile_norm_layers.txt"))]

    /// Linear and BatchNorm on hostile matrices: a typed error or finite.
    #[test]
    fn linear_and_batchnorm_forward_are_errors_or_finite(
        w in prop::collection::vec(hostile_f64(), 0..5), b in hostile_vec(), x in hostile_vec(),
        rows in 1usize..3, p in hostile_p()
    ) {
        let cols = w.len() / rows;
        let weight = nalgebra::DMatrix::from_row_slice(rows, cols, &w[..rows * cols]);
        if let Ok(linear) = dropmc::ops::Linear::new(weight, nalgebra::DVector::from_vec(b)) {
            let batch = x.len() / cols.max(1);
            if cols > 0 && batch > 0 {
                let input = nalgebra::DMatrix::from_column_slice(cols, batch, &x[..cols * batch]);
                if let Ok(y) = linear.forward(&input) {
                    prop_assert!(y.iter().all(|v| v.is_finite()), "{y}");
                }
            }
        }
        let channels = rows;
        let batch = x.len() / channels;
        if batch > 0 {
            let input = nalgebra::DMatrix::from_column_slice(channels, batch, &x[..channels * batch]);
            let mut bn = BatchNorm::new(channels).unwrap();
            if let Ok(y) = bn.forward_train(&input) {
                prop_assert!(y.iter().all(|v| v.is_finite()), "{y}");
                prop_assert!(bn.running_var().iter().chain(bn.running_mean()).all(|v| v.is_finite()));
            }
            if bn.fold_dropout(p).is_ok() {
                prop_assert!(bn.running_var().iter().all(|v| v.is_finite() && *v > 0.0));
            }
            if let Ok(y) = bn.forward_eval(&input) {
                prop_assert!(y.iter().all(|v| v.is_finite()), "{y}");
            }
        }
    }

    /// The compound, attention and mask-shape formulas: errors or finite on
    /// hostile vectors (attention and mask shape take validated inputs:
    /// a probability row and finite values of moderate size).
    #[test]
    fn compound_attention_and_mask_shape_formulas_are_errors_or_finite(
        x in hostile_vec(), g in hostile_vec(), b in hostile_vec(), p in hostile_p(),
        a in prop::collection::vec(0.0..1.0f64, 1..6), v in prop::collection::vec(-1e100..1e100f64, 1..6),
        positions in 0usize..5, d in 0usize..5
    ) {
        let Ok(rate) = Rate::new(p) else { return Ok(()) };
        let compound = LayerNorm::new(g.clone(), b.clone(), 0.0)
            .and_then(|ln1| Ok((ln1, LayerNorm::new(g, b, 1e-5)?)))
            .and_then(|(ln1, ln2)| dropmc::formulas::compound::compound(&x, &ln1, &ln2, rate));
        if let Ok(c) = compound {
            let shown = format!("{c:?}");
            prop_assert!(!shown.contains("NaN") && !shown.contains("inf"), "{}", shown);
        }
        let total: f64 = a.iter().sum();
        if total > 0.0 {
            use dropmc::formulas::attention as fa;
            let row: Vec<f64> = a.iter().map(|t| t / total).collect();
            let vals = &v[..v.len().min(row.len())];
            let row = &row[..vals.len()];
            let all = [
                fa::row_sum_mean(row),
                fa::row_sum_variance(row, rate),
                fa::output_mean(row, vals),
                fa::output_variance(row, vals, rate),
            ];
            prop_assert!(all.iter().all(|t| t.is_finite()), "{all:?}");
            prop_assert!(fa::entry_mean(row).iter().all(|t| t.is_finite()));
        }
        use dropmc::formulas::mask_shape as fm;
        let block = &v[..(positions * d).min(v.len())];
        let values: Vec<f64> = fm::independent_variance(block, d, rate)
            .into_iter()
            .chain(fm::shared_variance(block, d, rate))
            .chain(fm::zero_column_probability(positions, d, true, rate))
            .chain(fm::zero_column_probability(positions, d, false, rate))
            .chain([fm::independent_never_mixed(positions, d, 3, rate)])
            .collect();
        prop_assert!(values.iter().all(|t| t.is_finite()), "{values:?}");
    }
}

/// A quickcheck newtype for the troublesome corners of f64.
#[derive(Debug, Clone, Copy)]
struct Hostile(f64);

impl Arbitrary for Hostile {
    fn arbitrary(g: &mut Gen) -> Self {
        let corners = [
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            0.0,
            -0.0,
            1.0,
            1.0 - f64::EPSILON / 2.0,
            f64::MIN_POSITIVE / 8.0,
            f64::MAX,
            1e-300,
            1e300,
        ];
        Hostile(if bool::arbitrary(g) {
            *g.choose(&corners).unwrap_or(&0.0)
        } else {
            f64::arbitrary(g)
        })
    }
}

/// A quickcheck newtype for the domain of the moments: a vector of
/// hostile entries, empty and d = 1 included.
#[derive(Debug, Clone)]
struct HostileVec(Vec<f64>);

impl Arbitrary for HostileVec {
    fn arbitrary(g: &mut Gen) -> Self {
        let d = usize::arbitrary(g) % 6;
        HostileVec((0..d).map(|_| Hostile::arbitrary(g).0).collect())
    }
    fn shrink(&self) -> Box<dyn Iterator<Item = Self>> {
        Box::new(self.0.shrink().map(HostileVec))
    }
}

#[test]
fn quickcheck_shrink_factors_are_errors_or_in_the_unit_interval() {
    fn prop(x: HostileVec, p: Hostile, eps: Hostile) -> TestResult {
        // `fr::shrink` takes a validated ε (RmsNorm::new checks it).
        let Ok(rate) = Rate::new(p.0) else {
            return TestResult::discard();
        };
        if !(eps.0.is_finite() && eps.0 >= 0.0) {
            return TestResult::discard();
        }
        // c from the moments (eps = 0) and with eps: finite and in (0, 1].
        let ok = |c: f64| c.is_finite() && c > 0.0 && c <= 1.0;
        let via_moments =
            fl::input_moments(&x.0).and_then(|(mu, s2)| fl::shrink(mu, s2.sqrt(), rate));
        let rms = fr::mean_square(&x.0).map(|r2| fr::shrink(r2, eps.0, rate));
        let moments_ok = via_moments.as_ref().map_or(true, |c| ok(*c));
        let rms_ok = rms.as_ref().map_or(true, |c| ok(*c));
        TestResult::from_bool(moments_ok && rms_ok)
    }
    QuickCheck::new()
        .tests(300)
        .quickcheck(prop as fn(HostileVec, Hostile, Hostile) -> TestResult);
}
