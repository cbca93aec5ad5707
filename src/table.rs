//! Text tables that fit a terminal: the one renderer every table command
//! uses.
//!
//! # How a table is fitted to a width
//!
//! 1. Every column is as wide as its widest cell; columns are separated by
//!    two spaces. If the lines fit the width, that is the table.
//! 2. Otherwise the wrappable columns are narrowed, widest first, and their
//!    cells wrapped (at spaces where possible); if that fits with no
//!    wrapped column narrower than [`COMFORTABLE_WRAP`] characters, that is
//!    the table (a row whose cells wrap takes several lines).
//! 3. Otherwise the *spill* column (a long free-text column such as a
//!    formula, if the table names one) leaves the row: it is printed on its
//!    own indented line under the row, wrapped at the width; the remaining
//!    wrappable columns are narrowed as in 2, down to [`MIN_WRAP`].
//! 4. If the line is still too wide, columns are separated by one space
//!    instead of two.
//!
//! Numbers are never wrapped (a column is wrappable only when declared so),
//! so a value is never split across lines.
//!
//! # The width
//!
//! [`output_width`] is `COLUMNS` when it is set to a number, else the
//! terminal's width when stdout is a terminal, else [`DEFAULT_WIDTH`] (120):
//! piped output and snapshots are therefore stable.

use std::io::IsTerminal;

/// Width used when stdout is not a terminal and `COLUMNS` is not set.
pub const DEFAULT_WIDTH: usize = 120;
/// A wrapped column is never made narrower than this.
pub const MIN_WRAP: usize = 12;
/// Narrower than this, a wrapped column reads worse than the spill column on
/// its own line (step 3 of the module docs).
pub const COMFORTABLE_WRAP: usize = 40;
const GAP: &str = "  ";
/// The separator of the last resort (step 4 of the module docs).
const NARROW_GAP: &str = " ";
const SPILL_INDENT: &str = "    ";

/// The width tables are fitted to (see the module docs).
pub fn output_width() -> usize {
    if let Some(columns) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|c| *c > 0)
    {
        return columns;
    }
    if std::io::stdout().is_terminal()
        && let Some(width) = terminal_width()
    {
        return width;
    }
    DEFAULT_WIDTH
}

#[cfg(unix)]
fn terminal_width() -> Option<usize> {
    // SAFETY: TIOCGWINSZ writes one `winsize` into the struct we own; a
    // failure leaves it zeroed and is reported by the return value.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) } == 0;
    (ok && size.ws_col > 0).then_some(usize::from(size.ws_col))
}

#[cfg(not(unix))]
fn terminal_width() -> Option<usize> {
    None
}

/// A table of text cells.
#[derive(Debug, Clone, Default)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
    /// The column moved to its own line when the table is too wide.
    spill: Option<usize>,
    /// Columns whose cells may be wrapped.
    wrappable: Vec<usize>,
}

impl Table {
    /// A table with these column headers.
    pub fn new<S: Into<String>>(headers: impl IntoIterator<Item = S>) -> Self {
        Table {
            headers: headers.into_iter().map(Into::into).collect(),
            ..Table::default()
        }
    }

    /// Column `index` moves to its own line under each row when the table
    /// does not fit.
    pub fn spill(mut self, index: usize) -> Self {
        self.spill = Some(index);
        self
    }

    /// Column `index` may be wrapped.
    pub fn wrap(mut self, index: usize) -> Self {
        self.wrappable.push(index);
        self
    }

