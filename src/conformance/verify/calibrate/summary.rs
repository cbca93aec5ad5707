//! From the per-seed records to the calibration: the failure-count test,
//! the per-component p-values and KS tests, the pooled KS test (the module
//! docs of [`super`] derive each).

use serde::Serialize;
use statrs::distribution::{Binomial, ChiSquared, ContinuousCDF, DiscreteCDF, Normal};

use super::{
    Calibration, CalibrationOptions, ClaimCalibration, ComponentCalibration, ComponentRecord,
    SeedRecord,
};
use crate::claims::Claim;
use crate::stats::{
    FAMILY_ALPHA, KsTest, Statistic, assertion_alpha, ks_uniform, mean_min_samples, min_sample_for,
    two_point_skewness,
};

/// The per-test level of a calibration (module docs of [`super`]): the
/// probability `flag_alpha` of any false flag on a calibrated claim set,
/// split by Bonferroni over its `tests` tests.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FlagLevel {
    /// Probability of any false flag on a calibrated claim set.
    pub flag_alpha: f64,
    /// Number of tests `m` the flag level is split over.
    pub tests: usize,
    /// Per-test level `L = flag_alpha / m`.
    pub flag_level: f64,
    /// Fewest p-values at which a KS test can reach `flag_level`
    /// ([`min_sample_for`]; `None`: no number of them can).
    pub ks_min_seeds: Option<usize>,
}

impl FlagLevel {
    /// `flag_alpha` split over `tests` tests.
    pub fn new(flag_alpha: f64, tests: usize) -> Self {
        let flag_level = flag_alpha / tests as f64;
        FlagLevel {
            flag_alpha,
            tests,
            flag_level,
            ks_min_seeds: min_sample_for(flag_level),
        }
    }

    /// True when a KS test of `n` p-values can reach the level at all.
    pub fn ks_can_flag(&self, n: usize) -> bool {
        self.ks_min_seeds.is_some_and(|m| n >= m)
    }

    /// The KS test of `values` against `U(0, 1)` (tests 2 and 3 of the
    /// module docs of [`super`]); `None`, skipped, when there are too few of
    /// them for it to reach the level.
    pub fn ks_uniform(&self, values: &[f64]) -> Option<KsTest> {
        if self.ks_can_flag(values.len()) {
            ks_uniform(values)
        } else {
            None
        }
    }

    /// True when `test` ran and rejects uniformity at the level.
    pub fn flags(&self, test: Option<KsTest>) -> bool {
        test.is_some_and(|t| t.p_value < self.flag_level)
    }
}

/// The failure-count test of one claim (module docs, test 1).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FailureTest {
    /// Seeds under which the claim failed, F.
    pub failures: u64,
    /// `F / K`.
    pub rate: f64,
    /// Bound on the per-seed failure probability under H0, `k · α`.
    pub alpha: f64,
    /// `P(Binomial(K, alpha) ≥ F)`.
    pub p_value: f64,
    /// The smallest `F` this test flags at its level (`None`: none up to K).
    pub threshold: Option<u64>,
    pub flagged: bool,
}

impl FailureTest {
    /// The test of `failures` out of `seeds` at per-seed bound `alpha`.
    pub fn new(failures: u64, seeds: u64, alpha: f64, level: f64) -> Self {
        let tail = |f: u64| -> f64 {
            if f == 0 {
                1.0
            } else if alpha <= 0.0 {
                0.0
            } else {
                Binomial::new(alpha.min(1.0), seeds).map_or(1.0, |b| b.sf(f - 1))
            }
        };
        let p_value = tail(failures);
        FailureTest {
            failures,
            rate: failures as f64 / seeds.max(1) as f64,
            alpha,
            p_value,
            threshold: (1..=seeds).find(|&f| tail(f) < level),
            flagged: p_value < level,
        }
    }
}

/// The dispersion test of the standardized statistics (module docs of
/// [`super`], test 4): `D = Σ Φ⁻¹(p/2)²` over the p-values of the
/// components whose test divides by a standard error, against `χ²` with
/// one degree of freedom per p-value.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DispersionTest {
    /// Number of p-values summed (the degrees of freedom).
    pub dof: usize,
    /// Components they come from (each over the seeds it had spread under).
    pub components: usize,
    /// `D`, the sum of the squared normal scores `Φ⁻¹(p/2)²`.
    pub statistic: f64,
    /// `D / dof`: 1 expected, `1/f²` for standard errors `f` times too small.
    pub ratio: f64,
    /// `P(χ²_dof ≥ D)`.
    pub p_value: f64,
    pub flagged: bool,
}

