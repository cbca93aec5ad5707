//! The power run and the detectable effects as tables.

use serde::Serialize;

use super::{INTERVAL_LEVEL, PowerRow, PowerRun, SeedRate};
use crate::conformance::report;
use crate::table::{Table, wrap_text};

/// The power table: the reference's false-alarm row, then every candidate,
/// fitted to the terminal width, `table::output_width` (the list of killing claims
/// wraps).
pub fn table(run: &PowerRun) -> String {
    table_fitted(run, crate::table::output_width())
}

/// The power table fitted to `width` columns.
pub fn table_fitted(run: &PowerRun, width: usize) -> String {
    let rows: Vec<&PowerRow> = std::iter::once(&run.reference).chain(&run.rows).collect();
    let budget = run
        .samples_cap
        .map_or("each claim's default budget".to_string(), |n| {
            format!("at most {n} draws per claim")
        });
    let mut out = String::new();
    push_wrapped(
        &mut out,
        &format!(
            "power of the {} conformance claims ({budget}; seeds {}):",
            run.claims.len(),
            run.reference.seeds
        ),
        width,
    );
    let mut t = Table::new([
        "subject",
        "detected",
        "95% CP interval",
        "certain (CP)",
        "from effect",
        "default budget",
        "killed by (seeds)",
    ])
    .wrap(6);
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
        t.row([
            r.subject.clone(),
            format!("{}/{}", r.detections, r.seeds),
            format_interval(&r.detected),
            format!(
                "{}/{} {}",
                r.certain.count,
                r.seeds,
                format_interval(&r.certain)
            ),
            effect,
            default,
            killers.join(", "),
        ]);
    }
    out.push_str(&t.render(width));
    push_wrapped(
        &mut out,
        &format!(
            "Intervals: exact two-sided Clopper-Pearson at {:.0}% over the {} seeds. \
             certain: seeds where some component's z was infinite (a violated rule or an \
             underflowed exact p-value), counted as certain detections, never averaged into z; \
             the default-budget power credits them only their one-sided {:.0}% lower bound.",
            100.0 * INTERVAL_LEVEL,
            run.reference.seeds,
            100.0 * INTERVAL_LEVEL,
        ),
        width,
    );
    if !run.unusable.is_empty() {
        push_wrapped(
            &mut out,
            &format!(
                "Left out (the reference fails them at this cap; see `conformance::Options::samples`): {}",
                run.unusable.join(", ")
            ),
            width,
        );
    }
    let live = run.rows.iter().filter(|r| !r.equivalent).count();
    let below = run.below(0.999);
    // Caught through an infinite z under every seed: their power is bounded
    // by the seed count, not by an effect size.
    let (certain, weak): (Vec<&PowerRow>, Vec<&PowerRow>) =
        below.into_iter().partition(|r| r.certain.count == r.seeds);
    if !certain.is_empty() {
        let k = run.reference.seeds;
        push_wrapped(
            &mut out,
            &format!(
                "Caught through an infinite z under every seed ({k} of {k}), so bounded only by the \
                 seed count (one-sided {:.0}% lower bound {:.3}): {}",
                100.0 * INTERVAL_LEVEL,
                super::clopper_pearson_lower(
                    run.reference.seeds,
                    run.reference.seeds,
                    1.0 - INTERVAL_LEVEL
                ),
                certain
                    .iter()
                    .map(|r| r.subject.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            width,
        );
    }
    push_wrapped(
        &mut out,
        &format!(
            "{} of {live} non-equivalent candidates caught with power >= 0.999 at the default budget{}",
            live - weak.len() - certain.len(),
            if weak.is_empty() {
                ".".to_string()
            } else {
                format!(
                    "; below: {}",
                    weak.iter()
                        .map(|r| r.subject.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        ),
        width,
    );
    out
}

/// `text` wrapped to `width` (at least [`crate::table::MIN_WRAP`]), one
/// line each.
pub(crate) fn push_wrapped(out: &mut String, text: &str, width: usize) {
    for line in wrap_text(text, width.max(crate::table::MIN_WRAP)) {
        out.push_str(&line);
        out.push('\n');
    }
}

/// `[lower, upper]` of a Clopper–Pearson interval, to 3 digits.
fn format_interval(rate: &SeedRate) -> String {
    format!("[{:.3}, {:.3}]", rate.lower, rate.upper)
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

/// The detectable-effect table, fitted to the terminal width (`table::output_width`).
pub fn effects_table(effects: &[DetectableEffect]) -> String {
    let mut t = Table::new(["claim", "samples", "[k]", "MDE", "MDE/|x|"]);
    for e in effects {
        t.row([
            e.claim.to_string(),
            e.samples.to_string(),
            e.component.to_string(),
            format!("{:.3e}", e.mde),
            e.relative
                .map_or("-".into(), |r| format!("{:.3}%", 100.0 * r)),
        ]);
    }
    t.render(crate::table::output_width())
}
