//! The kill matrix as JSON and as text.

use super::KillMatrix;

/// The kill matrix as JSON:
/// `{"mutants": [{"id", "mistake", "equivalent", "killed_by": [claim ids]}, …]}`
/// (plus `source`, `reason`, the killing `z` per claim in `kills`, and
/// `unusable_claims`).
pub fn to_json(matrix: &KillMatrix) -> serde_json::Value {
    let mutants: Vec<serde_json::Value> = matrix
        .rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "id": r.id,
                "mistake": r.mistake,
                "source": r.source,
                "equivalent": r.equivalent,
                "reason": r.reason,
                "killed_by": r.kills.iter().map(|k| k.claim).collect::<Vec<_>>(),
                "kills": r.kills,
                "power": r.power,
            })
        })
        .collect();
    serde_json::json!({ "mutants": mutants, "unusable_claims": matrix.unusable })
}

/// The kill matrix as text: one block per mutant with its killing claims.
pub fn table(matrix: &KillMatrix, width: usize) -> String {
    use crate::table::wrap_text;
    let indented = |out: &mut String, text: &str| {
        for line in wrap_text(text, width.saturating_sub(4)) {
            out.push_str("    ");
            out.push_str(&line);
            out.push('\n');
        }
    };
    let rows = &matrix.rows;
    let mut out = String::new();
    for r in rows {
        let status = match (r.equivalent, r.kills.is_empty()) {
            (true, true) => "equivalent (survives, as it must)".to_string(),
            (true, false) => format!("equivalent, but killed by {} claims", r.kills.len()),
            (false, true) => "SURVIVED".to_string(),
            (false, false) => format!("killed by {} claims", r.kills.len()),
        };
        out.push_str(&format!("{:24} {status}\n", r.id));
        indented(&mut out, &format!("mistake: {} [{}]", r.mistake, r.source));
        if let Some(reason) = r.reason {
            indented(&mut out, &format!("why equivalent: {reason}"));
        }
        if let Some(p) = &r.power {
            let miss = if p.miss > 0.0 {
                format!("{:.1e}", p.miss)
            } else {
                format!(
                    "Phi({:.1}), below 1e-300",
                    crate::stats::critical_z() - p.lambda
                )
            };
            indented(
                &mut out,
                &format!(
                    "power of {} at {} draws: effect {:.4}, SE {:.2e}, lambda = {:.1}, \
                     power = 1 - {miss}",
                    p.claim, p.samples, p.effect, p.stderr, p.lambda
                ),
            );
        }
        for k in &r.kills {
            let z = match (k.z, &k.error) {
                (Some(z), _) if z.is_infinite() => format!(
                    "z = {} (no spread: every draw gave the same value, not the target)",
                    crate::report::format_z(z)
                ),
                (Some(z), _) => format!("z = {}", crate::report::format_z(z)),
                (None, Some(e)) => format!("error: {e}"),
                (None, None) => "failed".to_string(),
            };
            indented(&mut out, &format!("{:40} {z}", k.claim));
        }
    }
    let killed = rows
        .iter()
        .filter(|r| !r.equivalent && !r.kills.is_empty())
        .count();
    let live = rows.iter().filter(|r| !r.equivalent).count();
    let equivalent = rows.len() - live;
    out.push_str(&format!(
        "\n{killed} of {live} non-equivalent mutants killed; {equivalent} equivalent mutants listed.\n"
    ));
    if !matrix.unusable.is_empty() {
        out.push_str(&format!(
            "Not used (the reference fails them at this budget): {}\n",
            matrix.unusable.join(", ")
        ));
    }
    out
}