impl DispersionTest {
    /// The test of the two-sided p-values `values`, from `components`
    /// components, at level `level` (`None` without any).
    pub fn new(values: &[f64], components: usize, level: f64) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        let normal = Normal::standard();
        let statistic: f64 = values
            .iter()
            .map(|&p| {
                let z = normal.inverse_cdf((p / 2.0).clamp(0.0, 0.5));
                z * z
            })
            .sum();
        let dof = values.len();
        let p_value = if statistic.is_finite() {
            ChiSquared::new(dof as f64).map_or(1.0, |c| c.sf(statistic))
        } else {
            0.0
        };
        Some(DispersionTest {
            dof,
            components,
            statistic,
            ratio: statistic / dof as f64,
            p_value,
            flagged: p_value < level,
        })
    }
}

/// The per-seed failure probability a claim's tests spend under H0: per
/// component, the size the suite charges its test
/// ([`crate::stats::Statistic::size_factor`], the larger of the fast and the
/// generic path's) times the per-assertion level α.
fn claim_size(claim: &dyn Claim, components: usize) -> f64 {
    let statistic = claim.statistic();
    let factor = statistic
        .size_factor()
        .max(statistic.on_generic_path().size_factor());
    components as f64 * factor * assertion_alpha()
}

/// The calibration computed from the per-seed records alone (module docs).
pub fn summarize(
    records: &[SeedRecord],
    claims: &[&dyn Claim],
    options: &CalibrationOptions,
    subject: &str,
) -> Calibration {
    let seeds = records.len() as u64;
    let width = |c: usize| {
        records
            .iter()
            .map(|r| r.claims[c].components.len())
            .max()
            .unwrap_or(0)
    };
    // A failure count per claim, a KS test per component, the pooled KS and
    // the dispersion test.
    let tests = claims.len() + (0..claims.len()).map(width).sum::<usize>() + 2;
    let plan = FlagLevel::new(options.flag_alpha, tests);
    let level = plan.flag_level;
    let mut pooled_values = Vec::new();
    let mut standardized_p_values = Vec::new();
    let mut standardized_components = 0;
    let mut out = Vec::with_capacity(claims.len());
    for (c, claim) in claims.iter().enumerate() {
        let below_minimum_budget = records.iter().any(|r| r.claims[c].inconclusive);
        let failures = records.iter().filter(|r| r.claims[c].failed).count() as u64;
        let failure = FailureTest::new(failures, seeds, claim_size(*claim, width(c)), level);
        let mut components = Vec::new();
        let mut constant = 0;
        for k in 0..width(c) {
            let seen: Vec<(u64, &ComponentRecord)> = records
                .iter()
                .filter_map(|r| r.claims[c].components.get(k).map(|x| (r.seed, x)))
                .collect();
            if seen.iter().all(|(_, x)| !has_p_value(x)) {
                constant += 1;
                continue;
            }
            let (values, mid_p) = component_p_values(&seen);
            if !below_minimum_budget {
                pooled_values.extend_from_slice(&values);
                let statistic = claim.statistic();
                let standardized: Vec<f64> = seen
                    .iter()
                    .filter_map(|(_, x)| standardized_p_value(statistic, x))
                    .collect();
                standardized_components += usize::from(!standardized.is_empty());
                standardized_p_values.extend(standardized);
            }
            let ks = plan.ks_uniform(&values);
            let flagged = plan.flags(ks) && !below_minimum_budget;
            components.push(ComponentCalibration {
                component: k,
                p_values: values.len(),
                mid_p,
                ks,
                flagged,
            });
        }
        let flagged =
            !below_minimum_budget && (failure.flagged || components.iter().any(|x| x.flagged));
        out.push(ClaimCalibration {
            below_minimum_budget,
            id: claim.id().to_string(),
            kind: claim.kind().label(),
            note: note(&components, constant),
            failure,
            components,
            flagged,
            constant_components: constant,
        });
    }
    let pooled = plan.ks_uniform(&pooled_values);
    let dispersion = DispersionTest::new(&standardized_p_values, standardized_components, level);
    let ks_skipped = (!plan.ks_can_flag(seeds as usize)).then(|| {
        format!(
            "per-component KS skipped: at K = {seeds} seeds its smallest attainable p-value \
             ({:.1e}, at D = 1) is not below the level {level:.1e}; it can flag from K = {} on",
            crate::stats::smallest_p_value(seeds as usize),
            plan.ks_min_seeds
                .map_or("(never)".to_string(), |m| m.to_string())
        )
    });
    let below = pooled_values.iter().filter(|&&p| p < 0.05).count();
    Calibration {
        subject: subject.to_string(),
        seeds,
        first_seed: options.replication.first_seed,
        family_alpha: FAMILY_ALPHA,
        level: plan,
        ks_skipped,
        failed_runs: records
            .iter()
            .filter(|r| r.claims.iter().any(|c| c.failed))
            .count() as u64,
        expected_failed_runs: FAMILY_ALPHA * seeds as f64,
        fraction_below_5_percent: below as f64 / pooled_values.len().max(1) as f64,
        pooled_flagged: plan.flags(pooled),
        dispersion,
        pooled,
        claims: out,
    }
}

