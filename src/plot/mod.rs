//! `dropmc plot`: SVG figures of the results (plotters, SVG backend only, so
//! no system fonts or libraries are needed).

#[cfg(feature = "cli")]
mod chart;
#[cfg(not(feature = "cli"))]
mod chart {
    //! Without the `cli` feature there is no plotting backend: a figure says
    //! that it needs the feature instead of drawing.

    use std::path::Path;

    use super::spec::Panel;
    use crate::error::Error;

    /// Refuses to draw: plotters is linked only with the `cli` feature.
    pub fn chart(_path: &Path, _title: &str, _panels: &[Panel]) -> Result<(), Error> {
        Err(Error::Plot {
            message: "dropmc was built without its `cli` feature, which draws the figures".into(),
        })
    }
}
mod figures;
// Without the `cli` feature the figures are specified but never drawn.
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
mod spec;

#[cfg(feature = "cli")]
pub use figures::write_all_with_progress;
pub use figures::{ATTENTION_ROW_SUM, DEEP_STACK, LAYERNORM_C, LEADING_ORDER_GAP};

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
