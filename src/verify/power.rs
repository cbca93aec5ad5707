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

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, DiscreteCDF, Normal};

use crate::claims::Verdict;
use crate::error::Error;
use crate::ops::{DropoutLayer, Subject};
use crate::report::{self, Options};
use crate::stats::critical_z;

/// What to run.
#[derive(Debug, Clone)]
pub struct PowerOptions {
    pub seeds: u64,
    pub first_seed: u64,
    pub samples: Option<u64>,
    pub family: Option<String>,
}

/// How one wrong implementation fares.
#[derive(Debug, Clone, Serialize)]
pub struct PowerRow {
    pub subject: String,
    pub seeds: u64,
    /// Seeds under which some claim failed.
    pub detections: u64,
    /// `detections / seeds`.
    pub empirical: f64,
    /// Exact one-sided 95 % lower confidence bound on the detection rate
    /// (Clopper-Pearson).
    pub empirical_lower_95: f64,
    /// Power from the mean effect sizes (see the module docs).
    pub from_effect: f64,
    /// Claims that failed under at least one seed, with the count.
    pub killed_by: Vec<(String, u64)>,
}

/// `π(δ) = Φ(|δ| − z_c) + Φ(−|δ| − z_c)`, the two-sided rejection probability
/// of a z-test whose statistic is `N(δ, 1)`.
pub fn rejection_probability(delta: f64) -> f64 {
    let normal = Normal::standard();
    let zc = critical_z();
    normal.cdf(delta.abs() - zc) + normal.cdf(-delta.abs() - zc)
}

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

/// Measures the power of the selected claims against each layer in `layers`.
pub fn power(
    layers: &[&dyn DropoutLayer],
    options: &PowerOptions,
    mut progress: impl FnMut(u64, u64),
) -> Result<Vec<PowerRow>, Error> {
    if options.seeds == 0 {
        return Err(Error::TooFewSamples { needed: 1, got: 0 });
    }
    let total = options.seeds * layers.len() as u64;
    let mut done = 0;
    let mut rows = Vec::new();
    for layer in layers {
        let subject = Subject::with_dropout(*layer);
        let mut detections = 0;
        let mut killed: Vec<(String, u64)> = Vec::new();
        // Sum of z per (claim, component), to average over seeds.
        let mut z_sums: Vec<Vec<f64>> = Vec::new();
        let mut errored: Vec<bool> = Vec::new();
        for i in 0..options.seeds {
            let run_options = Options {
                seed: Some(options.first_seed + i),
                samples: options.samples,
                family: options.family.clone(),
            };
            let report = report::run(&subject, &run_options)?;
            if !report.passed() {
                detections += 1;
            }
            for (c, r) in report.results.iter().enumerate() {
                if i == 0 {
                    z_sums.push(vec![0.0; r.tests.len()]);
                    errored.push(false);
                }
                errored[c] |= r.error.is_some();
                for (sum, t) in z_sums[c].iter_mut().zip(&r.tests) {
                    *sum += if t.z.is_finite() {
                        t.z
                    } else {
                        t.z.signum() * 1e6
                    };
                }
                if r.verdict == Verdict::Fail {
                    match killed.iter_mut().find(|(id, _)| id == r.id) {
                        Some((_, n)) => *n += 1,
                        None => killed.push((r.id.to_string(), 1)),
                    }
                }
            }
            done += 1;
            progress(done, total);
        }
        let seeds = options.seeds as f64;
        let miss_all: f64 = if errored.iter().any(|e| *e) {
            0.0 // a claim that cannot even be evaluated fails under every seed
        } else {
            z_sums
                .iter()
                .flatten()
                .map(|s| 1.0 - rejection_probability(s / seeds))
                .product()
        };
        rows.push(PowerRow {
            subject: layer.name().to_string(),
            seeds: options.seeds,
            detections,
            empirical: detections as f64 / seeds,
            empirical_lower_95: clopper_pearson_lower(detections, options.seeds),
            from_effect: 1.0 - miss_all,
            killed_by: killed,
        });
    }
    Ok(rows)
}

/// The power table.
pub fn table(rows: &[PowerRow]) -> String {
    let width = rows
        .iter()
        .map(|r| r.subject.len())
        .max()
        .unwrap_or(7)
        .max(7);
    let mut out = format!(
        "{:width$}  {:>9}  {:>14}  {:>12}  killed by (seeds)\n",
        "subject", "detected", "95% lower bnd", "from effect"
    );
    for r in rows {
        let killers: Vec<String> = r
            .killed_by
            .iter()
            .map(|(id, n)| format!("{id} ({n})"))
            .collect();
        out.push_str(&format!(
            "{:width$}  {:>4}/{:<4}  {:>14.3}  {:>12}  {}\n",
            r.subject,
            r.detections,
            r.seeds,
            r.empirical_lower_95,
            format_power(r.from_effect),
            killers.join(", ")
        ));
    }
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
