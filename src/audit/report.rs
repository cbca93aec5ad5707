//! The audit's table (one row per site) and its JSON.

use serde::Serialize;

use super::SiteAudit;
use super::attention::{AttentionAudit, SampledCheck};
use super::gap::Gap;

/// `G ± SE(G)`, or `< upper` when the gap is not resolved.
fn gap_cell(g: &Gap) -> String {
    if g.resolved {
        format!("{:.3e} ± {:.1e}", g.rms, g.rms_se)
    } else {
        format!("< {:.1e}", g.upper)
    }
}

/// A gap the site's form does not define: `—`.
fn optional_gap_cell(g: &Option<Gap>) -> String {
    g.as_ref().map_or_else(|| "—".into(), gap_cell)
}

/// The table: site, form, norm, d, tokens, RMS gap uncorrected / first /
/// second order, the factor, then the warnings under it. With a compound
/// site among them a `gap c1-only` column (the compound's c1-only estimate
/// `LN2(ĉ1)`; `—` on the other sites) follows `gap 1st`.
pub fn table(sites: &[SiteAudit]) -> String {
    let with_c1 = sites.iter().any(|s| s.c1_only.is_some());
    let with_two_point = sites.iter().any(|s| s.two_point.is_some());
    let mut header = vec![
        "site", "form", "norm", "p", "d", "tokens", "truth", "gap eval", "gap 1st", "gap 2nd",
        "factor",
    ];
    if with_c1 {
        header.insert(9, "gap c1-only");
    }
    if with_two_point {
        header.insert(header.len() - 1, "gap 2-point");
    }
    let rows: Vec<Vec<String>> = sites
        .iter()
        .map(|s| {
            let mut row = vec![
                s.name.clone(),
                s.form.name().into(),
                s.norm.into(),
                format!("{}", s.p),
                s.d.to_string(),
                if s.tokens < s.tokens_total {
                    format!("{} of {}", s.tokens, s.tokens_total)
                } else {
                    s.tokens.to_string()
                },
                if s.exact {
                    "exact".into()
                } else {
                    format!("{} masks", s.samples)
                },
                gap_cell(&s.uncorrected),
                gap_cell(&s.first_order),
                optional_gap_cell(&s.second_order),
                format!(
                    "{}{:.1}",
                    if s.factor_is_lower_bound { ">" } else { "" },
                    s.factor
                ),
            ];
            if with_c1 {
                row.insert(9, optional_gap_cell(&s.c1_only));
            }
            if with_two_point {
                row.insert(row.len() - 1, optional_gap_cell(&s.two_point));
            }
            row
        })
        .collect();
    let mut out = columns(&header, rows);
    for s in sites {
        if let Some(mask) = &s.mask {
            out.push_str(&format!(
                "mask: {}: shared, {mask}: the truth enumerates or draws one bit per group; \
                 tokens sharing a draw are correlated in one training forward, each token's \
                 truth is its own expectation\n",
                s.name
            ));
        }
        if s.eval_from_model {
            out.push_str(&format!(
                "eval: {}: the model's own output (a corrected model), not norm(h + v)\n",
                s.name
            ));
        }
        for w in &s.warnings {
            out.push_str(&format!("warning: {}: {w}\n", s.name));
        }
    }
    out.push_str(
        "gaps: RMS over units and tokens of (estimate − E[norm]), noise-corrected; \
         factor = gap eval / gap 1st\n",
    );
    if with_two_point {
        out.push_str(
            "token-level mask: gap 1st is the grouped first order (c from the grouped E[V]), \
             gap 2-point the exact q·norm(h + v/q) + p·norm(h), rounding alone\n",
        );
    }
    if with_c1 {
        out.push_str(
            "compound (LN2(LN1(dropout(v)))): gap 1st is the c1 + c2 estimate, gap c1-only \
             LN2(ĉ1); gap 2nd — (no second-order closed form for LN → LN)\n",
        );
    }
    out
}

/// `header` and `rows` as left-aligned columns two spaces apart, one line
/// each (trailing blanks trimmed).
fn columns(header: &[&str], rows: Vec<Vec<String>>) -> String {
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            rows.iter()
                .map(|r| r[c].chars().count())
                .chain([header[c].chars().count()])
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
    out
}

/// The attention sites' table: site, p, heads, keys, queries, the mean
/// `Var R = (p/q) Σ a²` and its largest value, the mean output variance,
/// then the sampled checks (sampled / closed form on the same rows and
/// coordinates, ± SE, z) and the warnings.
pub fn attention_table(sites: &[AttentionAudit]) -> String {
    let header = [
        "attention site",
        "p",
        "heads",
        "keys",
        "queries",
        "mean Var R",
        "max Var R",
        "mean Var out",
        "sampled/closed Var R",
        "sampled/closed Var out",
    ];
    let check = |c: &SampledCheck| {
        format!(
            "{:.4} ± {:.4} (z {:+.1})",
            c.sampled / c.closed_form,
            c.se / c.closed_form,
            c.z
        )
    };
    let rows: Vec<Vec<String>> = sites
        .iter()
        .map(|s| {
            vec![
                s.name.clone(),
                format!("{}", s.p),
                s.heads.to_string(),
                s.keys.to_string(),
                if s.sampled_queries < s.queries {
                    format!("{} ({} checked)", s.queries, s.sampled_queries)
                } else {
                    s.queries.to_string()
                },
                format!("{:.3e}", s.mean_row_sum_variance),
                format!("{:.3e}", s.max_row_sum_variance),
                format!("{:.3e}", s.mean_output_variance),
                check(&s.row_sum_check),
                check(&s.output_check),
            ]
        })
        .collect();
    let mut out = columns(&header, rows);
    for s in sites {
        for w in &s.warnings {
            out.push_str(&format!("warning: {}: {w}\n", s.name));
        }
    }
    out.push_str(
        "Var R = (p/q) sum a^2 of each head's softmax row; Var out = (p/q) sum_h sum_s a^2 w^2 \
         per output coordinate (E[out] is the eval output); sampled/closed: the attention-row \
         sampler over the sampled coordinates against the closed form on the same ones\n",
    );
    out
}

/// The attention sites as JSON (an array of objects, one per site).
pub fn attention_json(sites: &[AttentionAudit]) -> String {
    serde_json::to_string_pretty(sites).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// The whole audit's text, as `str(audit)` prints it: the norm table (when
/// there are norm sites), a blank line, the attention table (when there are
/// attention sites).
pub fn audit_table(sites: &[SiteAudit], attention: &[AttentionAudit]) -> String {
    let parts: Vec<String> = [
        (!sites.is_empty()).then(|| table(sites)),
        (!attention.is_empty()).then(|| attention_table(attention)),
    ]
    .into_iter()
    .flatten()
    .collect();
    parts.join("\n")
}

/// The whole audit as JSON, as `audit.to_json()` holds it:
/// `{"sites": [...], "attention_sites": [...]}`.
pub fn audit_json(sites: &[SiteAudit], attention: &[AttentionAudit]) -> String {
    #[derive(Serialize)]
    struct Whole<'a> {
        sites: &'a [SiteAudit],
        attention_sites: &'a [AttentionAudit],
    }
    let whole = Whole {
        sites,
        attention_sites: attention,
    };
    serde_json::to_string_pretty(&whole).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// The sites as JSON (an array of objects, one per site).
pub fn json(sites: &[SiteAudit]) -> String {
    serde_json::to_string_pretty(sites).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}
