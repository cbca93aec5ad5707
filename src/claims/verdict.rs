//! Judging one claim: analytic value, exact oracle and estimate side by side.
//!
//! Each component is tested as the claim's [`Statistic`] says (Student-t
//! for a mean, exact binomial for counts, exact for violations). A budget
//! below the claim's [`Claim::min_samples`] gives [`Verdict::Inconclusive`]
//! instead of a verdict whose false-alarm rate is not the stated one —
//! unless a distribution-free bound decides it: a component whose statistic
//! has a known range under the null (a scaled count's `{0, target/keep}`,
//! [`Claim::null_range`]) is tested there by the empirical Bernstein bound
//! ([`crate::stats::bernstein_test`]), whose size is at most α at every
//! budget, and the claim fails when the bound rejects.

use serde::Serialize;

use super::order::OrderCheck;
use super::{Claim, Kind, Shape};
use crate::engine::Budget;
use crate::ops::Subject;
use crate::stats::{Estimate, Statistic, ZTest, bernstein_test};

/// Pass, fail, or too few draws for the test to have its stated size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Pass,
    Fail,
    /// The budget is below the claim's [`Claim::min_samples`]: its test
    /// would not have its stated size, so no verdict is given either way
    /// (a deterministic disagreement still fails).
    Inconclusive,
}

impl Verdict {
    /// The name used in reports and JSON.
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Inconclusive => "inconclusive",
        }
    }
}

/// Which sampler produced a claim's estimate (see [`Subject`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SamplerKind {
    /// Bit masks and subset-sum tables ([`crate::ops::fast`]), on the mathematics.
    Fast,
    /// One draw at a time through the subject's own layer.
    Generic,
}

impl SamplerKind {
    /// The name used in reports.
    pub fn label(self) -> &'static str {
        match self {
            SamplerKind::Fast => "fast",
            SamplerKind::Generic => "generic",
        }
    }
}

/// Everything known about one claim after a run.
#[derive(Debug, Clone, Serialize)]
pub struct ClaimResult {
    pub id: &'static str,
    pub family: &'static str,
    pub kind: Kind,
    pub formula: &'static str,
    pub shape: Shape,
    pub samples: u64,
    /// The sampler that produced [`estimate`](Self::estimate).
    pub sampler: SamplerKind,
    /// The seed of this claim's streams (see [`crate::engine::derive_seed`]).
    pub seed: u64,
    /// The closed form (the approximation, for a leading-order claim).
    pub analytic: Vec<f64>,
    /// The exact oracle's values, where one exists.
    pub exact: Option<Vec<f64>>,
    /// Whether the oracle agrees with the closed form within rounding
    /// (exact claims only).
    pub oracle_agrees: Option<bool>,
    /// What the estimate is tested against: the closed form for an exact
    /// claim, the oracle for a leading-order one.
    pub target: Vec<f64>,
    pub estimate: Vec<Estimate>,
    pub tests: Vec<ZTest>,
    /// The kind of per-draw statistic and so the test ([`Claim::statistic`]).
    pub statistic: Statistic,
    /// The smallest budget at which the test has its stated size.
    pub min_samples: u64,
    /// Below [`min_samples`](Self::min_samples): how the distribution-free
    /// bound decided (`None` at or above it).
    pub below_budget: Option<BelowBudget>,
    /// Below the minimum budget, per component, the null width its bound
    /// test used (`None`: no range known, the component's test is the
    /// t-test's at an uncontrolled size). Empty at or above it.
    #[serde(skip)]
    pub bound_widths: Vec<Option<f64>>,
    pub verdict: Verdict,
    /// Why the claim could not be evaluated, if it could not.
    pub error: Option<String>,
    /// The claim's own note (see [`Claim::note`]).
    pub note: Option<String>,
    /// A leading-order claim's order check ([`Claim::order_check`]): its
    /// closed form's error is of the stated order and beats what it
    /// corrects. A failing one fails the claim at any budget.
    pub order: Option<OrderCheck>,
}

/// A run below the claim's minimum budget, decided where a bound can
/// ([`check`]): the tests of the bounded components are the bound's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BelowBudget {
    /// Components tested by the empirical Bernstein bound (a range is known).
    pub bounded: usize,
    /// Of those, the ones whose deviation exceeds the bound.
    pub rejected: usize,
}

