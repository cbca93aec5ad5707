//! Runs the registry and renders the results as a table or JSON.

use serde_json::{Value, json};

use crate::claims::{Claim, ClaimResult, Shape, Verdict, check};
use crate::engine::{Budget, DEFAULT_SEED, derive_seed};
use crate::error::Error;
use crate::ops::Subject;
use crate::registry::Registry;
use crate::stats::{FAMILY_ALPHA, SUITE_ASSERTION_BUDGET, assertion_alpha, critical_z};
use crate::table::{format_estimate, format_p, format_significant, format_value, format_z};

/// What to run.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub seed: Option<u64>,
    /// Overrides every claim's default sample count.
    pub samples: Option<u64>,
    /// Only this family.
    pub family: Option<String>,
}

/// The results of one run.
#[derive(Debug, Clone)]
pub struct Report {
    pub seed: u64,
    pub subject: String,
    pub results: Vec<ClaimResult>,
}

impl Report {
    /// True when no claim failed (an inconclusive claim, below its
    /// minimum budget, is not a failure; see [`decided`](Self::decided)).
    pub fn passed(&self) -> bool {
        self.failures() == 0
    }

    /// True when every claim ran at or above its minimum budget, so each
    /// has a verdict at its stated size.
    pub fn decided(&self) -> bool {
        self.inconclusive() == 0
    }

    /// The largest minimum budget among the inconclusive claims (`None`
    /// when every claim was decided): `--samples` at least this decides
    /// them all.
    pub fn largest_missing_budget(&self) -> Option<u64> {
        self.results
            .iter()
            .filter(|r| r.verdict == Verdict::Inconclusive)
            .map(|r| r.min_samples)
            .max()
    }

    /// Number of claims below their minimum budget.
    pub fn inconclusive(&self) -> usize {
        self.results
            .iter()
            .filter(|r| r.verdict == Verdict::Inconclusive)
            .count()
    }

    /// Number of claims that failed.
    pub fn failures(&self) -> usize {
        self.results
            .iter()
            .filter(|r| r.verdict == Verdict::Fail)
            .count()
    }
}

/// The claims of `registry` that `options.family` selects (all when
/// `None`); an unknown family is [`Error::UnknownFamily`] naming the known
/// ones.
pub fn select(registry: &Registry, options: &Options) -> Result<Vec<&'static dyn Claim>, Error> {
    registry.select(options.family.as_deref())
}

/// Runs the selected claims of `registry` against `subject`. Claim `id`
/// reads the streams of [`derive_seed`]`(seed, id)`, so claims are
/// independent of each other and each is reproducible alone.
///
/// ```
/// use dropmc::ops::Subject;
/// use dropmc::Registry;
/// use dropmc::conformance::report::{self, Options};
///
/// let options = Options { family: Some("dropout".into()), samples: Some(20_000), ..Options::default() };
/// let report = report::run(&Registry::default(), &Subject::reference(), &options).unwrap();
/// assert!(report.results.iter().all(|r| r.family == "dropout"));
/// assert_eq!(report.failures(), 0);
/// ```
pub fn run(registry: &Registry, subject: &Subject, options: &Options) -> Result<Report, Error> {
    run_with_progress(registry, subject, options, |_, _| {})
}

/// Like [`run`], calling `progress(done, total)` after each claim.
pub fn run_with_progress(
    registry: &Registry,
    subject: &Subject,
    options: &Options,
    progress: impl FnMut(usize, usize),
) -> Result<Report, Error> {
    let claims = select(registry, options)?;
    let seed = options.seed.unwrap_or(DEFAULT_SEED);
    Ok(Report {
        seed,
        subject: subject.name().to_string(),
        results: run_claims(&claims, subject, seed, options.samples, progress)?,
    })
}

/// Runs `claims` against `subject` under the run seed `seed` as [`run`]
/// does (each claim at `samples` draws, or its default budget when `None`),
/// calling `progress(done, total)` after each claim.
pub fn run_claims(
    claims: &[&dyn Claim],
    subject: &Subject,
    seed: u64,
    samples: Option<u64>,
    mut progress: impl FnMut(usize, usize),
) -> Result<Vec<ClaimResult>, Error> {
    let mut results = Vec::with_capacity(claims.len());
    for (i, claim) in claims.iter().enumerate() {
        let n = samples.unwrap_or(claim.default_samples());
        let budget = Budget::new(n, derive_seed(seed, claim.id()))?;
        results.push(check(*claim, subject, budget));
        progress(i + 1, claims.len());
    }
    Ok(results)
}

