//! The mutant gallery: every non-equivalent mutant is killed, the subtle ones
//! with a stated power, and the mask shape is told from outputs alone.
//!
//! Kills are expected failures and spend no false-alarm budget. The two
//! equivalent mutants must survive; their results are bit-identical to the
//! reference's (see `tests/zz_budget.rs`).

mod common;

use dropmc::claims::{Verdict, check, registry};
use dropmc::conformance::mutants::{InfiniteZ, gallery, kill_matrix, rejection_power};
use dropmc::conformance::{self, Options};
use dropmc::engine::DEFAULT_SEED;
use dropmc::engine::{Budget, derive_seed};
use dropmc::ops::{InvertedDropout, MaskShape, Subject};
use dropmc::stats::critical_z;
use statrs::distribution::{ContinuousCDF, Normal};

/// The kill test's cap on draws per claim: 1/10 of the kill matrix's default
/// ([`dropmc::conformance::mutants::KILL_SAMPLES`]). The least certain kill at this cap is
/// `rate_off_2pct` by `semantics.keep_fraction` (λ ≈ 11, miss ≈ 4e-6), and
/// that mutant is also killed with certainty by the deterministic
/// `semantics.p_zero_identity` (no dropped unit among 2000 · 11 at a 2 %
/// drop rate: probability 0.98^22000 ≈ 1e-193).
const TEST_KILL_SAMPLES: u64 = 2_000;

/// Power the subtle kills must reach: a miss would be a one-in-a-billion
/// event.
const REQUIRED_POWER: f64 = 1.0 - 1e-9;

#[test]
fn the_gallery_has_at_least_14_mutants_with_documented_mistakes() {
    let g = gallery();
    assert!(g.len() >= 14, "{} mutants", g.len());
    assert!(g.iter().filter(|m| m.equivalent.is_none()).count() >= 14);
    let mut ids: Vec<_> = g.iter().map(|m| m.id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), g.len(), "mutant ids are unique");
    for m in &g {
        assert!(!m.mistake.is_empty() && !m.source.is_empty(), "{}", m.id);
        assert_eq!(m.layer.name(), m.id);
    }
    let equivalent: Vec<_> = g
        .iter()
        .filter(|m| m.equivalent.is_some())
        .map(|m| m.id)
        .collect();
    assert_eq!(equivalent, ["rescale_dropped", "keep_above_p"]);
    let subtle: Vec<_> = g
        .iter()
        .filter(|m| m.effect.is_some())
        .map(|m| m.id)
        .collect();
    assert_eq!(
        subtle,
        [
            "shared_for_independent",
            "independent_for_shared",
            "rate_off_2pct"
        ]
    );
}

#[test]
fn every_non_equivalent_mutant_is_killed_and_equivalent_ones_survive() {
    let options = Options {
        samples: Some(TEST_KILL_SAMPLES),
        ..Options::default()
    };
    let matrix = kill_matrix(&options).expect("runs");
    for row in &matrix.rows {
        // The subtle mutants carry a power statement; at this small cap the
        // weakest (rate_off_2pct, lambda about 11) still exceeds 0.9999.
        if let Some(p) = &row.power {
            assert!(p.power > 0.9999, "{}: {p:?}", row.id);
        }
        if row.equivalent {
            assert!(
                row.kills.is_empty(),
                "equivalent {} killed by {:?}",
                row.id,
                row.kills
            );
        } else {
            assert!(!row.kills.is_empty(), "mutant {} survived", row.id);
        }
    }
    // The claims the gallery says must kill each mutant (those that name its
    // mistake directly) are among the killers.
    let killed_by = |id: &str, claim: &str| {
        matrix
            .rows
            .iter()
            .find(|r| r.id == id)
            .is_some_and(|r| r.kills.iter().any(|k| k.claim == claim))
    };
    for m in gallery() {
        for claim in m.must_kill {
            assert!(killed_by(m.id, claim), "{} not killed by {claim}", m.id);
        }
    }
    // keep_below_p keeps 30 % of 64 units where 70 % is claimed: over
    // 2000 · 64 trials the exact binomial p-value underflows to 0, which is
    // not "every draw gave the same value" (the kept count varies).
    let keep_fraction = matrix
        .rows
        .iter()
        .find(|r| r.id == "keep_below_p")
        .and_then(|r| {
            r.kills
                .iter()
                .find(|k| k.claim == "semantics.keep_fraction")
        })
        .expect("keep_below_p killed by semantics.keep_fraction");
    assert_eq!(
        keep_fraction.infinite,
        Some(InfiniteZ::PValueUnderflow),
        "{keep_fraction:?}"
    );
}