/// The smallest effect the distribution-free bound decides on a claim
/// below its minimum budget ([`ClaimResult::bound_mde`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BoundMde {
    /// The largest MDE over the bounded components, in the claim's units.
    pub absolute: f64,
    /// The largest `MDE / |target|`, when no bounded target is zero.
    pub relative: Option<f64>,
}

impl BoundMde {
    /// The larger of two: relative where both are, absolute otherwise.
    fn max(self, other: BoundMde) -> BoundMde {
        let relative = match (self.relative, other.relative) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        };
        BoundMde {
            absolute: self.absolute.max(other.absolute),
            relative,
        }
    }
}

impl ClaimResult {
    /// True when some component's test rejects, the oracle disagrees or the
    /// claim could not be evaluated, whatever the budget. Below
    /// [`min_samples`](Self::min_samples) a rejection is at an uncontrolled
    /// size: the verdict is then [`Verdict::Inconclusive`], but a mutant's
    /// kill may still read it.
    pub fn rejected(&self) -> bool {
        self.error.is_some()
            || self.oracle_agrees == Some(false)
            || self.order_failed()
            || self.tests.iter().any(|t| t.rejected)
    }

    /// True when the claim has an order check and it fails.
    pub fn order_failed(&self) -> bool {
        self.order.as_ref().is_some_and(|o| !o.passed())
    }

    /// The line that explains an inconclusive verdict.
    pub fn inconclusive_reason(&self) -> Option<String> {
        (self.verdict == Verdict::Inconclusive).then(|| {
            let bound = match self.below_budget {
                Some(b) if b.bounded > 0 => format!(
                    "; the distribution-free bound at the same level rejects none of its {} \
                     bounded components{}",
                    b.bounded,
                    self.bound_mde_phrase()
                ),
                _ => "; no null range is known for a distribution-free bound".to_string(),
            };
            format!(
                "inconclusive: {} draws is below the {} at which its {} test has its stated \
                 size{bound}{}",
                self.samples,
                self.min_samples,
                self.statistic.label(),
                self.no_spread_phrase(false)
            )
        })
    }

    /// The components whose draws all gave one value away from the target
    /// (no spread: `z = ±∞`), as `(component, value, target)`.
    pub fn without_spread(&self) -> Vec<(usize, f64, f64)> {
        (0..self.tests.len().min(self.estimate.len()))
            .filter(|&k| self.tests[k].z.is_infinite() && self.estimate[k].stderr == 0.0)
            .map(|k| (k, self.estimate[k].value, self.target[k]))
            .collect()
    }

    /// What a verdict says about the components without spread
    /// ([`without_spread`](Self::without_spread)): a failure names them;
    /// an inconclusive verdict says why an infinite `z` alone does not
    /// decide below the minimum budget. A correct layer whose likeliest
    /// outcome has probability `a` gives `n` equal draws with probability
    /// up to `a^(n−1)` (at `p = 0.001` on five units, `a = 0.999⁵`, and
    /// 1 000 draws agree with probability 0.7 %, far above α): only a bound
    /// that holds for every law on the null range, the distribution-free
    /// one, decides it.
    fn no_spread_phrase(&self, failed: bool) -> String {
        let flat = self.without_spread();
        let Some(&(k, value, target)) = flat.first() else {
            return String::new();
        };
        let component = if self.shape == Shape::Vector {
            format!(" of component {k}")
        } else {
            String::new()
        };
        let sign = if value < target { "−" } else { "+" };
        let what = format!(
            "; every one of the {} draws{component} gave {value:.6} against the analytic \
             {target:.6} (no spread: z = {sign}inf)",
            self.samples
        );
        if failed {
            what
        } else {
            format!(
                "{what}, which a correct layer can do when one outcome is likely (a small p), \
                 and no distribution-free bound rejects it at this budget"
            )
        }
    }

