//! `dropmc power`: the probability that the default suite catches a given
//! wrong implementation.
//!
//! # Two estimates
//!
//! * **Empirical.** Run the suite under K seeds against the wrong layer and
//!   count the seeds under which at least one claim failed. With K seeds the
//!   detection rate is known only to about `1/K`; with every seed detecting,
//!   the exact one-sided 95 % lower bound on the power is `0.05^(1/K)`.
//! * **From the effect size.** A claim component whose test statistic has
//!   mean `δ` (in standard errors) rejects with probability
//!   `π(δ) = Φ(|δ| − z_c) + Φ(−|δ| − z_c)`, `z_c` the critical value. The mean
//!   z over the K seeds estimates `δ`. Claims read independent streams, so the
//!   suite misses only if every component misses:
//!   `power = 1 − Π_components (1 − π(δ̄))` (components of one claim are
//!   treated as independent, exact for per-unit claims whose units have
//!   independent masks). This is the figure that can show a power of 0.999
//!   or more, which no affordable number of seeds can.
//!
//! # What runs
//!
//! The candidates are every mutant of the gallery ([`crate::mutants`]) and
//! the graded perturbations ([`crate::verify::perturb`]); the claims are the
//! conformance set ([`conformance::FAMILIES`]: dropout, semantics,
//! attention, mask shape, ensemble), since several mutants (eval, backward,
//! attention, mask shape) are visible only to families other than
//! `dropout`. The reference runs first under the same seeds: its row is the
//! observed false-alarm rate, and a claim it fails is left out (at a capped
//! budget a rare component such as `P(K = 0) = p^8` can fail on a correct
//! layer). `dropmc power` caps each claim at [`crate::mutants::KILL_SAMPLES`]
//! draws by default and extrapolates to the default budget conservatively
//! (see [`PowerRow::at_default_budget`]); `--full` runs the default budget.

use serde::Serialize;
use statrs::distribution::DiscreteCDF;

use crate::claims::{Claim, ClaimResult, Verdict, check};
use crate::conformance;
use crate::engine::{Budget, derive_seed};
use crate::error::Error;
use crate::ops::{DropoutLayer, Subject};
use crate::report;
use crate::stats::critical_z;

/// What to run.
#[derive(Debug, Clone)]
pub struct PowerOptions {
    pub seeds: u64,
    pub first_seed: u64,
    /// Caps every claim's draws (`None`: each claim's default budget).
    pub samples: Option<u64>,
    /// Only this family (default: the conformance families,
    /// [`conformance::FAMILIES`]).
    pub family: Option<String>,
}

/// One implementation whose power is measured.
pub struct Candidate<'a> {
    pub name: String,
    pub layer: &'a dyn DropoutLayer,
    /// Why no claim can tell it from the reference, if so.
    pub equivalent: Option<&'static str>,
}

impl<'a> Candidate<'a> {
    /// A non-equivalent candidate named after its layer.
    pub fn new(layer: &'a dyn DropoutLayer) -> Self {
        Candidate {
            name: layer.name().to_string(),
            layer,
            equivalent: None,
        }
    }
}

/// Every mutant of the gallery ([`crate::mutants::gallery`]) as a candidate.
pub fn mutant_candidates() -> Vec<Candidate<'static>> {
    crate::mutants::gallery()
        .into_iter()
        .map(|m| Candidate {
            name: m.id.to_string(),
            layer: m.layer,
            equivalent: m.equivalent,
        })
        .collect()
}

/// How one wrong implementation fares.
#[derive(Debug, Clone, Serialize)]
pub struct PowerRow {
    pub subject: String,
    /// True for an equivalent mutant (no claim can catch it).
    pub equivalent: bool,
    pub seeds: u64,
    /// Seeds under which some claim failed.
    pub detections: u64,
    /// `detections / seeds`.
    pub empirical: f64,
    /// Exact one-sided 95 % lower confidence bound on the detection rate
    /// (Clopper-Pearson).
    pub empirical_lower_95: f64,
    /// Power from the mean effect sizes at the run's budget (module docs).
    pub from_effect: f64,
    /// A conservative power at each claim's default budget: per component
    /// the lower confidence bound `max(0, |z̄| − z_c/√K)` on `|δ|` at the
    /// run's budget, scaled by `√(n_default / n_run)` (the z of a fixed
    /// deviation grows as the square root of the draws). Taking the bound,
    /// not `z̄`, keeps the scaled-up noise of the reference's components from
    /// posing as power.
    pub at_default_budget: f64,
    /// Claims that failed under at least one seed, with the count.
    pub killed_by: Vec<(String, u64)>,
}