/// At 2 draws most claims are below their minimum budget (inconclusive):
/// they kill nothing, whatever their z (`ensemble.relu_gap` gives z = −∞
/// on two equal draws). What still kills is a claim whose verdict is
/// `fail`: an exact rule violated, or an exact binomial test.
#[test]
fn at_two_draws_only_failed_verdicts_kill() {
    let options = Options {
        samples: Some(2),
        ..Options::default()
    };
    let matrix = kill_matrix(&options).expect("runs");
    let mut kills = 0;
    for row in &matrix.rows {
        let m = gallery().into_iter().find(|m| m.id == row.id).unwrap();
        let run = conformance::run(m.layer, &options).expect("runs");
        for k in &row.kills {
            let v = run.verdicts.iter().find(|v| v.id == k.claim).unwrap();
            assert_eq!(
                v.verdict,
                Verdict::Fail,
                "{} killed by {}: {v:?}",
                row.id,
                k.claim
            );
            assert!(v.result.samples >= v.result.min_samples || v.error.is_some());
            kills += 1;
        }
        assert!(
            row.kills.iter().all(|k| k.claim != "ensemble.relu_gap"),
            "{}: {:?}",
            row.id,
            row.kills
        );
        // A subtle mutant's power is not stated below the claim's minimum.
        if let Some(p) = row.power.as_ref().filter(|p| p.samples < p.min_samples) {
            assert_eq!(p.power, 0.0, "{p:?}");
        }
    }
    assert!(kills > 0, "the exact rules still kill at 2 draws");
}

/// Every mutant cites a file of this repository a reader can open, and the
/// section it names exists there.
#[test]
fn every_mutant_source_is_a_section_of_a_file_in_the_repository() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for m in gallery() {
        let (path, rest) = m.source.split_once(' ').unwrap_or((m.source, ""));
        let text = std::fs::read_to_string(root.join(path))
            .unwrap_or_else(|e| panic!("{}: source {path} cannot be opened: {e}", m.id));
        for section in rest.split_whitespace().filter(|w| w.starts_with('§')) {
            assert!(
                text.lines()
                    .any(|l| (l.starts_with("## ") || l.starts_with("**"))
                        && l.contains(&format!("{section} "))),
                "{}: {path} has no section {section}",
                m.id
            );
        }
    }
}

#[test]
fn every_non_equivalent_mutant_names_registered_claims_that_must_kill_it() {
    let ids: Vec<_> = registry().into_iter().map(|c| c.id()).collect();
    for m in gallery() {
        assert_eq!(
            m.must_kill.is_empty(),
            m.equivalent.is_some(),
            "{}: must_kill {:?}",
            m.id,
            m.must_kill
        );
        for claim in m.must_kill {
            assert!(ids.contains(claim), "{}: unknown claim {claim}", m.id);
        }
    }
    // Two spot checks of the table against the mistake each names.
    let must_kill = |id: &str| {
        gallery()
            .into_iter()
            .find(|m| m.id == id)
            .expect("mutant")
            .must_kill
    };
    assert_eq!(must_kill("eval_draws"), ["semantics.eval_identity"]);
    assert_eq!(
        must_kill("shared_for_independent"),
        ["mask_shape.independent_zero_column"]
    );
}

/// Runs `claim` on the mutant `id` at the claim's default budget and
/// returns the result.
fn run_on_mutant(id: &str, claim: &str) -> dropmc::claims::ClaimResult {
    let m = gallery().into_iter().find(|m| m.id == id).expect("mutant");
    let c = registry()
        .into_iter()
        .find(|c| c.id() == claim)
        .expect("claim");
    let budget = Budget::new(c.default_samples(), derive_seed(DEFAULT_SEED, c.id())).unwrap();
    check(c, &Subject::with_dropout(m.layer), budget)
}

