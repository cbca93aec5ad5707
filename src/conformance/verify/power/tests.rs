//! Unit tests of the power estimates.

use super::evidence::ComponentEvidence;
use super::*;
use crate::stats::critical_z;

#[test]
fn rejection_probability_is_alpha_at_zero_and_one_half_at_the_critical_value() {
    let alpha = crate::stats::assertion_alpha();
    assert!((rejection_probability(0.0) - alpha).abs() < 1e-3 * alpha);
    assert!((rejection_probability(critical_z()) - 0.5).abs() < 1e-9);
}

#[test]
fn clopper_pearson_bounds_match_closed_forms() {
    // k = n: tail^(1/n); k = 0: 0.
    assert_eq!(clopper_pearson_lower(10, 10, 0.05), 0.05f64.powf(0.1));
    assert_eq!(clopper_pearson_lower(0, 10, 0.05), 0.0);
    // The bisection finds the root of statrs' binomial tail, itself a
    // regularized incomplete beta accurate to about 10⁻¹⁴ near these
    // arguments; the tail's slope here is about 2, so θ is within half
    // that. 10⁻¹³ tells a correct root from any other formula.
    const ROOT_ROOM: f64 = 1e-13;
    // k = 1 of 2: solve 1 − (1−θ)² = 0.05, θ = 1 − √0.95 = 0.025321.
    let root = 1.0 - 0.95f64.sqrt();
    assert!((clopper_pearson_lower(1, 2, 0.05) - root).abs() <= ROOT_ROOM);
    // Two-sided at 95 %, 1 of 3 seeds: the lower end solves
    // 1 − (1−θ)³ = 0.025, θ = 1 − 0.975^(1/3); the upper end leaves
    // P(X ≤ 1 | θ) = (1−θ)³ + 3θ(1−θ)² = 0.025.
    let (lo, hi) = clopper_pearson(1, 3, 0.95);
    let lo_exact = 1.0 - 0.975f64.cbrt();
    assert!((lo - lo_exact).abs() <= ROOT_ROOM, "{lo} {lo_exact}");
    let below = (1.0 - hi).powi(3) + 3.0 * hi * (1.0 - hi).powi(2);
    assert!((below - 0.025).abs() <= ROOT_ROOM, "{hi} {below}");
    // 0 of 3: [0, 1 − 0.025^(1/3)]; 3 of 3: [0.025^(1/3), 1].
    let (zero_lo, zero_hi) = clopper_pearson(0, 3, 0.95);
    assert_eq!(zero_lo, 0.0);
    assert!((zero_hi - (1.0 - 0.025f64.cbrt())).abs() <= 4.0 * f64::EPSILON);
    let (all_lo, all_hi) = clopper_pearson(3, 3, 0.95);
    assert!((all_lo - 0.025f64.cbrt()).abs() <= 4.0 * f64::EPSILON);
    assert_eq!(all_hi, 1.0);
}

#[test]
fn an_infinite_z_in_one_seed_of_three_is_one_certain_detection_not_a_mean() {
    // One seed with an infinite z and two with z = 0.5: a power near
    // 1/3, never the 1 − 10⁻¹² a ±10⁶ stand-in averaged into z̄ gives.
    let mut e = ComponentEvidence::default();
    for z in [None, Some(0.5), Some(0.5)] {
        e.add(z);
    }
    let point = 1.0 - e.miss(None);
    let expected = 1.0 - (2.0 / 3.0) * (1.0 - rejection_probability(0.5));
    assert!(
        (point - expected).abs() <= 4.0 * f64::EPSILON,
        "{point} {expected}"
    );
    assert!(point < 0.34, "{point}");

    // The same through a row and its table: one claim, three seeds.
    let registry = Registry::default();
    let claim = selected_claims(
        &registry,
        &PowerOptions {
            replication: Replication {
                seeds: 3,
                first_seed: 1,
                family: None,
            },
            samples: None,
        },
    )[0];
    let runs: Vec<RunRecord> = [None, Some(0.5), Some(0.5)]
        .into_iter()
        .enumerate()
        .map(|(seed, z)| RunRecord {
            subject: "planted".into(),
            seed: seed as u64,
            claims: vec![ClaimOutcome {
                id: claim.id().into(),
                failed: z.is_none(),
                errored: false,
                samples: claim.default_samples(),
                z: vec![z],
            }],
        })
        .collect();
    let layer = crate::ops::InvertedDropout;
    let row = measure(&Candidate::new(&layer), &[claim], &[], &runs);
    assert!(
        (row.from_effect - expected).abs() <= 4.0 * f64::EPSILON,
        "{row:?}"
    );
    assert_eq!((row.detected.count, row.certain.count), (1, 1), "{row:?}");
    let shown = table_fitted(
        &PowerRun {
            samples_cap: None,
            claims: vec![claim.id()],
            reference: row.clone(),
            rows: vec![row],
            unusable: vec![],
        },
        200,
    );
    // 1 of 3 at 95 %: the textbook interval [0.0084, 0.9057].
    assert!(shown.contains("1/3       [0.008, 0.906]"), "{shown}");
    assert!(!shown.contains("1e-12"), "{shown}");
    // The bound at the default budget credits the certain seed only its
    // one-sided lower bound 1 − 0.95^(1/3) and the finite ones only the
    // size α (their bound 0.5 − z_c/√2 on |δ| is below 0).
    let bound = 1.0 - e.miss(Some(100.0));
    let certain_lo = 1.0 - 0.95f64.cbrt();
    let expected = 1.0 - (1.0 - certain_lo) * (1.0 - rejection_probability(0.0));
    assert!(
        (bound - expected).abs() <= 4.0 * f64::EPSILON,
        "{bound} {expected}"
    );
}
