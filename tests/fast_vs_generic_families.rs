//! The switch to the fast sampler is honest: for every quantity of the
//! dropout, attention, mask-shape and ensemble families, and of `eval
//! moments|attn`, the fast estimate agrees with the generic one on the same
//! configuration.
//!
//! The two estimates read independent streams (different seeds), so each
//! component is a two-sided z-test of their difference,
//! `z = (a − b)/√(se_a² + se_b²)`, at the suite's per-assertion level
//! (`common::assert_same`: Student-t at the smaller dof). Statistical
//! assertions, recorded by `tests/common` and summed by `tests/zz_budget.rs`:
//!
//! * `every_claim_estimate_agrees_with_the_generic_path`: every component of
//!   every claim that declares the bit-mask fast path ([`FastPath::Masks`]),
//!   once (counted as they run);
//! * `eval_moments_agrees_with_a_per_element_sampler`: `E[z]`, `E[z²]`,
//!   `Var z` for 4 units, `E[S]`, `Var S`: 14;
//! * `eval_attn_agrees_with_a_per_element_sampler`: `E[b]` for 5 keys,
//!   `E[R]`, `Var R`, `E[o]`, `Var o`: 9;
//! * `a_variance_standard_error_matches_the_spread_of_replicates`: 1.
//!
//! A component whose two standard errors are both zero (a unit with
//! `x_k = 0`: every draw is exactly 0 on both paths) must agree exactly.

use dropmc::claims::{Claim, FastPath, registry};
use dropmc::engine::{Budget, Sampler, Stream, derive_seed, estimate};
use dropmc::ops::fast::{attention_row, dropout};
use dropmc::ops::{DropoutLayer, InvertedDropout, Subject, TrainPass};
use dropmc::stats::Estimate;

mod common;

fn assert_agree(what: &str, fast: Estimate, generic: Estimate) {
    let se = (fast.stderr.powi(2) + generic.stderr.powi(2)).sqrt();
    if se == 0.0 {
        assert_eq!(fast.value, generic.value, "{what}: both exact, yet differ");
        return;
    }
    common::assert_same(&format!("{what} (fast vs generic)"), fast, generic);
}

/// The claims that declare the bit-mask fast path.
fn mask_path_claims() -> Vec<&'static dyn Claim> {
    registry()
        .into_iter()
        .filter(|c| c.fast_path() == Some(FastPath::Masks))
        .collect()
}

/// A claim has a fast estimator exactly when it declares a fast path
/// ([`Claim::fast_path`]), so that the cross-checks here and in
/// `tests/fast_vs_generic.rs`, which run every claim that declares one,
/// miss none.
#[test]
fn a_claim_has_a_fast_estimator_exactly_when_it_declares_one() {
    let budget = Budget::new(1_000, 1).unwrap();
    for claim in registry() {
        let has_fast = claim.fast_estimate(budget).is_some();
        assert_eq!(
            has_fast,
            claim.fast_path().is_some(),
            "{}: fast estimate {has_fast}, declares {:?} (Claim::fast_path)",
            claim.id(),
            claim.fast_path()
        );
    }
}

#[test]
fn every_claim_estimate_agrees_with_the_generic_path() {
    let subject = Subject::reference();
    let claims = mask_path_claims();
    assert!(!claims.is_empty());
    for claim in claims {
        let samples = claim.default_samples();
        let fast_budget = Budget::new(samples, derive_seed(101, claim.id())).unwrap();
        // The generic path is the slow one: a tenth of the budget (whose
        // larger standard error the z-test includes).
        let generic_budget = Budget::new(samples / 10, derive_seed(202, claim.id())).unwrap();
        let fast = claim
            .fast_estimate(fast_budget)
            .expect("a fast estimator")
            .expect("runs");
        let generic = claim.estimate(&subject, generic_budget).expect("runs");
        assert_eq!(fast.len(), generic.len(), "{}", claim.id());
        assert_eq!(
            fast.len(),
            claim.analytic().unwrap().len(),
            "{}",
            claim.id()
        );
        for (k, (f, g)) in fast.iter().zip(&generic).enumerate() {
            assert_agree(&format!("{}[{k}]", claim.id()), *f, *g);
        }
    }
}

