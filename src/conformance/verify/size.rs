//! The measured size of the report at small budgets: run the reference
//! report at each budget under many seeds and count, per budget, the claims
//! that fail, are inconclusive (below their minimum budget) and pass.
//!
//! On the reference every claim's null hypothesis is true, so every failure
//! is a false alarm. The stated rate is at most [`FAMILY_ALPHA`] per run of
//! the whole suite, so over `K` runs the expected number of runs with any
//! failure is at most `K · FAMILY_ALPHA` (4·10⁻⁵ for 40 seeds): a single
//! failing run is evidence against the stated rate at level `K · α_family`.
//! That is what `dropmc size` measures, and what it exits 1 on.

use serde::Serialize;

use crate::claims::Verdict;
use crate::conformance::report::{self, Options};
use crate::conformance::verify::Replication;
use crate::error::Error;
use crate::ops::Subject;
use crate::registry::Registry;
use crate::stats::FAMILY_ALPHA;

/// The budgets measured by default.
pub const DEFAULT_BUDGETS: [u64; 5] = [500, 1_000, 2_000, 5_000, 20_000];

/// What to measure.
#[derive(Debug, Clone)]
pub struct SizeOptions {
    /// Draws per claim: one row of counts per budget.
    pub budgets: Vec<u64>,
    /// The seeds each budget runs under, and the family (`None`: the whole
    /// registry).
    pub replication: Replication,
}

/// The counts at one budget over all seeds.
#[derive(Debug, Clone, Serialize)]
pub struct BudgetRow {
    pub samples: u64,
    pub runs: u64,
    /// Runs (seeds) in which at least one claim failed.
    pub failing_runs: u64,
    /// Claim verdicts summed over the runs.
    pub fail: u64,
    pub inconclusive: u64,
    pub pass: u64,
    /// The failed claims with the seed each failed at.
    pub failures: Vec<(u64, &'static str)>,
}

/// The whole measurement.
#[derive(Debug, Clone, Serialize)]
pub struct SizeRun {
    pub subject: String,
    pub family_alpha: f64,
    /// `seeds · FAMILY_ALPHA`: the stated bound on the expected number of
    /// failing runs per budget.
    pub expected_failing_runs: f64,
    pub rows: Vec<BudgetRow>,
}

impl SizeRun {
    /// True when no run failed at any budget.
    pub fn honest(&self) -> bool {
        self.rows.iter().all(|r| r.failing_runs == 0)
    }
}

/// Runs the measurement on the claims of `registry`, calling
/// `progress(done, total)` after each report.
pub fn measure(
    registry: &Registry,
    subject: &Subject,
    options: &SizeOptions,
    mut progress: impl FnMut(u64, u64),
) -> Result<SizeRun, Error> {
    let plan = &options.replication;
    if plan.seeds == 0 || options.budgets.is_empty() {
        return Err(Error::InvalidOption {
            what: "size needs at least one seed and one budget".into(),
        });
    }
    let total = plan.seeds * options.budgets.len() as u64;
    let mut done = 0;
    let mut rows = Vec::new();
    for &samples in &options.budgets {
        let mut row = BudgetRow {
            samples,
            runs: plan.seeds,
            failing_runs: 0,
            fail: 0,
            inconclusive: 0,
            pass: 0,
            failures: Vec::new(),
        };
        for seed in plan.seed_range() {
            let run = report::run(
                registry,
                subject,
                &Options {
                    seed: Some(seed),
                    samples: Some(samples),
                    family: plan.family.clone(),
                },
            )?;
            let mut failed = false;
            for r in &run.results {
                match r.verdict {
                    Verdict::Pass => row.pass += 1,
                    Verdict::Inconclusive => row.inconclusive += 1,
                    Verdict::Fail => {
                        row.fail += 1;
                        row.failures.push((seed, r.id));
                        failed = true;
                    }
                }
            }
            row.failing_runs += u64::from(failed);
            done += 1;
            progress(done, total);
        }
        rows.push(row);
    }
    Ok(SizeRun {
        subject: subject.name().to_string(),
        family_alpha: FAMILY_ALPHA,
        expected_failing_runs: plan.seeds as f64 * FAMILY_ALPHA,
        rows,
    })
}

/// The measurement as a table, fitted to the terminal width (`table::output_width`).
pub fn table(run: &SizeRun) -> String {
    let width = crate::table::output_width();
    let mut out = String::new();
    crate::conformance::verify::power::push_wrapped(
        &mut out,
        &format!(
            "measured size of the report on the {} (stated: at most {:.0e} false alarms per run; \
             {:.1e} failing runs expected per budget)",
            run.subject, run.family_alpha, run.expected_failing_runs
        ),
        width,
    );
    let mut t = crate::table::Table::new([
        "samples",
        "runs",
        "failing runs",
        "fail",
        "inconclusive",
        "pass",
    ]);
    for r in &run.rows {
        t.row([
            r.samples.to_string(),
            r.runs.to_string(),
            r.failing_runs.to_string(),
            r.fail.to_string(),
            r.inconclusive.to_string(),
            r.pass.to_string(),
        ]);
    }
    out.push_str(&t.render(width));
    for r in &run.rows {
        for (seed, id) in &r.failures {
            out.push_str(&format!(
                "FAIL at {} samples, seed {seed}: {id}\n",
                r.samples
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_semantics_family_is_honest_at_a_tiny_budget_and_counts_add_up() {
        let plan = Replication {
            seeds: 2,
            first_seed: 1,
            family: Some("semantics".into()),
        };
        let options = SizeOptions {
            budgets: vec![64],
            replication: plan.clone(),
        };
        let run = measure(
            &Registry::default(),
            &Subject::reference(),
            &options,
            |_, _| {},
        )
        .expect("runs");
        let row = &run.rows[0];
        assert_eq!(row.fail + row.inconclusive + row.pass, 2 * 7);
        assert!(run.honest(), "{}", table(&run));
        let empty = SizeOptions {
            replication: Replication { seeds: 0, ..plan },
            ..options
        };
        assert!(matches!(
            measure(
                &Registry::default(),
                &Subject::reference(),
                &empty,
                |_, _| {}
            ),
            Err(Error::InvalidOption { .. })
        ));
    }
}
