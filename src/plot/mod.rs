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
