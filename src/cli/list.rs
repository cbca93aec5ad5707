//! `dropmc list`: the registry's claims with their kind, budget and formula.

use std::process::ExitCode;

use clap::Args;

use super::emit::emit;
use crate::error::Error;
use crate::registry::Registry;
use crate::table::Table;

/// Options of `list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Do not fit the table to the terminal (one line per claim).
    #[arg(long)]
    pub wide: bool,
}

/// Runs `list`.
pub fn run(registry: &Registry, args: ListArgs) -> Result<ExitCode, Error> {
    emit(args.json, &json(registry), || {
        let table = table(registry);
        if args.wide {
            table.render_wide()
        } else {
            table.render(crate::table::output_width())
        }
    });
    Ok(ExitCode::SUCCESS)
}

/// The registry as a table: id, kind, default samples, formula (wrapped to fit).
pub fn table(registry: &Registry) -> Table {
    let mut table = Table::new(["claim", "kind", "samples", "formula"])
        .wrap(3)
        .spill(3);
    for c in registry.claims() {
        table.row([
            c.id().to_string(),
            c.kind().label().to_string(),
            c.default_samples().to_string(),
            c.formula().to_string(),
        ]);
    }
    table
}

/// The registered claims as JSON: id, family, kind, formula, default samples.
pub fn json(registry: &Registry) -> serde_json::Value {
    let claims: Vec<serde_json::Value> = registry
        .claims()
        .iter()
        .map(|c| {
            serde_json::json!({
                "id": c.id(),
                "family": c.family(),
                "kind": c.kind().label(),
                "formula": c.formula(),
                "samples": c.default_samples(),
            })
        })
        .collect();
    serde_json::json!({ "claims": claims })
}
