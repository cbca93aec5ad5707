//! The size of each dropout claim component's test at the claim's minimum
//! budget, on the path the report runs for the mathematics (the fast
//! path), listed and asserted at most 2α (the suite's charge per mean
//! component, [`dropmc::stats::MEAN_SIZE_FACTOR`]).
//!
//! Where the statistic is a function of a binomial count the size is exact:
//! the test's rejection set over the count is enumerated under the count's
//! law ([`dropmc::stats::size_over_counts`]). A scaled count (a unit's
//! output or its powers, the pair form of a unit's variance) is `c K / n`
//! with `K ~ Binomial(n, keep)`; an indicator's count is `Binomial(n, p₀)`.
//! A mean of a non-lattice statistic (the sum `S` over units) is bounded by
//! the Cramér-type rule of [`dropmc::stats::Statistic`] with the skewness of
//! `S` computed from its exact law (all `2^d` masks), a leading-order bound
//! stated as such.
//!
//! No sampling: nothing here spends false-alarm budget.

use dropmc::claims::{Claim, registry};
use dropmc::engine::Budget;
use dropmc::formulas::dropout as f;
use dropmc::ops::Rate;
use dropmc::stats::{
    MEAN_SIZE_FACTOR, Statistic, assertion_alpha, binomial_test_size, critical_z,
    two_point_mean_t_size, two_point_variance_t_size,
};

/// One row of the list: claim, component, budget, size / α.
struct Row {
    id: &'static str,
    component: usize,
    samples: u64,
    size_over_alpha: f64,
    how: &'static str,
}

fn dropout_claims() -> Vec<&'static dyn Claim> {
    registry()
        .into_iter()
        .filter(|c| c.family() == "dropout")
        .collect()
}

/// The claims on the sum `S` of the units (not two-point per draw).
fn is_sum(id: &str) -> bool {
    id.starts_with("dropout.sum_") || id.starts_with("dropout.worked_")
}

/// The exact size of `statistic`'s fast-path test of a two-point
/// statistic with `P(nonzero) = keep` at `n` draws.
fn two_point_size(statistic: Statistic, n: u64, keep: f64) -> (f64, &'static str) {
    match statistic {
        Statistic::ScaledCount { .. } => {
            (binomial_test_size(n, keep), "exact binomial, enumerated")
        }
        other => unreachable!("not a scaled count: {other:?}"),
    }
}

/// The Cramér-type size ratio `cosh(γ c³ / (3 √n))` of a mean test whose
/// per-draw statistic has skewness `γ` (module docs of `stats::statistic`).
fn cramer_ratio(skewness: f64, n: u64) -> f64 {
    let c = critical_z();
    (skewness.abs() * c * c * c / (3.0 * (n as f64).sqrt())).cosh()
}

/// The skewness of `S = Σ_k m_k x_k / q` from its exact law over all masks.
fn sum_skewness(x: &[f64], p: f64) -> f64 {
    let q = 1.0 - p;
    let d = x.len();
    let mut law = Vec::with_capacity(1 << d);
    for bits in 0u32..(1 << d) {
        let kept = bits.count_ones() as i32;
        let w = q.powi(kept) * p.powi(d as i32 - kept);
        let s: f64 = (0..d)
            .filter(|k| bits >> k & 1 == 1)
            .map(|k| x[k] / q)
            .sum();
        law.push((w, s));
    }
    let mean: f64 = law.iter().map(|(w, s)| w * s).sum();
    let m = |r: i32| law.iter().map(|(w, s)| w * (s - mean).powi(r)).sum::<f64>();
    m(3) / m(2).powf(1.5)
}