    /// Adds one row (missing cells are empty, extra cells ignored).
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        let mut cells: Vec<String> = cells.into_iter().map(Into::into).collect();
        cells.resize(self.headers.len(), String::new());
        self.rows.push(cells);
    }

    /// The table at its natural width (nothing moved or wrapped).
    pub fn render_wide(&self) -> String {
        let columns: Vec<usize> = (0..self.headers.len()).collect();
        self.layout(
            &columns,
            &self.natural_widths(&columns),
            None,
            usize::MAX,
            GAP,
        )
    }

    /// The table fitted to `width` columns (see the module docs).
    pub fn render(&self, width: usize) -> String {
        let all: Vec<usize> = (0..self.headers.len()).collect();
        let natural = self.natural_widths(&all);
        if line_width(&natural) <= width {
            return self.layout(&all, &natural, None, width, GAP);
        }
        if self.spill.is_some() || !self.wrappable.is_empty() {
            let widths = self.narrowed(&all, width, COMFORTABLE_WRAP);
            if line_width(&widths) <= width {
                return self.layout(&all, &widths, None, width, GAP);
            }
        }
        let kept: Vec<usize> = all
            .iter()
            .copied()
            .filter(|c| Some(*c) != self.spill)
            .collect();
        let widths = self.narrowed(&kept, width, MIN_WRAP);
        let gap = if line_width(&widths) > width {
            NARROW_GAP
        } else {
            GAP
        };
        self.layout(&kept, &widths, self.spill, width, gap)
    }

    /// Natural widths of `columns`, with the widest wrappable column
    /// narrowed until the line fits `width` or every wrappable column is at
    /// `floor`.
    fn narrowed(&self, columns: &[usize], width: usize, floor: usize) -> Vec<usize> {
        let mut widths = self.natural_widths(columns);
        while line_width(&widths) > width {
            let Some(widest) = (0..columns.len())
                .filter(|&i| self.wrappable.contains(&columns[i]) && widths[i] > floor)
                .max_by_key(|&i| widths[i])
            else {
                break;
            };
            let excess = line_width(&widths) - width;
            widths[widest] = widths[widest].saturating_sub(excess).max(floor);
        }
        widths
    }

    fn natural_widths(&self, columns: &[usize]) -> Vec<usize> {
        columns
            .iter()
            .map(|&c| {
                std::iter::once(&self.headers[c])
                    .chain(self.rows.iter().map(|r| &r[c]))
                    .map(|cell| cell.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect()
    }

    fn layout(
        &self,
        columns: &[usize],
        widths: &[usize],
        spill: Option<usize>,
        width: usize,
        gap: &str,
    ) -> String {
        let mut out = String::new();
        let header: Vec<String> = columns.iter().map(|&c| self.headers[c].clone()).collect();
        push_row(&mut out, &header, widths, gap);
        let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        out.push_str(rule.join(gap).trim_end());
        out.push('\n');
        for row in &self.rows {
            let cells: Vec<String> = columns.iter().map(|&c| row[c].clone()).collect();
            push_row(&mut out, &cells, widths, gap);
            if let Some(s) = spill.filter(|&s| !row[s].is_empty()) {
                let room = width.saturating_sub(SPILL_INDENT.len()).max(MIN_WRAP);
                for line in wrap_text(&row[s], room) {
                    out.push_str(SPILL_INDENT);
                    out.push_str(&line);
                    out.push('\n');
                }
            }
        }
        out
    }
}

/// Width of a line with these column widths.
fn line_width(widths: &[usize]) -> usize {
    widths.iter().sum::<usize>() + GAP.len() * widths.len().saturating_sub(1)
}

/// One row, each cell wrapped to its column's width; a row takes as many
/// lines as its tallest cell.
fn push_row(out: &mut String, cells: &[String], widths: &[usize], gap: &str) {
    let wrapped: Vec<Vec<String>> = cells
        .iter()
        .zip(widths)
        .map(|(cell, &w)| wrap_text(cell, w))
        .collect();
    let height = wrapped.iter().map(Vec::len).max().unwrap_or(1);
    for line in 0..height {
        let parts: Vec<String> = wrapped
            .iter()
            .zip(widths)
            .map(|(lines, &w)| pad(lines.get(line).map_or("", String::as_str), w))
            .collect();
        out.push_str(parts.join(gap).trim_end());
        out.push('\n');
    }
}

fn pad(cell: &str, width: usize) -> String {
    let n = cell.chars().count();
    format!("{cell}{}", " ".repeat(width.saturating_sub(n)))
}

/// `text` in lines of at most `width` characters, broken at spaces where a
/// word fits, else inside the word. An empty text is one empty line.
pub fn wrap_text(text: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut lines = Vec::new();
    let mut current = String::new();
    for word in text.split(' ') {
        let mut word: Vec<char> = word.chars().collect();
        let used = current.chars().count();
        let needed = if used == 0 {
            word.len()
        } else {
            used + 1 + word.len()
        };
        if needed <= width {
            if used > 0 {
                current.push(' ');
            }
            current.extend(word.iter());
            continue;
        }
        if used > 0 {
            lines.push(std::mem::take(&mut current));
        }
        while word.len() > width {
            let rest = word.split_off(width);
            lines.push(word.into_iter().collect());
            word = rest;
        }
        current = word.into_iter().collect();
    }
    lines.push(current);
    lines
}

/// Formats `value ± stderr` with the standard error to two significant
/// digits and the value to the same decimal place.
pub fn format_estimate(value: f64, stderr: f64) -> String {
    if !(stderr > 0.0 && stderr.is_finite()) {
        return format!("{} (no spread)", format_value(value));
    }
    let scale = value.abs().max(stderr);
    if (1e-4..1e7).contains(&scale) {
        let decimals = decimals_for(stderr);
        return format!("{value:.decimals$} ± {stderr:.decimals$}");
    }
    // Scientific: the mantissa keeps digits down to the stderr's second
    // significant digit.
    let digits = (scale.log10().floor() - stderr.log10().floor() + 1.0).clamp(1.0, 15.0) as usize;
    format!("{value:.digits$e} ± {stderr:.1e}")
}

/// Decimal places that show two significant digits of `stderr`.
fn decimals_for(stderr: f64) -> usize {
    (1.0 - stderr.log10().floor()).clamp(0.0, 12.0) as usize
}

/// A value to six significant digits, without trailing noise.
pub fn format_value(value: f64) -> String {
    if value == 0.0 {
        return "0".into();
    }
    let magnitude = value.abs().log10().floor();
    if !(-4.0..7.0).contains(&magnitude) {
        return format!("{value:.5e}");
    }
    let decimals = (5.0 - magnitude).max(0.0) as usize;
    let text = format!("{value:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// A value to `digits` significant digits.
pub fn format_significant(value: f64, digits: i32) -> String {
    if value == 0.0 || !value.is_finite() {
        return format_value(value);
    }
    let decimals = (digits - 1 - value.abs().log10().floor() as i32).max(0) as usize;
    format!("{value:.decimals$}")
}

/// A z statistic as a table shows it: two decimals, `inf` / `-inf` for a
/// zero-spread estimate that misses its target, and `> 10^6` (`< -10^6`)
/// beyond a million, where more digits say nothing a reader can use.
pub fn format_z(z: f64) -> String {
    const HUGE: f64 = 1e6;
    if z.is_infinite() {
        if z > 0.0 { "inf".into() } else { "-inf".into() }
    } else if z >= HUGE {
        "> 10^6".into()
    } else if z <= -HUGE {
        "< -10^6".into()
    } else {
        format!("{z:.2}")
    }
}

/// A p-value to three decimals, or in scientific notation below 0.001.
pub(crate) fn format_p(p: f64) -> String {
    if p >= 0.001 {
        format!("{p:.3}")
    } else {
        format!("{p:.1e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Table {
        let mut t = Table::new(["claim", "formula", "z"]).spill(1);
        t.row([
            "a.one",
            "E[z] = x, a long formula that runs on and on",
            "1.00",
        ]);
        t.row(["b.two", "Var z = x^2 p / q", "-2.50"]);
        t
    }

    fn widest(text: &str) -> usize {
        text.lines().map(|l| l.chars().count()).max().unwrap_or(0)
    }

    #[test]
    fn a_table_that_fits_is_left_alone() {
        let t = sample();
        assert_eq!(t.render(200), t.render_wide());
        assert_eq!(t.render_wide().lines().count(), 4);
    }

    #[test]
    fn a_narrow_width_moves_the_spill_column_to_its_own_line() {
        let t = sample();
        let text = t.render(30);
        assert!(widest(&text) <= 30, "{text}");
        assert!(text.contains("    E[z] = x, a long formula"), "{text}");
        // Header, rule, and per row the row plus its wrapped formula.
        assert!(text.lines().count() > 4, "{text}");
    }

    #[test]
    fn wrappable_columns_wrap_to_fit() {
        let mut t = Table::new(["name", "what it means"]).wrap(1);
        t.row(["x", "one two three four five six seven eight nine ten"]);
        let text = t.render(24);
        assert!(widest(&text) <= 24, "{text}");
        // Every word survives the wrap.
        for w in ["one", "five", "ten"] {
            assert!(text.contains(w), "{text}");
        }
    }

    #[test]
    fn wrap_breaks_at_spaces_and_inside_long_words() {
        assert_eq!(wrap_text("ab cd ef", 5), vec!["ab cd", "ef"]);
        assert_eq!(wrap_text("abcdefgh", 3), vec!["abc", "def", "gh"]);
        assert_eq!(wrap_text("", 3), vec![""]);
    }
}