/// Kills `id` with `claim` and checks the power of that kill, computed from
/// the true effect (known in closed form) and the estimate's standard error.
fn assert_subtle_kill(id: &str, claim: &str, effects: &[f64]) -> f64 {
    let result = run_on_mutant(id, claim);
    assert_eq!(result.verdict, Verdict::Fail, "{id} survives {claim}");
    let (k, lambda) = effects
        .iter()
        .zip(&result.estimate)
        .map(|(&effect, e)| effect.abs() / e.stderr)
        .enumerate()
        .fold(
            (0, 0.0),
            |best, (k, l)| if l > best.1 { (k, l) } else { best },
        );
    let se = result.estimate[k].stderr;
    let power = rejection_power(effects[k], se);
    assert!(power >= REQUIRED_POWER, "{id} / {claim}: power {power}");
    // The miss probability Φ(z_crit − λ), which 1 − power rounds away
    // (statrs underflows to 0 below about Φ(−38)).
    let arg = critical_z() - lambda;
    let miss = Normal::standard().cdf(arg);
    println!(
        "{id} killed by {claim}: effect {:.4}, SE {se:.3e} at {} draws, lambda = {lambda:.1}, \
         power = 1 - Phi({arg:.1}) = 1 - {miss:.1e}",
        effects[k].abs(),
        result.samples
    );
    power
}

#[test]
fn the_subtle_mutants_are_killed_with_the_stated_power() {
    let (p, q) = (0.3_f64, 0.7_f64);
    // Rate off by 2 %: the kept fraction is 0.98 q instead of q.
    assert_subtle_kill("rate_off_2pct", "semantics.keep_fraction", &[0.02 * q]);
    // Shared mask where independent is specified: P(column all zero) is p,
    // not p^4 (T = 4), in each of the 3 columns.
    let shared_effect = p - p.powi(4);
    assert_subtle_kill(
        "shared_for_independent",
        "mask_shape.independent_zero_column",
        &[shared_effect; 3],
    );
    // And the reverse.
    assert_subtle_kill(
        "independent_for_shared",
        "mask_shape.shared_zero_column",
        &[-shared_effect; 3],
    );
}

#[test]
fn power_is_low_for_a_tiny_effect_and_certain_for_a_large_one() {
    // λ = 0 rejects with probability α, at most the size the suite charges
    // a mean test; λ = z_crit with 1/2 plus the far tail Φ(−2 z_crit), which
    // is below α; λ = 20 z_crit with the power a kill requires.
    let z = dropmc::stats::critical_z();
    let alpha = dropmc::stats::assertion_alpha();
    assert!(rejection_power(0.0, 1.0) <= dropmc::stats::MEAN_SIZE_FACTOR * alpha);
    assert!((rejection_power(z, 1.0) - 0.5).abs() <= alpha);
    assert!(rejection_power(20.0 * z, 1.0) >= REQUIRED_POWER);
}

#[test]
fn the_mask_shape_is_told_from_outputs_alone() {
    use dropmc::claims::mask_shape::{default_shape_draws, observed_shape};
    let (draws, miss) = default_shape_draws();
    // An independent layer looks shared only with probability
    // (q^4 + p^4)^(3 · draws), far below one assertion's α.
    assert!(
        miss < dropmc::stats::assertion_alpha(),
        "miss probability {miss}"
    );
    let reference = InvertedDropout;
    let seed = derive_seed(DEFAULT_SEED, "mask_shape.observed");
    let shape = |layer: &dyn dropmc::ops::DropoutLayer, asked| {
        observed_shape(layer, asked, draws, seed).expect("runs")
    };
    assert_eq!(
        shape(&reference, MaskShape::Independent),
        MaskShape::Independent
    );
    assert_eq!(
        shape(&reference, MaskShape::SharedOverPositions),
        MaskShape::SharedOverPositions
    );
    let g = gallery();
    let find = |id: &str| g.iter().find(|m| m.id == id).expect("mutant").layer;
    assert_eq!(
        shape(find("shared_for_independent"), MaskShape::Independent),
        MaskShape::SharedOverPositions
    );
    assert_eq!(
        shape(
            find("independent_for_shared"),
            MaskShape::SharedOverPositions
        ),
        MaskShape::Independent
    );
}

#[test]
fn conformance_names_the_failing_claim_of_a_wrong_layer() {
    let g = gallery();
    let eval_draws = g.iter().find(|m| m.id == "eval_draws").unwrap();
    let options = Options {
        families: Some(&["semantics"]),
        ..Options::default()
    };
    let result = conformance::run(eval_draws.layer, &options).unwrap();
    assert_eq!(result.failed(), ["semantics.eval_identity"]);
    let v = &result.verdicts[0];
    assert_eq!(
        v.z,
        Some(f64::INFINITY),
        "one draw per eval call is counted"
    );
}
