//! The `eval` table: one line per component, fitted to the terminal by
//! [`crate::table::Table`], then the sample-size guide, the warnings and
//! why a channel has no value.
//!
//! Columns: the quantity, whether its closed form is `exact` or leading
//! order (`O(1/d)`), the closed form, the exact value (`-` where none is
//! computed), the Monte Carlo estimate `± SE` (`—` with `--samples 0`), its
//! `z` against the exact value (against the closed form where there is no
//! exact value), and the second-order value where the crate has one.

use super::{EvalOutput, EvalResult, FormulaKind, Values};
use crate::table::{Table, wrap_text};
use crate::table::{format_estimate, format_value};

/// What the table prints where a value is absent: no Monte Carlo run, or
/// no exact value computed.
const NO_MONTE_CARLO: &str = "—";
const NO_EXACT: &str = "-";

/// Renders an output fitted to the terminal width (`table::output_width`).
pub fn table(output: &EvalOutput) -> String {
    table_fitted(output, crate::table::output_width())
}

/// Renders an output fitted to `width` columns.
pub fn table_fitted(output: &EvalOutput, width: usize) -> String {
    let mut out = wrap_text(&header_line(output), width.max(MIN_NOTE_WIDTH)).join("\n");
    out.push('\n');
    let has_second = output.results.iter().any(|r| r.second_order.is_some());
    let mut headers = vec![
        "quantity",
        "kind",
        "formula",
        "exact",
        "Monte Carlo ± SE",
        "z",
    ];
    if has_second {
        headers.push("second order");
    }
    let mut t = Table::new(headers);
    for r in &output.results {
        for k in 0..r.formula.as_slice().len() {
            t.row(row(r, k, deterministic(output)));
        }
    }
    out.push_str(&t.render(width));
    let mut guide = super::second_order::guide_lines(output);
    if gap_shows(output) {
        if !guide.is_empty() && !guide.ends_with('\n') {
            guide.push('\n');
        }
        guide.push_str(GAP_NOTE);
        guide.push('\n');
    }
    if deterministic(output) && output.samples > 0 {
        if !guide.is_empty() && !guide.ends_with('\n') {
            guide.push('\n');
        }
        guide.push_str(DETERMINISTIC_NOTE);
        guide.push('\n');
    }
    let warnings = grouped_warnings(output)
        .into_iter()
        .map(|(warning, names)| format!("warning ({}): {warning}", names.join(", ")));
    let unjudged = output.channels.iter().filter_map(|c| c.reason.clone());
    for text in guide
        .lines()
        .map(String::from)
        .chain(warnings)
        .chain(unjudged)
    {
        for line in wrap_text(&text, width.max(MIN_NOTE_WIDTH)) {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}

/// The guide and the warnings are wrapped to the table's width, but not
/// narrower than this.
const MIN_NOTE_WIDTH: usize = 40;

/// Each distinct warning once, with the results that carry it, in order.
fn grouped_warnings(output: &EvalOutput) -> Vec<(&str, Vec<&str>)> {
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for r in &output.results {
        for w in &r.warnings {
            match groups.iter_mut().find(|(text, _)| text == w) {
                Some((_, names)) => names.push(&r.name),
                None => groups.push((w, vec![&r.name])),
            }
        }
    }
    groups
}

fn header_line(output: &EvalOutput) -> String {
    let eps = output.eps.map_or(String::new(), |e| format!(", eps = {e}"));
    let run = if output.samples == 0 {
        "no Monte Carlo: --samples 0".to_string()
    } else {
        let mut samplers: Vec<&str> = output
            .results
            .iter()
            .filter_map(|r| r.sampler.map(|s| s.label()))
            .collect();
        samplers.dedup();
        format!(
            "{} samples, seed {}, {} sampler",
            output.samples,
            output.seed,
            samplers.join(" and ")
        )
    };
    format!(
        "{} at p = {}, d = {}{eps} ({run})",
        output.quantity, output.p, output.d
    )
}

/// At `p = 0` dropout is the identity: every draw gives the same value up
/// to rounding, so a "standard error" is the rounding's spread and a z
/// against it means nothing (the table shows none).
fn deterministic(output: &EvalOutput) -> bool {
    output.p == 0.0
}

/// The line under a [`deterministic`] table.
pub const DETERMINISTIC_NOTE: &str = "at p = 0 dropout is the identity: every draw gives the same \
     value up to rounding, so no z is shown (the ± is the rounding's spread)";

/// The line under a table where a leading-order row with no exact value
/// has `|z|` past the suite's critical value ([`gap_shows`]).
pub const GAP_NOTE: &str = "an O(1/d) row without an exact value is z-tested against its \
     leading-order formula: a large |z| there is the formula's O(1/d) gap resolved by the \
     Monte Carlo, not a sampling error";

/// Whether some leading-order row has no exact value and `|z|` past the
/// critical value: its z measures the approximation's gap.
fn gap_shows(output: &EvalOutput) -> bool {
    output.p != 0.0
        && output.results.iter().any(|r| {
            r.kind == FormulaKind::LeadingOrder
                && r.exact.is_none()
                && r.mc.as_ref().zip(r.stderr.as_ref()).is_some_and(|(m, s)| {
                    let (m, s, f) = (m.as_slice(), s.as_slice(), r.formula.as_slice());
                    (0..f.len()).any(|k| {
                        s[k] > 0.0 && ((m[k] - f[k]) / s[k]).abs() > crate::stats::critical_z()
                    })
                })
        })
}

fn row(r: &EvalResult, k: usize, deterministic: bool) -> Vec<String> {
    let name = match r.formula {
        Values::Scalar(_) => r.name.clone(),
        Values::PerUnit(_) => format!("{}[{}]", r.name, r.unit(k)),
    };
    let kind = match (r.kind, r.order) {
        (FormulaKind::Exact, _) => "exact".to_string(),
        (FormulaKind::LeadingOrder, Some(1)) => "O(1/d)".to_string(),
        (FormulaKind::LeadingOrder, Some(n)) => format!("O(1/d^{n})"),
        (FormulaKind::LeadingOrder, None) => "approx.".to_string(),
    };
    let formula = r.formula.as_slice()[k];
    let exact = r.exact.as_ref().map(|e| e.as_slice()[k]);
    let estimate =
        r.mc.as_ref()
            .zip(r.stderr.as_ref())
            .map(|(m, s)| (m.as_slice()[k], s.as_slice()[k]));
    let (mc, z) = match estimate {
        Some((m, s)) => {
            let reference = exact.unwrap_or(formula);
            let z = if s > 0.0 && !deterministic {
                crate::table::format_z((m - reference) / s)
            } else {
                String::new()
            };
            (format_estimate(m, s), z)
        }
        None => (NO_MONTE_CARLO.to_string(), String::new()),
    };
    vec![
        name,
        kind,
        format_value(formula),
        exact.map_or(NO_EXACT.to_string(), format_value),
        mc,
        z,
        r.second_order
            .as_ref()
            .map_or(String::new(), |s| format_value(s.as_slice()[k])),
    ]
}