/// The two-sided p-value of a component's estimate standardized by the
/// standard error it carries, where that standardization is valid: the
/// report test's own p-value for a Student-t test; for an exact binomial
/// test of a two-point statistic (a scaled count, a single-trial
/// indicator), the normal p-value of `z = (estimate − target) / SE` when
/// the draws reach the minimum budget of a mean test of that two-point
/// statistic ([`Statistic::on_generic_path`]: the Cramér rule with its
/// skewness, module docs of [`crate::stats`]). The exact test does not
/// divide by the SE, but the table's `±` and the minimum detectable
/// effect do, so its SE is checked here like every other (module docs of
/// [`super`], test 4). `None` without spread or below that budget.
fn standardized_p_value(statistic: Statistic, x: &ComponentRecord) -> Option<f64> {
    if x.stderr.is_nan() || x.stderr <= 0.0 {
        return None;
    }
    if x.standardized {
        return Some(x.p);
    }
    x.mid_p?;
    let keep = match statistic {
        Statistic::ScaledCount { keep } => keep,
        Statistic::Indicator { trials: 1 } => x.target,
        _ => return None,
    };
    if !(keep > 0.0 && keep < 1.0) || x.n < mean_min_samples(two_point_skewness(keep)) {
        return None;
    }
    let z = (x.value - x.target) / x.stderr;
    Some(2.0 * Normal::standard().sf(z.abs()))
}

/// True when a component's p-value under one seed has a distribution: an
/// exact binomial test's always (a count of 0 is a count), a continuous
/// test's when its draws had spread.
fn has_p_value(x: &ComponentRecord) -> bool {
    x.mid_p.is_some() || x.stderr > 0.0
}

/// One component's p-values across seeds, from the seeds with spread: the
/// report test's own p-value for a continuous test, its mid-p value for an
/// exact binomial one (true in the second place when any is a mid-p).
fn component_p_values(seen: &[(u64, &ComponentRecord)]) -> (Vec<f64>, bool) {
    let spread = || seen.iter().filter(|(_, x)| has_p_value(x));
    let values = spread().map(|(_, x)| x.mid_p.unwrap_or(x.p)).collect();
    (values, spread().any(|(_, x)| x.mid_p.is_some()))
}

/// Why some of a claim's p-values are special, if any are.
fn note(components: &[ComponentCalibration], constant: usize) -> Option<String> {
    let mut notes = Vec::new();
    if components.is_empty() && constant > 0 {
        notes.push(
            "no spread under any seed (a deterministic rule's violation count, or constant \
             outputs): no p-values; judged by its failure count"
                .to_string(),
        );
    } else if constant > 0 {
        notes.push(format!(
            "{constant} component(s) without spread (a constant estimate): no p-value"
        ));
    }
    let mid_p: Vec<String> = components
        .iter()
        .filter(|x| x.mid_p)
        .map(|x| x.component.to_string())
        .collect();
    if !mid_p.is_empty() {
        notes.push(format!(
            "component(s) {}: an exact binomial test (a count), KS on its mid-p values",
            mid_p.join(", ")
        ));
    }
    (!notes.is_empty()).then(|| notes.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_level_skips_ks_below_its_minimum_and_flags_only_below_the_level() {
        // 1.28·10⁻⁸ split over 128 tests is 10⁻¹⁰, where a KS test needs at
        // least 11 values to reach the level (the derivation of
        // `min_sample_for`). Dividing by a power of two is exact and commutes
        // with rounding (fl(128 a) = 128 fl(a) away from the subnormals), so
        // the level is the literal 1e-10 to the bit.
        let plan = FlagLevel::new(1.28e-8, 128);
        assert_eq!(plan.flag_level, 1e-10);
        assert_eq!(plan.ks_min_seeds, Some(11));
        // Ten values, however far from uniform, cannot reach it: skipped.
        assert!(plan.ks_uniform(&[1e-6; 10]).is_none());
        assert!(!plan.flags(None));
        // Twelve values all near 0 (D ≈ 1) reach it and are flagged; twelve
        // spread evenly over (0, 1) are tested and not flagged.
        assert!(plan.flags(plan.ks_uniform(&[1e-6; 12])));
        let even: Vec<f64> = (0..12).map(|i| (i as f64 + 0.5) / 12.0).collect();
        let test = plan.ks_uniform(&even);
        assert!(test.is_some() && !plan.flags(test));
    }
}
