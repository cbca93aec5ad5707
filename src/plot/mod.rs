//! `dropmc plot`: SVG figures of the results (plotters, SVG backend only, so
//! no system fonts or libraries are needed).

mod chart;
mod figures;
mod spec;

pub use chart::chart;
pub use figures::{
    ATTENTION_ROW_SUM, DEEP_STACK, LAYERNORM_C, LEADING_ORDER_GAP, write_all_with_progress,
    write_figure,
};
pub use spec::{Axis, Dash, Marker, Panel, Series, SeriesStyle};

use std::fmt;
use std::path::Path;

use crate::error::Error;

/// A figure a family draws: the file name `dropmc plot` writes and the
/// function that writes it.
#[derive(Clone, Copy)]
pub struct Figure {
    /// File name, e.g. `layernorm_c.svg`.
    pub file: &'static str,
    /// One line on what the figure shows.
    pub about: &'static str,
    /// Draws the figure into the file at this path.
    pub draw: fn(&Path) -> Result<(), Error>,
}

impl fmt::Debug for Figure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Figure").field("file", &self.file).finish()
    }
}
