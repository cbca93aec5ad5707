//! The audit's table (one row per site) and its JSON.

use super::SiteAudit;
use super::gap::Gap;

/// `G ± SE(G)`, or `< upper` when the gap is not resolved.
fn gap_cell(g: &Gap) -> String {
    if g.resolved {
        format!("{:.3e} ± {:.1e}", g.rms, g.rms_se)
    } else {
        format!("< {:.1e}", g.upper)
    }
}

/// The table: site, form, norm, d, tokens, RMS gap uncorrected / first /
/// second order, the factor, then the warnings under it.
pub fn table(sites: &[SiteAudit]) -> String {
    let header = [
        "site", "form", "norm", "p", "d", "tokens", "truth", "gap eval", "gap 1st", "gap 2nd",
        "factor",
    ];
    let rows: Vec<Vec<String>> = sites
        .iter()
        .map(|s| {
            vec![
                s.name.clone(),
                s.form.name().into(),
                s.norm.into(),
                format!("{}", s.p),
                s.d.to_string(),
                s.tokens.to_string(),
                if s.exact {
                    "exact".into()
                } else {
                    format!("{} masks", s.samples)
                },
                gap_cell(&s.uncorrected),
                gap_cell(&s.first_order),
                gap_cell(&s.second_order),
                format!(
                    "{}{:.1}",
                    if s.factor_is_lower_bound { ">" } else { "" },
                    s.factor
                ),
            ]
        })
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            rows.iter()
                .map(|r| r[c].chars().count())
                .chain([header[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<String>| -> String {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    let mut out = line(header.iter().map(|h| h.to_string()).collect());
    out.push('\n');
    for r in rows {
        out.push_str(&line(r));
        out.push('\n');
    }
    for s in sites {
        for w in &s.warnings {
            out.push_str(&format!("warning: {}: {w}\n", s.name));
        }
    }
    out.push_str(
        "gaps: RMS over units and tokens of (estimate − E[norm]), noise-corrected; \
         factor = gap eval / gap 1st\n",
    );
    out
}

/// The sites as JSON (an array of objects, one per site).
pub fn json(sites: &[SiteAudit]) -> String {
    serde_json::to_string_pretty(sites).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}