/// A per-element sampler written here: `z = InvertedDropout(x)`, two
/// independent passes per draw, the variances by the pair form
/// `(t − t')²/2`. Per draw it writes `[z, z², (z − z')²/2, S, (S − S')²/2]`.
struct MomentsByElement<'a> {
    x: &'a [f64],
    p: f64,
}

impl Sampler for MomentsByElement<'_> {
    type Scratch = (Vec<f64>, Vec<f64>, Vec<bool>);
    fn dim(&self) -> usize {
        3 * self.x.len() + 2
    }
    fn scratch(&self) -> Self::Scratch {
        let d = self.x.len();
        (vec![0.0; d], vec![0.0; d], vec![false; d])
    }
    fn draw(
        &self,
        rng: &mut Stream,
        (z, z_alt, mask): &mut Self::Scratch,
        out: &mut [f64],
    ) -> Result<(), dropmc::Error> {
        InvertedDropout.forward_train(TrainPass::new(self.x, z, mask), self.p, rng)?;
        InvertedDropout.forward_train(TrainPass::new(self.x, z_alt, mask), self.p, rng)?;
        let d = self.x.len();
        for k in 0..d {
            out[k] = z[k];
            out[d + k] = z[k] * z[k];
            out[2 * d + k] = 0.5 * (z[k] - z_alt[k]).powi(2);
        }
        let (s, s_alt): (f64, f64) = (z.iter().sum(), z_alt.iter().sum());
        out[3 * d] = s;
        out[3 * d + 1] = 0.5 * (s - s_alt).powi(2);
        Ok(())
    }
}

#[test]
fn eval_moments_agrees_with_a_per_element_sampler() {
    let x = [1.5, -0.25, 2.0, 0.75];
    let p = 0.2;
    let fast = dropout::moments(&x, p, Budget::new(2_000_000, 31).unwrap()).unwrap();
    let generic = estimate(
        &MomentsByElement { x: &x, p },
        Budget::new(200_000, 32).unwrap(),
    )
    .unwrap()
    .estimates();
    let d = x.len();
    for k in 0..d {
        assert_agree(&format!("E[z_{k}]"), fast.unit_mean[k], generic[k]);
        assert_agree(&format!("E[z_{k}^2]"), fast.unit_second[k], generic[d + k]);
        assert_agree(
            &format!("Var z_{k}"),
            fast.unit_variance[k],
            generic[2 * d + k],
        );
    }
    assert_agree("E[S]", fast.sum_mean, generic[3 * d]);
    assert_agree("Var S", fast.sum_variance, generic[3 * d + 1]);
}

/// Per draw `[b, R, (R − R')²/2, o, (o − o')²/2]` from two passes of the
/// reference layer's `forward_attention`.
struct RowByElement<'a> {
    a: &'a [f64],
    v: &'a [f64],
    p: f64,
}

impl Sampler for RowByElement<'_> {
    type Scratch = (Vec<f64>, Vec<f64>, Vec<bool>);
    fn dim(&self) -> usize {
        self.a.len() + 4
    }
    fn scratch(&self) -> Self::Scratch {
        let d = self.a.len();
        (vec![0.0; d], vec![0.0; d], vec![false; d])
    }
    fn draw(
        &self,
        rng: &mut Stream,
        (b, b_alt, mask): &mut Self::Scratch,
        out: &mut [f64],
    ) -> Result<(), dropmc::Error> {
        InvertedDropout.forward_attention(TrainPass::new(self.a, b, mask), self.p, rng)?;
        InvertedDropout.forward_attention(TrainPass::new(self.a, b_alt, mask), self.p, rng)?;
        let d = self.a.len();
        let dot = |b: &[f64]| b.iter().zip(self.v).map(|(b, v)| b * v).sum::<f64>();
        let (r, r_alt): (f64, f64) = (b.iter().sum(), b_alt.iter().sum());
        let (o, o_alt) = (dot(b), dot(b_alt));
        out[..d].copy_from_slice(b);
        out[d] = r;
        out[d + 1] = 0.5 * (r - r_alt).powi(2);
        out[d + 2] = o;
        out[d + 3] = 0.5 * (o - o_alt).powi(2);
        Ok(())
    }
}

