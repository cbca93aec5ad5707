//! The calibration as a readable table.

use super::Calibration;
use crate::table::format_p;
use crate::table::{Table, wrap_text};

/// The calibration as a readable table: one row per claim with its failure
/// count and rate, the failure test's p-value and threshold, the smallest
/// per-component KS p-value, and the flag.
pub fn table(c: &Calibration) -> String {
    table_fitted(c, crate::table::output_width())
}

/// The calibration table fitted to `width` columns: the prose lines wrap,
/// a claim's note moves under its row when the table is too wide.
pub fn table_fitted(c: &Calibration, width: usize) -> String {
    let mut head = format!(
        "subject {}, {} seeds ({}..{}): {} failing runs (the whole suite expects at most {:.1e} \
         at family alpha {:.0e})\n",
        c.subject,
        c.seeds,
        c.first_seed,
        (c.first_seed + c.seeds).saturating_sub(1),
        c.failed_runs,
        c.expected_failed_runs,
        c.family_alpha
    );
    head.push_str(&format!(
        "flag level {:.1e} per test ({:.0e} over {} tests: a failure count per claim, a KS per \
         component, the pooled KS, the dispersion)\n",
        c.level.flag_level, c.level.flag_alpha, c.level.tests
    ));
    match &c.pooled {
        Some(t) => head.push_str(&format!(
            "pooled p-values: n = {}, KS D = {:.4}, p = {}; {:.2} % below 0.05 (5 % expected){}\n",
            t.n,
            t.d,
            format_p(t.p_value),
            100.0 * c.fraction_below_5_percent,
            if c.pooled_flagged {
                "  NON-UNIFORM"
            } else {
                ""
            }
        )),
        None => head.push_str("pooled KS skipped: too few p-values to reach the level\n"),
    }
    if let Some(d) = &c.dispersion {
        head.push_str(&format!(
            "dispersion of the SE-standardized statistics (t-tests, and two-point counts by their SE): sum of squared normal scores \
             {:.1} over {} p-values of {} components (ratio {:.3}, 1 expected), p = {}{}\n",
            d.statistic,
            d.dof,
            d.components,
            d.ratio,
            format_p(d.p_value),
            if d.flagged { "  OVERDISPERSED" } else { "" }
        ));
    }
    let below: Vec<&str> = c
        .claims
        .iter()
        .filter(|x| x.below_minimum_budget)
        .map(|x| x.id.as_str())
        .collect();
    if !below.is_empty() {
        head.push_str(&format!(
            "below their minimum budget (inconclusive, reported but not flagged): {}\n",
            below.join(", ")
        ));
    }
    if let Some(skip) = &c.ks_skipped {
        head.push_str(&format!("{skip}\n"));
    }
    let mut out = String::new();
    for line in head.lines() {
        for piece in wrap_text(line, width.max(crate::table::MIN_WRAP)) {
            out.push_str(&piece);
            out.push('\n');
        }
    }
    out.push('\n');
    let mut t = Table::new([
        "claim", "kind", "failures", "rate", "fail p", "flag at", "min KS p", "flag", "note",
    ])
    .wrap(7)
    .wrap(8)
    .spill(8);
    for claim in &c.claims {
        let f = &claim.failure;
        let min_ks = claim
            .components
            .iter()
            .filter_map(|x| x.ks.map(|t| t.p_value))
            .reduce(f64::min)
            .map_or_else(
                || {
                    if claim.components.is_empty() {
                        "-".to_string()
                    } else {
                        "skipped".to_string()
                    }
                },
                format_p,
            );
        let flag = match (f.flagged, claim.components.iter().any(|x| x.flagged)) {
            (true, true) => "FAILS TOO OFTEN, NON-UNIFORM",
            (true, false) => "FAILS TOO OFTEN",
            (false, true) => "NON-UNIFORM",
            (false, false) => "ok",
        };
        t.row([
            claim.id.to_string(),
            claim.kind.to_string(),
            format!("{}/{}", f.failures, c.seeds),
            format!("{:.3}", f.rate),
            format_p(f.p_value),
            f.threshold.map_or("-".to_string(), |t| format!("F>={t}")),
            min_ks,
            flag.to_string(),
            claim.note.clone().unwrap_or_default(),
        ]);
    }
    out.push_str(&t.render(width));
    let flagged = c.flagged();
    out.push_str(&format!(
        "\n{}\n",
        if c.calibrated() {
            "calibrated: no claim fails more often than its level allows, every tested p-value \
             distribution uniform"
                .to_string()
        } else if flagged.is_empty() {
            let mut why = Vec::new();
            if c.pooled_flagged {
                why.push("the pooled p-values are not uniform");
            }
            if c.dispersion.is_some_and(|d| d.flagged) {
                why.push(
                    "the standardized statistics are overdispersed (standard errors too small)",
                );
            }
            format!("NOT calibrated: {}", why.join("; "))
        } else {
            format!(
                "NOT calibrated: {} flagged: {}",
                flagged.len(),
                flagged
                    .iter()
                    .map(|x| x.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    ));
    out
}