/// The power run: the reference's false-alarm row, one row per candidate,
/// and the claims left out because the reference itself fails them at the
/// capped budget (a rare component, see [`conformance::Options::samples`]).
#[derive(Debug, Clone, Serialize)]
pub struct PowerRun {
    pub samples_cap: Option<u64>,
    pub claims: Vec<&'static str>,
    pub reference: PowerRow,
    pub rows: Vec<PowerRow>,
    pub unusable: Vec<&'static str>,
}

impl PowerRun {
    /// The non-equivalent candidates whose power at the default budget
    /// (from the effect sizes) is below `level`.
    pub fn below(&self, level: f64) -> Vec<&PowerRow> {
        self.rows
            .iter()
            .filter(|r| !r.equivalent && r.at_default_budget < level)
            .collect()
    }
}

pub use crate::stats::rejection_probability;

/// One-sided 95 % lower Clopper-Pearson bound for `k` successes in `n`.
pub fn clopper_pearson_lower(k: u64, n: u64) -> f64 {
    if k == 0 {
        return 0.0;
    }
    if k == n {
        return 0.05f64.powf(1.0 / n as f64);
    }
    // Bisection on P(X >= k | θ) = 0.05, X ~ Binomial(n, θ).
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        let Ok(binomial) = statrs::distribution::Binomial::new(mid, n) else {
            return lo;
        };
        let tail = 1.0 - binomial.cdf(k - 1);
        if tail < 0.05 { lo = mid } else { hi = mid }
    }
    lo
}

/// The claims a power run uses.
fn selected_claims(options: &PowerOptions) -> Vec<&'static dyn Claim> {
    let all = conformance::Options {
        all_families: options.family.is_some(),
        ..conformance::Options::default()
    };
    conformance::claims(&all)
        .into_iter()
        .filter(|c| options.family.as_deref().is_none_or(|f| c.family() == f))
        .collect()
}

