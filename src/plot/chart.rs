//! One chart routine for every figure: labelled axes, optional log scales,
//! series drawn as lines or as points with error bars, and a legend.

use std::path::Path;

use plotters::prelude::*;

use crate::error::Error;

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SeriesStyle {
    /// A solid line through the points.
    Line,
    /// A dashed reference line (a prediction).
    Dashed,
    /// Markers with vertical error bars (`± err`).
    Points,
}

/// One named series.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Half-widths of error bars, one per point (for [`SeriesStyle::Points`]).
    pub errors: Option<Vec<f64>>,
    pub style: SeriesStyle,
    /// Palette index; `None` takes the series' position. Pairs of series
    /// (a measurement and its prediction) share a colour this way.
    pub color: Option<usize>,
}

impl Series {
    /// A series drawn in `style` with no error bars and its own colour.
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>, style: SeriesStyle) -> Self {
        Series {
            name: name.into(),
            points,
            errors: None,
            style,
            color: None,
        }
    }

    /// The same series with error bars.
    pub fn with_errors(mut self, errors: Vec<f64>) -> Self {
        self.errors = Some(errors);
        self
    }

    /// The same series in palette colour `index`.
    pub fn in_color(mut self, index: usize) -> Self {
        self.color = Some(index);
        self
    }
}

/// An axis: its label and whether it is logarithmic.
#[derive(Debug, Clone)]
pub struct Axis {
    pub label: String,
    pub log: bool,
    /// Label only whole numbers (for counts such as layers).
    pub integer: bool,
}

impl Axis {
    /// A linear axis.
    pub fn linear(label: impl Into<String>) -> Self {
        Axis {
            label: label.into(),
            log: false,
            integer: false,
        }
    }

    /// A logarithmic axis.
    pub fn log(label: impl Into<String>) -> Self {
        Axis {
            label: label.into(),
            log: true,
            integer: false,
        }
    }

    /// A linear axis labelled at whole numbers only.
    pub fn integer(label: impl Into<String>) -> Self {
        Axis {
            label: label.into(),
            log: false,
            integer: true,
        }
    }
}

/// Tick text: whole numbers only on an integer axis.
fn tick(axis: &Axis, v: f64) -> String {
    if !axis.integer {
        return format!("{v}");
    }
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round())
    } else {
        String::new()
    }
}

fn plot_error(e: impl std::fmt::Display) -> Error {
    Error::Degenerate {
        what: format!("cannot draw the figure: {e}"),
    }
}

fn range(values: impl Iterator<Item = f64>, log: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite() && (!log || *v > 0.0)) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if log {
        (lo / 1.5, hi * 1.5)
    } else {
        let pad = 0.06 * (hi - lo).max(1e-12);
        (lo - pad, hi + pad)
    }
}

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(23, 190, 207),
];

/// Where the legend goes.
pub use plotters::chart::SeriesLabelPosition as LegendPosition;

/// Draws `series` into an 900×600 SVG at `path`.
pub fn line_chart(
    path: &Path,
    title: &str,
    x: &Axis,
    y: &Axis,
    series: &[Series],
    legend_position: LegendPosition,
) -> Result<(), Error> {
    let root = SVGBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_error)?;
    let xs = range(
        series.iter().flat_map(|s| s.points.iter().map(|p| p.0)),
        x.log,
    );
    let ys = range(
        series.iter().flat_map(|s| {
            let errs = s
                .errors
                .clone()
                .unwrap_or_else(|| vec![0.0; s.points.len()]);
            s.points
                .iter()
                .zip(errs)
                .flat_map(|(p, e)| [p.1 - e, p.1 + e])
                .collect::<Vec<_>>()
        }),
        y.log,
    );
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(title, ("sans-serif", 24))
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(80);
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(x.label.as_str())
                .x_label_formatter(&|v| tick(x, (*v).into()))
                .y_desc(y.label.as_str())
                .label_style(("sans-serif", 16))
                .axis_desc_style(("sans-serif", 18))
                .draw()
                .map_err(plot_error)?;
            for (i, s) in series.iter().enumerate() {
                let color = COLORS[s.color.unwrap_or(i) % COLORS.len()];
                let legend = match s.style {
                    SeriesStyle::Line => chart
                        .draw_series(LineSeries::new(
                            s.points.iter().copied(),
                            color.stroke_width(2),
                        ))
                        .map_err(plot_error)?,
                    SeriesStyle::Dashed => chart
                        .draw_series(DashedLineSeries::new(
                            s.points.iter().copied(),
                            8,
                            6,
                            color.stroke_width(2),
                        ))
                        .map_err(plot_error)?,
                    SeriesStyle::Points => {
                        let errs = s
                            .errors
                            .clone()
                            .unwrap_or_else(|| vec![0.0; s.points.len()]);
                        chart
                            .draw_series(s.points.iter().zip(&errs).map(|(&(px, py), &e)| {
                                ErrorBar::new_vertical(px, py - e, py, py + e, color.filled(), 8)
                            }))
                            .map_err(plot_error)?;
                        chart
                            .draw_series(
                                s.points.iter().map(|&p| Circle::new(p, 4, color.filled())),
                            )
                            .map_err(plot_error)?
                    }
                };
                legend.label(s.name.as_str()).legend(move |(lx, ly)| {
                    PathElement::new(vec![(lx, ly), (lx + 20, ly)], color.stroke_width(2))
                });
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font(("sans-serif", 16))
                .position(legend_position)
                .draw()
                .map_err(plot_error)?;
        }};
    }
    match (x.log, y.log) {
        (false, false) => draw!(
            builder
                .build_cartesian_2d(xs.0..xs.1, ys.0..ys.1)
                .map_err(plot_error)?
        ),
        (true, false) => {
            draw!(
                builder
                    .build_cartesian_2d((xs.0..xs.1).log_scale(), ys.0..ys.1)
                    .map_err(plot_error)?
            )
        }
        (false, true) => {
            draw!(
                builder
                    .build_cartesian_2d(xs.0..xs.1, (ys.0..ys.1).log_scale())
                    .map_err(plot_error)?
            )
        }
        (true, true) => draw!(
            builder
                .build_cartesian_2d((xs.0..xs.1).log_scale(), (ys.0..ys.1).log_scale())
                .map_err(plot_error)?
        ),
    }
    root.present().map_err(plot_error)?;
    Ok(())
}
