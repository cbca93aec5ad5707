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

/// `n claim` or `n claims`.
fn claims(n: usize) -> String {
    format!("{n} claim{}", if n == 1 { "" } else { "s" })
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
            (true, false) => format!("equivalent, but killed by {}", claims(r.kills.len())),
            (false, true) => "SURVIVED".to_string(),
            (false, false) => format!("killed by {}", claims(r.kills.len())),
        };
        out.push_str(&format!("{:24} {status}\n", r.id));
        indented(&mut out, &format!("mistake: {} [{}]", r.mistake, r.source));
        if let Some(reason) = r.reason {
            indented(&mut out, &format!("why equivalent: {reason}"));
        }
        if let Some(p) = r.power.as_ref().filter(|p| p.samples < p.min_samples) {
            indented(
                &mut out,
                &format!(
                    "power of {}: none at {} draws, below its minimum budget of {} \
                     (the claim is inconclusive there and kills nothing)",
                    p.claim, p.samples, p.min_samples
                ),
            );
        } else if let Some(p) = &r.power {
            let power = if p.power < 0.999 {
                format!("{:.4}", p.power)
            } else if p.miss > 0.0 {
                format!("1 - {:.1e}", p.miss)
            } else {
                format!(
                    "1 - Phi({:.1}), below 1e-300",
                    crate::stats::critical_z() - p.lambda
                )
            };
            indented(
                &mut out,
                &format!(
                    "power of {} at {} draws: effect {:.4}, SE {:.2e}, lambda = {:.1}, \
                     power = {power}",
                    p.claim, p.samples, p.effect, p.stderr, p.lambda
                ),
            );
        }
        for k in &r.kills {
            let z = match (k.z, &k.error) {
                (Some(z), _) if z.is_infinite() => format!(
                    "z = {} ({})",
                    crate::table::format_z(z),
                    k.infinite.map_or("infinite", super::InfiniteZ::explanation)
                ),
                (Some(z), _) => format!("z = {}", crate::table::format_z(z)),
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

#[cfg(test)]
mod tests {
    use super::super::{InfiniteZ, Kill, KillMatrix, KillRow};
    use super::*;

    fn row(kills: Vec<Kill>) -> KillRow {
        KillRow {
            id: "m",
            mistake: "a mistake",
            source: "docs/formulas.md §1.1",
            equivalent: false,
            reason: None,
            kills,
            power: None,
        }
    }

    fn kill(claim: &'static str, infinite: Option<InfiniteZ>) -> Kill {
        Kill {
            claim,
            z: Some(if infinite.is_some() {
                f64::INFINITY
            } else {
                7.5
            }),
            infinite,
            error: None,
        }
    }

    #[test]
    fn one_kill_is_one_claim_and_two_are_two_claims() {
        let one = row(vec![kill("a", None)]);
        let two = row(vec![kill("a", None), kill("b", None)]);
        let text = table(
            &KillMatrix {
                rows: vec![one, two],
                unusable: vec![],
            },
            100,
        );
        assert!(text.contains("killed by 1 claim\n"), "{text}");
        assert!(text.contains("killed by 2 claims\n"), "{text}");
        assert!(!text.contains("1 claims"), "{text}");
    }

    #[test]
    fn an_underflowed_p_value_is_not_called_no_spread() {
        let r = row(vec![
            kill("under", Some(InfiniteZ::PValueUnderflow)),
            kill("flat", Some(InfiniteZ::NoSpread)),
            kill("rule", Some(InfiniteZ::RuleViolated)),
        ]);
        let text = table(
            &KillMatrix {
                rows: vec![r],
                unusable: vec![],
            },
            200,
        );
        let line = |claim: &str| {
            text.lines()
                .find(|l| l.trim_start().starts_with(claim))
                .unwrap_or_else(|| panic!("{claim} in {text}"))
                .to_string()
        };
        assert!(line("under").contains("p-value underflowed"), "{text}");
        assert!(!line("under").contains("no spread"), "{text}");
        assert!(line("flat").contains("no spread"), "{text}");
        assert!(
            line("rule").contains("rule that holds on every draw"),
            "{text}"
        );
    }
}