/// One seed's results of every selected claim against `layer`.
fn run_once(
    layer: &dyn DropoutLayer,
    claims: &[&'static dyn Claim],
    seed: u64,
    samples: Option<u64>,
) -> Result<Vec<ClaimResult>, Error> {
    let subject = Subject::with_dropout(layer);
    let options = conformance::Options {
        seed,
        samples,
        ..conformance::Options::default()
    };
    claims
        .iter()
        .map(|&claim| {
            let budget = Budget::new(
                conformance::samples_for(claim, &options),
                derive_seed(seed, claim.id()),
            )?;
            Ok(check(claim, &subject, budget))
        })
        .collect()
}

/// Measures one candidate over the seeds, ignoring the claims in `unusable`.
fn measure(
    candidate: &Candidate,
    claims: &[&'static dyn Claim],
    unusable: &[&'static str],
    options: &PowerOptions,
    mut tick: impl FnMut(),
) -> Result<PowerRow, Error> {
    let mut detections = 0;
    let mut killed: Vec<(String, u64)> = Vec::new();
    // Sum of z per (claim, component), and the draws behind it.
    let mut z_sums: Vec<Vec<f64>> = vec![Vec::new(); claims.len()];
    let mut scale: Vec<f64> = vec![1.0; claims.len()];
    let mut errored = false;
    for i in 0..options.seeds {
        let results = run_once(
            candidate.layer,
            claims,
            options.first_seed + i,
            options.samples,
        )?;
        let mut detected = false;
        for (c, r) in results.iter().enumerate() {
            if unusable.contains(&r.id) {
                continue;
            }
            errored |= r.error.is_some();
            if z_sums[c].is_empty() {
                z_sums[c] = vec![0.0; r.tests.len()];
            }
            scale[c] = (claims[c].default_samples() as f64 / r.samples.max(1) as f64)
                .sqrt()
                .max(1.0);
            for (sum, t) in z_sums[c].iter_mut().zip(&r.tests) {
                // A violated deterministic rule has z = ±inf.
                *sum += if t.z.is_finite() {
                    t.z
                } else {
                    t.z.signum() * 1e6
                };
            }
            if r.verdict == Verdict::Fail {
                detected = true;
                match killed.iter_mut().find(|(id, _)| id == r.id) {
                    Some((_, n)) => *n += 1,
                    None => killed.push((r.id.to_string(), 1)),
                }
            }
        }
        detections += u64::from(detected);
        tick();
    }
    let seeds = options.seeds as f64;
    let power_at = |scaled: bool| {
        if errored {
            return 1.0; // a claim that cannot even be evaluated fails under every seed
        }
        let miss: f64 = z_sums
            .iter()
            .zip(&scale)
            .flat_map(|(sums, &s)| {
                sums.iter().map(move |z| {
                    let mean = z / seeds;
                    let delta = if scaled {
                        // Lower confidence bound on |δ| at the per-assertion
                        // level (the mean of K unit-variance z's has SD 1/√K),
                        // scaled to the default budget.
                        (mean.abs() - critical_z() / seeds.sqrt()).max(0.0) * s
                    } else {
                        mean
                    };
                    1.0 - rejection_probability(delta)
                })
            })
            .product();
        1.0 - miss
    };
    Ok(PowerRow {
        subject: candidate.name.clone(),
        equivalent: candidate.equivalent.is_some(),
        seeds: options.seeds,
        detections,
        empirical: detections as f64 / seeds,
        empirical_lower_95: clopper_pearson_lower(detections, options.seeds),
        from_effect: power_at(false),
        at_default_budget: power_at(true),
        killed_by: killed,
    })
}

/// Measures the power of the selected claims against each candidate, after
/// running the reference under the same seeds (its row is the observed
/// false-alarm rate; a claim it fails is left out as unusable at this cap).
pub fn power(
    candidates: &[Candidate],
    options: &PowerOptions,
    mut progress: impl FnMut(u64, u64),
) -> Result<PowerRun, Error> {
    if options.seeds == 0 {
        return Err(Error::InvalidOption {
            what: "--seeds 0: power needs at least 1 seed".into(),
        });
    }
    let claims = selected_claims(options);
    if claims.is_empty() {
        return Err(Error::InvalidOption {
            what: format!(
                "--family {}: no conformance claim (a claim that exercises a dropout layer) has this family",
                options.family.as_deref().unwrap_or_default()
            ),
        });
    }
    let total = options.seeds * (candidates.len() as u64 + 1);
    let mut done = 0;
    let reference = Candidate::new(&crate::ops::InvertedDropout);
    let mut reference_row = measure(&reference, &claims, &[], options, || {
        done += 1;
        progress(done, total);
    })?;
    reference_row.subject = "reference (false alarms)".into();
    let unusable: Vec<&'static str> = claims
        .iter()
        .map(|c| c.id())
        .filter(|id| reference_row.killed_by.iter().any(|(k, _)| k == id))
        .collect();
    let mut rows = Vec::new();
    for candidate in candidates {
        rows.push(measure(candidate, &claims, &unusable, options, || {
            done += 1;
            progress(done, total);
        })?);
    }
    Ok(PowerRun {
        samples_cap: options.samples,
        claims: claims.iter().map(|c| c.id()).collect(),
        reference: reference_row,
        rows,
        unusable,
    })
}

/// The power table: the reference's false-alarm row, then every candidate.
pub fn table(run: &PowerRun) -> String {
    let rows: Vec<&PowerRow> = std::iter::once(&run.reference).chain(&run.rows).collect();
    let width = rows
        .iter()
        .map(|r| r.subject.len())
        .max()
        .unwrap_or(7)
        .max(7);
    let budget = run
        .samples_cap
        .map_or("each claim's default budget".to_string(), |n| {
            format!("at most {n} draws per claim")
        });
    let mut out = format!(
        "power of the {} conformance claims ({budget}; seeds {}):\n",
        run.claims.len(),
        run.reference.seeds
    );
    out.push_str(&format!(
        "{:width$}  {:>9}  {:>13}  {:>12}  {:>14}  killed by (seeds)\n",
        "subject", "detected", "95% lower bnd", "from effect", "default budget"
    ));
    for r in rows {
        let killers: Vec<String> = r
            .killed_by
            .iter()
            .map(|(id, n)| format!("{id} ({n})"))
            .collect();
        let (effect, default) = if r.equivalent {
            ("equivalent".to_string(), "-".to_string())
        } else {
            (
                format_power(r.from_effect),
                format_power(r.at_default_budget),
            )
        };
        out.push_str(&format!(
            "{:width$}  {:>4}/{:<4}  {:>13.3}  {:>12}  {:>14}  {}\n",
            r.subject,
            r.detections,
            r.seeds,
            r.empirical_lower_95,
            effect,
            default,
            killers.join(", ")
        ));
    }
    if !run.unusable.is_empty() {
        out.push_str(&format!(
            "Left out (the reference fails them at this cap; see `conformance::Options::samples`): {}\n",
            run.unusable.join(", ")
        ));
    }
    let live = run.rows.iter().filter(|r| !r.equivalent).count();
    let weak = run.below(0.999);
    out.push_str(&format!(
        "{} of {live} non-equivalent candidates caught with power >= 0.999 at the default budget{}\n",
        live - weak.len(),
        if weak.is_empty() {
            ".".to_string()
        } else {
            format!(
                "; below: {}",
                weak.iter().map(|r| r.subject.as_str()).collect::<Vec<_>>().join(", ")
            )
        }
    ));
    out
}

fn format_power(p: f64) -> String {
    if p >= 1.0 - 1e-12 {
        "> 1 - 1e-12".into()
    } else if p > 0.999 {
        format!("1 - {:.1e}", 1.0 - p)
    } else {
        format!("{p:.4}")
    }
}

/// A claim's minimum detectable effect at one budget.
#[derive(Debug, Clone, Serialize)]
pub struct DetectableEffect {
    pub claim: &'static str,
    pub samples: u64,
    /// The component with the smallest relative MDE.
    pub component: usize,
    pub mde: f64,
    /// `mde / |target|` for that component (`None` when the target is 0).
    pub relative: Option<f64>,
}

/// Minimum detectable effects of every claim in a report (most sensitive
/// component of each).
pub fn detectable_effects(report: &report::Report) -> Vec<DetectableEffect> {
    report
        .results
        .iter()
        .filter(|r| !r.tests.is_empty())
        .map(|r| {
            let relative = |k: usize| {
                let t = r.target[k].abs();
                (t > 0.0 && r.tests[k].mde > 0.0).then(|| r.tests[k].mde / t)
            };
            let component = (0..r.tests.len())
                .min_by(|&a, &b| {
                    let (ra, rb) = (
                        relative(a).unwrap_or(f64::INFINITY),
                        relative(b).unwrap_or(f64::INFINITY),
                    );
                    ra.total_cmp(&rb)
                })
                .unwrap_or(0);
            DetectableEffect {
                claim: r.id,
                samples: r.samples,
                component,
                mde: r.tests[component].mde,
                relative: relative(component),
            }
        })
        .collect()
}

/// The detectable-effect table.
pub fn effects_table(effects: &[DetectableEffect]) -> String {
    let width = effects
        .iter()
        .map(|e| e.claim.len())
        .max()
        .unwrap_or(5)
        .max(5);
    let mut out = format!(
        "{:width$}  {:>9}  {:>4}  {:>10}  {:>9}\n",
        "claim", "samples", "[k]", "MDE", "MDE/|x|"
    );
    for e in effects {
        out.push_str(&format!(
            "{:width$}  {:>9}  {:>4}  {:>10.3e}  {:>9}\n",
            e.claim,
            e.samples,
            e.component,
            e.mde,
            e.relative
                .map_or("-".into(), |r| format!("{:.3}%", 100.0 * r))
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejection_probability_is_alpha_at_zero_and_one_half_at_the_critical_value() {
        let alpha = crate::stats::assertion_alpha();
        assert!((rejection_probability(0.0) - alpha).abs() < 1e-3 * alpha);
        assert!((rejection_probability(critical_z()) - 0.5).abs() < 1e-9);
    }

    #[test]
    fn clopper_pearson_lower_bounds_match_closed_forms() {
        // k = n: 0.05^(1/n); k = 0: 0.
        assert_eq!(clopper_pearson_lower(10, 10), 0.05f64.powf(0.1));
        assert_eq!(clopper_pearson_lower(0, 10), 0.0);
        // k = 1 of n = 1 is the k = n case; k = 1 of 2: solve 1 − (1−θ)² = 0.05,
        // θ = 1 − √0.95 = 0.025321.
        assert!((clopper_pearson_lower(1, 2) - (1.0 - 0.95f64.sqrt())).abs() < 1e-9);
    }
}