    /// The smallest deviation the bound decides at this budget, over the
    /// bounded components (their largest MDE: a deviation of that size in
    /// any component is rejected with probability [`crate::stats::POWER`]),
    /// relative to the target where every bounded target is non-zero.
    pub fn bound_mde(&self) -> Option<BoundMde> {
        let bounded = self
            .bound_widths
            .iter()
            .enumerate()
            .filter(|(_, w)| w.is_some())
            .map(|(k, _)| (self.tests[k].mde, self.target[k]));
        let mut worst: Option<BoundMde> = None;
        for (mde, target) in bounded {
            let relative = (target != 0.0).then(|| mde / target.abs());
            let this = BoundMde {
                absolute: mde,
                relative,
            };
            worst = Some(match worst {
                None => this,
                Some(w) => w.max(this),
            });
        }
        worst
    }

    fn bound_mde_phrase(&self) -> String {
        match self.bound_mde() {
            Some(BoundMde {
                relative: Some(r), ..
            }) => format!(
                "; at {} draws it decides a deviation of {:.3}% of the target or more (MDE)",
                self.samples,
                100.0 * r
            ),
            Some(BoundMde { absolute, .. }) => format!(
                "; at {} draws it decides a deviation of {absolute:.4} or more (MDE)",
                self.samples
            ),
            None => String::new(),
        }
    }

    /// The line that explains a failure decided below the minimum budget
    /// by the distribution-free bound (`None` otherwise).
    pub fn bound_failure_reason(&self) -> Option<String> {
        let b = self.below_budget.filter(|b| b.rejected > 0)?;
        (self.verdict == Verdict::Fail).then(|| {
            format!(
                "fail below the minimum budget ({} < {} draws): {} of {} components deviate \
                 beyond the distribution-free empirical Bernstein bound at the suite's \
                 per-assertion level; their p-values are the bound's{}",
                self.samples,
                self.min_samples,
                b.rejected,
                b.bounded,
                self.no_spread_phrase(true)
            )
        })
    }

    /// Index of the component with the largest `|z|` (the one a table shows).
    pub fn worst(&self) -> Option<usize> {
        (0..self.tests.len()).max_by(|&a, &b| {
            self.tests[a]
                .z
                .abs()
                .partial_cmp(&self.tests[b].z.abs())
                .unwrap_or(std::cmp::Ordering::Less)
        })
    }

    /// For a leading-order claim: the approximation's gap to the oracle,
    /// `analytic − exact`, per component.
    pub fn gap(&self) -> Option<Vec<f64>> {
        match (self.kind, &self.exact) {
            (Kind::LeadingOrder { .. }, Some(exact)) => Some(
                self.analytic
                    .iter()
                    .zip(exact)
                    .map(|(a, e)| a - e)
                    .collect(),
            ),
            _ => None,
        }
    }
}

/// Evaluates `claim` on `subject` with `budget` and returns the verdict.
///
/// Fails (with `error` set) rather than panicking when the claim cannot be
/// evaluated: a subject that rejects the configuration, a missing oracle
/// for a leading-order claim, or a non-finite estimate.
pub fn check(claim: &dyn Claim, subject: &Subject, budget: Budget) -> ClaimResult {
    let mut result = ClaimResult {
        id: claim.id(),
        family: claim.family(),
        kind: claim.kind(),
        formula: claim.formula(),
        shape: claim.shape(),
        samples: budget.samples,
        sampler: SamplerKind::Generic,
        seed: budget.seed,
        analytic: Vec::new(),
        exact: None,
        oracle_agrees: None,
        target: Vec::new(),
        estimate: Vec::new(),
        tests: Vec::new(),
        statistic: claim.statistic(),
        min_samples: claim.min_samples(),
        below_budget: None,
        bound_widths: Vec::new(),
        verdict: Verdict::Fail,
        error: None,
        note: claim.note_on(subject),
        order: None,
    };
    if let Err(message) = fill(claim, subject, budget, &mut result) {
        result.error = Some(message);
        return result;
    }
    if budget.samples < result.min_samples {
        result.below_budget = Some(test_by_bound(claim, &mut result));
    }
    result.verdict = if result.oracle_agrees == Some(false) || result.order_failed() {
        Verdict::Fail
    } else if let Some(below) = result.below_budget {
        if below.rejected > 0 {
            Verdict::Fail
        } else {
            Verdict::Inconclusive
        }
    } else if result.tests.iter().any(|t| t.rejected) {
        Verdict::Fail
    } else {
        Verdict::Pass
    };
    result
}

