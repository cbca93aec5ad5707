//! Progress bars for long runs: shown on a terminal, silent when stderr is
//! piped or the output is JSON.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// A bar over `total` steps, or a hidden one when progress should not show.
pub fn bar(total: u64, label: &str, quiet: bool) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    let style =
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} {elapsed_precise} (eta {eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
    bar.set_style(style);
    bar.set_message(label.to_string());
    bar
}