#[test]
fn eval_attn_agrees_with_a_per_element_sampler() {
    let a = [0.05, 0.15, 0.2, 0.25, 0.35];
    let v = [2.0, -1.0, 0.5, 1.5, -3.0];
    let p = 0.3;
    let fast = attention_row::row(&a, &v, p, Budget::new(2_000_000, 33).unwrap()).unwrap();
    let generic = estimate(
        &RowByElement { a: &a, v: &v, p },
        Budget::new(200_000, 34).unwrap(),
    )
    .unwrap()
    .estimates();
    let d = a.len();
    for (k, (f, g)) in fast.entry_mean.iter().zip(&generic).enumerate() {
        assert_agree(&format!("E[b_{k}]"), *f, *g);
    }
    assert_agree("E[R]", fast.row_sum_mean, generic[d]);
    assert_agree("Var R", fast.row_sum_variance, generic[d + 1]);
    assert_agree("E[o]", fast.output_mean, generic[d + 2]);
    assert_agree("Var o", fast.output_variance, generic[d + 3]);
}

/// The standard error the fast path reports for a variance
/// ([`dropmc::ops::fast::PowerSums::variance`]) is the spread of the estimate:
/// over `R` independent replicates of `n` masks, the sample variance of the
/// `R` estimates of `Var S` against the mean reported `SE²`. Each estimate
/// is a mean of `n = 5000` terms, so nearly normal, and the sample variance
/// of `R` normal values has relative standard deviation `√(2/(R − 1))`.
#[test]
fn a_variance_standard_error_matches_the_spread_of_replicates() {
    let x = [0.5, -1.2, 3.0, 0.0, 2.0];
    let replicates = 400;
    let estimates: Vec<Estimate> = (0..replicates)
        .map(|r| {
            let b = Budget::new(5_000, derive_seed(r, "replicate")).unwrap();
            dropout::sum_power_sums(&x, 0.3, b).unwrap().variance()
        })
        .collect();
    let rf = replicates as f64;
    let mean = estimates.iter().map(|e| e.value).sum::<f64>() / rf;
    let spread = estimates
        .iter()
        .map(|e| (e.value - mean).powi(2))
        .sum::<f64>()
        / (rf - 1.0);
    let reported = estimates.iter().map(|e| e.stderr.powi(2)).sum::<f64>() / rf;
    // The sample variance of the replicates has SE ≈ σ²√(2/(R − 1)) (normal
    // replicates), so z is a normal score; one assertion at the per-assertion
    // level through the suite's critical value.
    let z = (spread - reported) / (reported * (2.0 / (rf - 1.0)).sqrt());
    common::record(1, 1.0);
    assert!(
        z.abs() <= dropmc::stats::critical_z(),
        "spread {spread} vs reported SE² {reported}: z = {z}"
    );
}

/// Bad input to the family kernels is a typed error, never a panic or NaN.
#[test]
fn bad_input_to_the_family_kernels_is_a_typed_error() {
    let b = Budget::new(100, 1).unwrap();
    assert!(dropout::sum_power_sums(&[1.0, f64::NAN], 0.1, b).is_err());
    assert!(dropout::unit_raw_moments(&[1.0], 1.0, 2, b).is_err());
    assert!(dropout::unit_variances(&[], 0.1, b).is_err());
    assert!(dropout::kept_count_pmf(0, 0.1, b).is_err());
    assert!(attention_row::row(&[0.5, 0.5], &[1.0], 0.1, b).is_err());
    assert!(attention_row::row_sums(&[0.5, f64::INFINITY], &[1.0, 1.0], 0.1, b).is_err());
    assert!(
        dropmc::ops::fast::mask_shape::column_sum_variances::<3>(&[1.0; 11], 4, false, 0.3, b)
            .is_err()
    );
    assert!(
        dropmc::ops::fast::mask_shape::zero_column_probabilities(30, 3, false, 0.3, b).is_err()
    );
    assert!(dropmc::ops::fast::ensemble::log_sum_exp_gap_kernel(&[1e3], 0.3).is_err());
    assert!(dropmc::ops::fast::ensemble::relu_gap_kernel(&[1.0, 2.0], &[1.0], 0.0, 0.3).is_err());
}