/// Below the minimum budget: replaces the test of every component whose
/// statistic has a known width under the null by the empirical Bernstein
/// bound's, and counts them. The widths: a scaled count tested as a mean
/// (on the generic path) takes `{0, target/keep}`, width `|target/keep|`;
/// a mean takes the claim's [`Claim::null_range`]; the exact tests are
/// valid at every budget and are never below it.
fn test_by_bound(claim: &dyn Claim, result: &mut ClaimResult) -> BelowBudget {
    let dim = result.estimate.len();
    let widths: Vec<Option<f64>> = match (claim.statistic(), result.statistic) {
        (Statistic::ScaledCount { keep }, Statistic::Mean { .. }) => result
            .target
            .iter()
            .map(|t| Some((t / keep).abs()))
            .collect(),
        (_, Statistic::Mean { .. }) => match claim.null_range() {
            Some(w) if w.len() == dim => w.into_iter().map(Some).collect(),
            _ => vec![None; dim],
        },
        _ => vec![None; dim],
    };
    let mut below = BelowBudget {
        bounded: 0,
        rejected: 0,
    };
    result.bound_widths = widths.clone();
    for (k, width) in widths.into_iter().enumerate() {
        let test = width.and_then(|w| bernstein_test(result.estimate[k], result.target[k], w));
        if test.is_none() {
            result.bound_widths[k] = None;
        }
        if let Some(test) = test {
            below.bounded += 1;
            below.rejected += usize::from(test.rejected);
            result.tests[k] = test;
        }
    }
    below
}

/// The claim's estimate on `subject` at `budget` and the sampler that made
/// it: the fast sampler on the mathematics where the claim has one, the
/// generic path otherwise (what [`check`] runs; the report's time estimate
/// times it on a pilot budget, `crate::conformance::pilot`).
pub fn sample(
    claim: &dyn Claim,
    subject: &Subject,
    budget: Budget,
) -> Result<(Vec<Estimate>, SamplerKind), crate::error::Error> {
    let fast = if subject.is_mathematics() {
        claim.fast_estimate(budget)
    } else {
        None
    };
    match fast {
        Some(estimate) => Ok((estimate?, SamplerKind::Fast)),
        None => Ok((claim.estimate(subject, budget)?, SamplerKind::Generic)),
    }
}

fn fill(
    claim: &dyn Claim,
    subject: &Subject,
    budget: Budget,
    result: &mut ClaimResult,
) -> Result<(), String> {
    result.analytic = claim.analytic().map_err(|e| e.to_string())?;
    result.order = claim.order_check().transpose()?;
    let oracle = claim.oracle().map_err(|e| e.to_string())?;
    result.target = match claim.kind() {
        Kind::Exact => {
            result.oracle_agrees = oracle.as_ref().map(|o| o.agrees_with(&result.analytic));
            result.analytic.clone()
        }
        Kind::LeadingOrder { .. } => match &oracle {
            Some(o) => o.values.clone(),
            None => return Err("a leading-order claim needs an exact oracle".into()),
        },
    };
    result.exact = oracle.map(|o| o.values);
    (result.estimate, result.sampler) =
        sample(claim, subject, budget).map_err(|e| e.to_string())?;
    if result.estimate.len() != result.target.len() {
        return Err(format!(
            "estimator returned {} components for {} targets",
            result.estimate.len(),
            result.target.len()
        ));
    }
    if result
        .estimate
        .iter()
        .any(|e| !e.value.is_finite() || !e.stderr.is_finite())
    {
        return Err("the estimate is not finite".into());
    }
    if result.sampler == SamplerKind::Generic {
        result.statistic = result
            .statistic
            .on_generic_path_with(&result.estimate, &result.target);
        result.min_samples = result.min_samples.max(result.statistic.min_samples());
    }
    result.tests = result
        .estimate
        .iter()
        .zip(&result.target)
        .map(|(&e, &t)| result.statistic.test(e, t))
        .collect();
    Ok(())
}