/// The report as a table at the default width
/// (`table::DEFAULT_WIDTH`, 120 columns), with the statistical fine
/// print: what the snapshot locks and piped output shows.
pub fn table(report: &Report) -> String {
    table_fitted(report, Some(crate::table::DEFAULT_WIDTH))
}

/// The report as a table fitted to `width` columns (`None`: one line per
/// claim, however wide). The formula moves to its own line under its row
/// when the row would not fit; the prose below is wrapped to the width.
///
/// `closed form` is the formula's value at the claim's configuration and
/// `target` what the estimate is tested against: the same number for an
/// exact claim (shown as `=`), the exact oracle for a leading-order one.
pub fn table_fitted(report: &Report, width: Option<usize>) -> String {
    let mut rows = crate::table::Table::new([
        "claim",
        "formula",
        "closed form",
        "target",
        "estimate ± SE",
        "z",
        "p",
        "MDE",
        "sampler",
        "verdict",
    ])
    .spill(1);
    for r in &report.results {
        rows.row(row(r));
    }
    let mut out = match width {
        Some(w) => rows.render(w),
        None => rows.render_wide(),
    };
    let mut prose = String::new();
    let inconclusive = report.inconclusive();
    let passed = report.results.len() - report.failures() - inconclusive;
    let below = if inconclusive > 0 {
        format!(", {inconclusive} inconclusive (below their minimum budget)")
    } else {
        String::new()
    };
    prose.push_str(&format!(
        "\n{passed} of {} claims pass{below} (subject: {}, seed {}).\n",
        report.results.len(),
        report.subject,
        report.seed
    ));
    prose.push_str(&fine_print());
    let (notes, other_notes): (Vec<&ClaimResult>, Vec<&ClaimResult>) = report
        .results
        .iter()
        .filter(|r| r.note.is_some())
        .partition(|r| r.kind != crate::claims::Kind::Exact);
    if !notes.is_empty() {
        prose.push_str("Leading-order claims pass when the sampler agrees with the exact oracle (the z-test) and the closed form's error is of the order it states (the order check: its gap mean_k |closed form - exact| on d = 16…4096 of the grouped oracle falls with slope -n within the bound, and beats the estimate it corrects at the claim's d and on the fitted widths):\n");
        for r in notes {
            let order = r
                .order
                .as_ref()
                .map(|o| format!("; {}", o.summary()))
                .unwrap_or_default();
            prose.push_str(&format!(
                "{}: {}{order}{}\n",
                r.id,
                r.note.as_deref().unwrap_or_default(),
                resolution(r).unwrap_or_default()
            ));
        }
    }
    for r in other_notes {
        prose.push_str(&format!(
            "{}: {}\n",
            r.id,
            r.note.as_deref().unwrap_or_default()
        ));
    }
    for r in &report.results {
        if let Some(reason) = r.inconclusive_reason().or_else(|| r.bound_failure_reason()) {
            prose.push_str(&format!("{}: {reason}\n", r.id));
        }
    }
    for r in report.results.iter().filter(|r| r.order_failed()) {
        let why = r.order.as_ref().and_then(|o| o.reason.as_deref());
        prose.push_str(&format!(
            "{}: FAIL: its closed form fails the order check: {}\n",
            r.id,
            why.unwrap_or_default()
        ));
    }
    for r in report.results.iter().filter(|r| r.error.is_some()) {
        prose.push_str(&format!(
            "{}: {}\n",
            r.id,
            r.error.as_deref().unwrap_or_default()
        ));
    }
    for line in prose.lines() {
        match width {
            Some(w) => {
                for part in crate::table::wrap_text(line, w) {
                    out.push_str(&part);
                    out.push('\n');
                }
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// How to read the numbers: the family rate and the critical value.
pub fn fine_print() -> String {
    format!(
        "Each component is a two-sided test at alpha = {:.0e} (family alpha {:.0e} split by \
         Bonferroni over at most {} assertions): Student-t at the standard error's degrees of \
         freedom for means (|z| > {:.2} in the normal limit fails), exact binomial for counts \
         (z is the normal score of the exact p). Vector claims show their largest-|z| component \
         [k]. MDE: the smallest deviation detected with power 0.8.\n",
        assertion_alpha(),
        FAMILY_ALPHA,
        SUITE_ASSERTION_BUDGET,
        critical_z()
    )
}

/// What the z, p and MDE cells of a claim below its minimum budget show.
const BELOW_MIN: &str = "—";

fn row(r: &ClaimResult) -> [String; 10] {
    let verdict = match r.verdict {
        Verdict::Pass => "pass",
        Verdict::Fail => "FAIL",
        Verdict::Inconclusive => "inconclusive",
    };
    let Some(k) = r.worst() else {
        return [
            r.id.into(),
            r.formula.into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            r.sampler.label().into(),
            verdict.into(),
        ];
    };
    let tag = match r.shape {
        Shape::Vector => format!(" [{k}]"),
        Shape::Scalar => String::new(),
    };
    let test = r.tests[k];
    // Below its minimum budget the test has no stated size: its z, p and
    // MDE (often ±inf, 0 and 0 on a handful of draws) are not shown.
    let below = (r.verdict == Verdict::Inconclusive).then(|| BELOW_MIN.to_string());
    [
        r.id.into(),
        r.formula.into(),
        format!(
            "{}{tag}",
            r.analytic.get(k).map_or("-".into(), |v| format_value(*v))
        ),
        match r.kind {
            crate::claims::Kind::Exact => "=".into(),
            crate::claims::Kind::LeadingOrder { .. } => format_value(r.target[k]),
        },
        format_estimate(r.estimate[k].value, r.estimate[k].stderr),
        below.clone().unwrap_or_else(|| format_z(test.z)),
        below.clone().unwrap_or_else(|| format_p(test.p_value)),
        below.unwrap_or_else(|| format_significant(test.mde, 2)),
        r.sampler.label().into(),
        match r.verdict {
            Verdict::Inconclusive => format!("below min {}", r.min_samples),
            Verdict::Fail if r.bound_failure_reason().is_some() => format!("{verdict} (bound)"),
            _ => verdict.into(),
        },
    ]
}

/// One number for a scalar claim, an array for a vector claim.
pub fn shaped(shape: Shape, values: &[f64]) -> Value {
    match (shape, values) {
        (Shape::Scalar, [v]) => json!(v),
        _ => json!(values),
    }
}

/// A leading-order claim's gap `|closed form − exact|` per component over
/// the minimum detectable effect of this run's estimate (`None` for an
/// exact claim, or when the run made no tests).
pub fn gap_over_mde(r: &ClaimResult) -> Option<Vec<f64>> {
    let gap = r.gap()?;
    if gap.is_empty() || gap.len() != r.tests.len() {
        return None;
    }
    Some(
        gap.iter()
            .zip(&r.tests)
            .map(|(g, t)| g.abs() / t.mde)
            .collect(),
    )
}

/// The note's last clause for a leading-order claim: on how many components
/// this run's budget resolves the approximation's gap to the exact value
/// (`|gap| ≥ MDE`: a z-test of the estimate against the closed form would
/// reject with the quoted power). A measured gap, not a failure.
fn resolution(r: &ClaimResult) -> Option<String> {
    let ratios = gap_over_mde(r)?;
    let resolved = ratios.iter().filter(|&&x| x >= 1.0).count();
    let largest = ratios.iter().fold(0.0f64, |m, &x| m.max(x));
    let verdict = match resolved {
        0 => "not distinguishable from the exact value at this budget",
        n if n == ratios.len() => "distinguishable from the exact value on every component",
        _ => "distinguishable from the exact value on some components",
    };
    Some(format!(
        "; at {} masks |gap| >= MDE on {resolved} of {} components (largest |gap|/MDE {largest:.1}): \
         the closed form is {verdict}",
        r.samples,
        ratios.len()
    ))
}

/// The report as JSON, in the documented shape.
pub fn to_json(report: &Report) -> Value {
    let claims: Vec<Value> = report
        .results
        .iter()
        .map(|r| {
            let column = |f: &dyn Fn(usize) -> f64| -> Value {
                shaped(r.shape, &(0..r.tests.len()).map(f).collect::<Vec<_>>())
            };
            json!({
                "id": r.id,
                "family": r.family,
                "kind": r.kind.label(),
                "formula": r.formula,
                "samples": r.samples,
                "sampler": r.sampler.label(),
                "analytic": shaped(r.shape, &r.analytic),
                "exact": r.exact.as_ref().map(|e| shaped(r.shape, e)),
                "estimate": column(&|k| r.estimate[k].value),
                "stderr": column(&|k| r.estimate[k].stderr),
                "z": column(&|k| r.tests[k].z),
                "p_value": column(&|k| r.tests[k].p_value),
                "mde": column(&|k| r.tests[k].mde),
                "verdict": r.verdict.label(),
                "test": r.statistic.label(),
                "min_samples": r.min_samples,
                "below_budget": r.below_budget,
                "error": r.error,
                "note": r.note,
                "order": r.order,
                "gap_over_mde": gap_over_mde(r).map(|g| shaped(r.shape, &g)),
            })
        })
        .collect();
    json!({
        "seed": report.seed,
        "subject": report.subject,
        "family_alpha": FAMILY_ALPHA,
        "assertion_alpha": assertion_alpha(),
        "critical_z": critical_z(),
        "claims": claims,
    })
}
