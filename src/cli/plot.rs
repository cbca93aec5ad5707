//! `dropmc plot`: writes every registered figure as SVG.

use std::process::ExitCode;

use clap::Args;

use super::progress;
use crate::error::Error;
use crate::registry::Registry;

/// Options of `plot`.
#[derive(Debug, Args)]
pub struct PlotArgs {
    /// Folder for the SVG files.
    #[arg(long, default_value = "figures")]
    pub out: std::path::PathBuf,
}

/// Runs `plot`.
pub fn run(registry: &Registry, args: PlotArgs) -> Result<ExitCode, Error> {
    let figures = registry.figures();
    let bar = progress::bar(figures.len() as u64, "figures", false);
    let written = crate::plot::write_all_with_progress(&figures, &args.out, |done, _| {
        bar.set_position(done as u64)
    });
    bar.finish_and_clear();
    for path in written? {
        println!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}