fn sizes() -> Vec<Row> {
    let alpha = assertion_alpha();
    let mut rows = Vec::new();
    for claim in dropout_claims() {
        let id = claim.id();
        let statistic = claim.statistic();
        // The exact tests are valid from one draw on, where they are merely
        // powerless; the list takes them at the budget from which the claim
        // is conclusive on either path (the generic path tests a scaled
        // count as a mean, [`Statistic::on_generic_path`]).
        let n = claim
            .min_samples()
            .max(statistic.on_generic_path().min_samples());
        let analytic = claim.analytic().unwrap();
        match statistic {
            Statistic::ScaledCount { keep } => {
                for (k, &target) in analytic.iter().enumerate() {
                    let (size, how) = if target == 0.0 {
                        (0.0, "exact comparison (all draws 0)")
                    } else {
                        two_point_size(statistic, n, keep)
                    };
                    rows.push(Row {
                        id,
                        component: k,
                        samples: n,
                        size_over_alpha: size / alpha,
                        how,
                    });
                }
            }
            Statistic::Indicator { trials } => {
                for (k, &p0) in analytic.iter().enumerate() {
                    rows.push(Row {
                        id,
                        component: k,
                        samples: n,
                        size_over_alpha: binomial_test_size(n * trials, p0) / alpha,
                        how: "exact binomial, enumerated",
                    });
                }
            }
            Statistic::Mean { .. } if is_sum(id) && id.ends_with("_mean") => {
                let (x, p): (&[f64], f64) = if id == "dropout.sum_mean" {
                    (
                        &dropmc::claims::dropout::UNIT_X,
                        dropmc::claims::dropout::UNIT_P,
                    )
                } else {
                    (
                        &dropmc::claims::dropout::WORKED_X[..12],
                        dropmc::claims::dropout::WORKED_P,
                    )
                };
                // The worked case's S = 2K, K ~ Binomial(512, 1/2), is
                // symmetric: skewness 0 (checked on 12 units, where the
                // exact law is enumerable and symmetric alike).
                let gamma = sum_skewness(x, p);
                rows.push(Row {
                    id,
                    component: 0,
                    samples: n,
                    size_over_alpha: cramer_ratio(gamma, n),
                    how: "student-t, Cramér bound with exact skewness",
                });
            }
            // The sums' single-draw sample variances (`dropout.sum_variance`,
            // `dropout.worked_512_variance`): no bound is stated here (see
            // the report of issue 22).
            Statistic::Mean { .. } if is_sum(id) => {}
            // A per-unit claim declaring a mean: its draws are still two-point
            // (keep q, or 2pq for the pair form), tested by Student-t.
            Statistic::Mean { .. } => {
                let p = dropmc::claims::dropout::UNIT_P;
                let keep = if id == "dropout.variance" {
                    2.0 * p * (1.0 - p)
                } else {
                    1.0 - p
                };
                for (k, &target) in analytic.iter().enumerate() {
                    let size = if target == 0.0 {
                        0.0
                    } else {
                        two_point_mean_t_size(n, keep)
                    };
                    rows.push(Row {
                        id,
                        component: k,
                        samples: n,
                        size_over_alpha: size / alpha,
                        how: "student-t, enumerated",
                    });
                }
            }
            Statistic::Violations => {}
        }
    }
    rows
}

#[test]
fn every_dropout_component_has_size_at_most_two_alpha_at_its_minimum_budget() {
    let rows = sizes();
    let mut shown = String::from("claim component samples size/alpha how\n");
    for r in &rows {
        shown.push_str(&format!(
            "{} {} {} {:.3} {}\n",
            r.id,
            r.component,
            r.samples,
            r.size_over_alpha + 0.0,
            r.how
        ));
    }
    println!("{shown}");
    assert!(
        rows.iter()
            .any(|r| r.id == "dropout.variance" && r.samples <= 1750),
        "{shown}"
    );
    for r in &rows {
        assert!(r.size_over_alpha <= MEAN_SIZE_FACTOR, "{shown}");
    }
}

#[test]
fn the_per_unit_variance_runs_the_pair_form_it_declares() {
    // The pair form's mean over n pairs is c J / n with J an integer count
    // of discordant pairs, c = x²/(2q²); the single-draw sample variance
    // c'² K (n − K)/(n (n − 1)) (c' = x/q) is not on that lattice. The
    // budget (odd, not a multiple of a chunk) keeps the two apart.
    let claim = dropout_claims()
        .into_iter()
        .find(|c| c.id() == "dropout.variance")
        .unwrap();
    let budget = Budget::new(1_751, 7).unwrap();
    let estimates = claim.fast_estimate(budget).unwrap().unwrap();
    let rate = Rate::new(dropmc::claims::dropout::UNIT_P).unwrap();
    for (e, &x) in estimates.iter().zip(&dropmc::claims::dropout::UNIT_X) {
        if x == 0.0 {
            assert_eq!(e.value, 0.0);
            continue;
        }
        let c = x * x / (2.0 * rate.q() * rate.q());
        let count = e.value * budget.samples as f64 / c;
        assert!((count - count.round()).abs() < 1e-6, "x = {x}: {count}");
        let _ = f::unit_variance(x, rate);
    }
}

#[test]
fn the_single_draw_variance_the_fast_path_ran_before_is_oversized_there() {
    // The fault this list exists for (issue 22): at the pair form's budget
    // 1 750 the single-draw sample variance with its fourth-moment SE has
    // exact size 233 α; it is below 2 α only from about 37 500 draws.
    let alpha = assertion_alpha();
    assert!(two_point_variance_t_size(1750, 0.7) / alpha > 100.0);
    assert!(two_point_variance_t_size(37_489, 0.7) / alpha < MEAN_SIZE_FACTOR);
}
