//! Progress of long runs on stderr: a bar on a terminal; otherwise (stderr
//! piped or logged, or JSON output) one line per tenth of the run, once it
//! has lasted [`QUIET_SECONDS`], so a short command prints nothing and a
//! long one in CI is never silent.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

/// Seconds a run lasts before its first progress line (not on a terminal).
pub const QUIET_SECONDS: f64 = 1.0;

/// A run's progress: the bar or the lines (module docs).
#[derive(Clone)]
pub struct Progress {
    bar: ProgressBar,
    lines: Option<Arc<Lines>>,
}

/// The line-per-tenth state, shared by the clones of one [`Progress`].
struct Lines {
    label: String,
    start: Instant,
    total: AtomicU64,
    done: AtomicU64,
    /// The last tenth a line was printed for.
    printed: AtomicU64,
}

impl Lines {
    fn update(&self, done: u64) {
        if let Some(line) = self.due(done) {
            eprintln!("{line}");
        }
    }

    /// Records `done` steps; the line to print when they complete a tenth
    /// not yet printed, once the run has lasted [`QUIET_SECONDS`].
    fn due(&self, done: u64) -> Option<String> {
        self.done.store(done, Ordering::Relaxed);
        let total = self.total.load(Ordering::Relaxed);
        let elapsed = self.start.elapsed().as_secs_f64();
        if total == 0 || elapsed < QUIET_SECONDS {
            return None;
        }
        let tenth = (u128::from(done.min(total)) * 10 / u128::from(total)) as u64;
        (tenth > self.printed.fetch_max(tenth, Ordering::Relaxed)).then(|| {
            format!(
                "dropmc: {}: {done} of {total} ({} %) after {elapsed:.0} s",
                self.label,
                tenth * 10
            )
        })
    }
}

impl Progress {
    /// The run's length changed (a new kernel of an `eval`): counting
    /// restarts from the tenth `done` is in.
    pub fn set_length(&self, total: u64) {
        self.bar.set_length(total);
        if let Some(lines) = &self.lines {
            lines.total.store(total, Ordering::Relaxed);
            lines.printed.store(0, Ordering::Relaxed);
        }
    }

    pub fn set_position(&self, done: u64) {
        self.bar.set_position(done);
        if let Some(lines) = &self.lines {
            lines.update(done);
        }
    }

    pub fn inc(&self, n: u64) {
        self.bar.inc(n);
        if let Some(lines) = &self.lines {
            let done = lines.done.fetch_add(n, Ordering::Relaxed) + n;
            lines.update(done);
        }
    }

    pub fn finish_and_clear(&self) {
        self.bar.finish_and_clear();
    }
}

/// The progress of a run of `total` steps named `label`: a bar on a
/// terminal, lines otherwise and with `json` (module docs).
pub fn bar(total: u64, label: &str, json: bool) -> Progress {
    if json || !std::io::stderr().is_terminal() {
        return Progress {
            bar: ProgressBar::hidden(),
            lines: Some(Arc::new(Lines {
                label: label.to_string(),
                start: Instant::now(),
                total: AtomicU64::new(total),
                done: AtomicU64::new(0),
                printed: AtomicU64::new(0),
            })),
        };
    }
    let bar = ProgressBar::new(total);
    let style =
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} {elapsed_precise} (eta {eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
    bar.set_style(style);
    bar.set_message(label.to_string());
    Progress { bar, lines: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(started_seconds_ago: u64) -> Lines {
        Lines {
            label: "claims".into(),
            start: Instant::now() - std::time::Duration::from_secs(started_seconds_ago),
            total: AtomicU64::new(100),
            done: AtomicU64::new(0),
            printed: AtomicU64::new(0),
        }
    }

    #[test]
    fn a_line_is_due_once_per_tenth_after_the_quiet_start() {
        let long = lines(2);
        let due: Vec<String> = [5, 10, 11, 19, 20, 35, 100]
            .into_iter()
            .filter_map(|done| long.due(done))
            .collect();
        assert_eq!(due.len(), 4, "{due:?}");
        assert!(due[0].starts_with("dropmc: claims: 10 of 100 (10 %) after 2 s"));
        assert!(due[2].contains("35 of 100 (30 %)"), "{due:?}");
        assert!(due[3].contains("100 of 100 (100 %)"), "{due:?}");
        // A run younger than QUIET_SECONDS prints nothing.
        let short = lines(0);
        assert!([50, 100].into_iter().all(|done| short.due(done).is_none()));
    }
}
