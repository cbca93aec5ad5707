//! One chart routine for every figure: one or more panels stacked
//! vertically, each with labelled axes and optional log scales, series drawn
//! as lines, markers with error bars or bars, and one legend below the
//! panels, off the data.
//!
//! # Reading at a glance
//!
//! * The legend shows what the series looks like: a line segment in its dash
//!   pattern for a line, its marker (with an error bar when it has one) for
//!   points, a filled box for bars.
//! * The legend sits in its own strip under the panels, so it can never hide
//!   a curve, whatever the data.
//! * Series that share a colour (a measurement and its prediction) are told
//!   apart by style; series of one style are told apart by colour, dash
//!   pattern and marker shape together, so a figure also reads in grey.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::spec::{Axis, Dash, Marker, Panel, Series, SeriesStyle};
use crate::error::Error;

const WIDTH: u32 = 900;
const TITLE_HEIGHT: u32 = 44;
const LEGEND_ROW: u32 = 24;
const LEGEND_COLUMNS: usize = 2;

/// Tick text: whole numbers only on an integer axis; on a linear axis at
/// most six decimals, so a tick placed at `0.6000000000000001` by the mesh's
/// step arithmetic reads `0.6`.
fn tick(axis: &Axis, v: f64) -> String {
    if axis.log {
        return format!("{v}");
    }
    if !axis.integer {
        let fixed = format!("{v:.6}");
        let trimmed = fixed.trim_end_matches('0').trim_end_matches('.');
        return if trimmed == "-0" {
            "0".into()
        } else {
            trimmed.into()
        };
    }
    // A tick value is an integer when it is one to the last bit of its
    // magnitude (the mesh places ticks at exact multiples of its step).
    if v == v.round() {
        format!("{}", v.round())
    } else {
        String::new()
    }
}

fn plot_error(e: impl std::fmt::Display) -> Error {
    Error::Plot {
        message: e.to_string(),
    }
}

fn range(values: impl Iterator<Item = f64>, axis: &Axis) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite() && (!axis.log || *v > 0.0)) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if axis.from_zero && !axis.log {
        lo = lo.min(0.0);
        hi = hi.max(0.0);
    }
    if axis.log {
        (lo / 1.5, hi * 1.5)
    } else {
        // 6 % of the span on each side; a zero span gets a unit one.
        let span = if hi > lo { hi - lo } else { 1.0 };
        let pad = 0.06 * span;
        let lo = if axis.from_zero && lo == 0.0 {
            0.0
        } else {
            lo - pad
        };
        (lo, hi + pad)
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

fn color_of(s: &Series, i: usize) -> RGBColor {
    COLORS[s.color.unwrap_or(i) % COLORS.len()]
}

/// Draws `title` over `panels` (stacked, top first) with one legend of
/// every series below them into an SVG at `path`.
pub fn chart(path: &Path, title: &str, panels: &[Panel]) -> Result<(), Error> {
    let entries: Vec<(String, SeriesStyle, RGBColor, bool)> = panels
        .iter()
        .flat_map(|p| {
            p.series
                .iter()
                .enumerate()
                .map(|(i, s)| (s.name.clone(), s.style, color_of(s, i), s.errors.is_some()))
        })
        .collect();
    let legend_rows = entries.len().div_ceil(LEGEND_COLUMNS) as u32;
    let legend_height = legend_rows * LEGEND_ROW + 16;
    let panels_height: u32 = panels.iter().map(|p| p.height).sum();
    let height = TITLE_HEIGHT + panels_height + legend_height;
    let root = SVGBackend::new(path, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_error)?;
    let (head, rest) = root.split_vertically(TITLE_HEIGHT);
    head.titled(title, ("sans-serif", 24)).map_err(plot_error)?;
    let (body, legend) = rest.split_vertically(panels_height);
    let mut area = body;
    for panel in panels {
        let (top, below) = area.split_vertically(panel.height);
        draw_panel(&top, panel)?;
        area = below;
    }
    draw_legend(&legend, &entries)?;
    root.present().map_err(plot_error)?;
    Ok(())
}

/// The legend strip: entries in [`LEGEND_COLUMNS`] columns, filled column by
/// column so that series drawn together stay together.
fn draw_legend(
    area: &DrawingArea<SVGBackend, Shift>,
    entries: &[(String, SeriesStyle, RGBColor, bool)],
) -> Result<(), Error> {
    let column_width = (WIDTH as i32 - 100) / LEGEND_COLUMNS as i32;
    let rows = entries.len().div_ceil(LEGEND_COLUMNS).max(1);
    for (i, (name, style, color, has_errors)) in entries.iter().enumerate() {
        let x = 90 + (i / rows) as i32 * column_width;
        let y = 8 + (i % rows) as i32 * LEGEND_ROW as i32 + LEGEND_ROW as i32 / 2;
        legend_symbol(area, (x, y), *style, *color, *has_errors)?;
        area.draw(&Text::new(
            name.clone(),
            (x + 34, y - 8),
            ("sans-serif", 15).into_font(),
        ))
        .map_err(plot_error)?;
    }
    Ok(())
}

/// The symbol of one legend entry, 28 pixels wide, centred on `y`.
fn legend_symbol(
    area: &DrawingArea<SVGBackend, Shift>,
    (x, y): (i32, i32),
    style: SeriesStyle,
    color: RGBColor,
    has_errors: bool,
) -> Result<(), Error> {
    match style {
        SeriesStyle::Line(dash, marker) => {
            let segments: Vec<(i32, i32)> = match dash {
                Dash::Solid => vec![(0, 28)],
                Dash::Dashed => vec![(0, 11), (17, 28)],
                Dash::Dotted => vec![(0, 3), (8, 11), (16, 19), (24, 27)],
            };
            for (a, b) in segments {
                area.draw(&PathElement::new(
                    vec![(x + a, y), (x + b, y)],
                    color.stroke_width(2),
                ))
                .map_err(plot_error)?;
            }
            if let Some(m) = marker {
                draw_marker(area, (x + 14, y), m, color)?;
            }
        }
        SeriesStyle::Points(m) => {
            if has_errors {
                area.draw(&PathElement::new(
                    vec![(x + 14, y - 9), (x + 14, y + 9)],
                    color.stroke_width(2),
                ))
                .map_err(plot_error)?;
            }
            draw_marker(area, (x + 14, y), m, color)?;
        }
        SeriesStyle::Bars(_) => {
            area.draw(&Rectangle::new(
                [(x + 6, y - 8), (x + 22, y + 8)],
                color.mix(0.7).filled(),
            ))
            .map_err(plot_error)?;
        }
    }
    Ok(())
}

fn draw_marker<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    (x, y): (i32, i32),
    marker: Marker,
    color: RGBColor,
) -> Result<(), Error> {
    let style = color.filled();
    match marker {
        Marker::Circle => area.draw(&Circle::new((x, y), 4, style)),
        Marker::Square => area.draw(&Rectangle::new([(x - 4, y - 4), (x + 4, y + 4)], style)),
        Marker::Triangle => area.draw(&Polygon::new(
            vec![(x, y - 5), (x - 5, y + 4), (x + 5, y + 4)],
            style,
        )),
    }
    .map_err(plot_error)
}

/// Draws a marker at each point of `$points` on `$chart`: the marker is in
/// pixels relative to the point, so its size does not depend on the scales.
macro_rules! draw_markers {
    ($chart:expr, $points:expr, $marker:expr, $color:expr) => {{
        let style = $color.filled();
        match $marker {
            Marker::Circle => $chart
                .draw_series($points.map(|p| EmptyElement::at(p) + Circle::new((0, 0), 4, style)))
                .map(|_| ()),
            Marker::Square => $chart
                .draw_series(
                    $points
                        .map(|p| EmptyElement::at(p) + Rectangle::new([(-4, -4), (4, 4)], style)),
                )
                .map(|_| ()),
            Marker::Triangle => $chart
                .draw_series($points.map(|p| {
                    EmptyElement::at(p) + Polygon::new(vec![(0, -5), (-5, 4), (5, 4)], style)
                }))
                .map(|_| ()),
        }
        .map_err(plot_error)
    }};
}

fn draw_panel(area: &DrawingArea<SVGBackend, Shift>, panel: &Panel) -> Result<(), Error> {
    let xs = range(
        panel
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0).collect::<Vec<_>>()),
        &panel.x,
    );
    let ys = range(
        panel.series.iter().flat_map(|s| {
            s.points
                .iter()
                .zip(s.errors_or_zero())
                .flat_map(|(p, e)| [p.1 - e, p.1 + e])
                .collect::<Vec<_>>()
        }),
        &panel.y,
    );
    let mut builder = ChartBuilder::on(area);
    builder
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(80);
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(panel.x.label.as_str())
                .x_label_formatter(&|v| tick(&panel.x, (*v).into()))
                .y_desc(panel.y.label.as_str())
                .label_style(("sans-serif", 16))
                .axis_desc_style(("sans-serif", 18))
                .draw()
                .map_err(plot_error)?;
            for (i, s) in panel.series.iter().enumerate() {
                let color = color_of(s, i);
                let points = s.points.iter().copied();
                match s.style {
                    SeriesStyle::Line(dash, marker) => {
                        let stroke = color.stroke_width(2);
                        match dash {
                            Dash::Solid => chart
                                .draw_series(LineSeries::new(points, stroke))
                                .map(|_| ()),
                            Dash::Dashed => chart
                                .draw_series(DashedLineSeries::new(points, 10, 6, stroke))
                                .map(|_| ()),
                            Dash::Dotted => chart
                                .draw_series(DashedLineSeries::new(points, 3, 5, stroke))
                                .map(|_| ()),
                        }
                        .map_err(plot_error)?;
                        if let Some(m) = marker {
                            draw_markers!(chart, s.points.iter().copied(), m, color)?;
                        }
                    }
                    SeriesStyle::Points(m) => {
                        let errs = s.errors_or_zero();
                        // Each bar: a vertical line in data coordinates and
                        // two caps 10 pixels wide (plotters' own error bar
                        // would draw a circle over the point's marker).
                        let stroke = color.stroke_width(2);
                        chart
                            .draw_series(s.points.iter().zip(&errs).map(|(&(px, py), &e)| {
                                PathElement::new(vec![(px, py - e), (px, py + e)], stroke)
                            }))
                            .map_err(plot_error)?;
                        for sign in [-1.0, 1.0] {
                            chart
                                .draw_series(s.points.iter().zip(&errs).map(|(&(px, py), &e)| {
                                    EmptyElement::at((px, py + sign * e))
                                        + PathElement::new(vec![(-5, 0), (5, 0)], stroke)
                                }))
                                .map_err(plot_error)?;
                        }
                        draw_markers!(chart, s.points.iter().copied(), m, color)?;
                    }
                    SeriesStyle::Bars(width) => {
                        chart
                            .draw_series(s.points.iter().map(|&(px, py)| {
                                Rectangle::new(
                                    [(px - width / 2.0, 0.0), (px + width / 2.0, py)],
                                    color.mix(0.7).filled(),
                                )
                            }))
                            .map_err(plot_error)?;
                    }
                }
            }
        }};
    }
    match (panel.x.log, panel.y.log) {
        (false, false) => draw!(
            builder
                .build_cartesian_2d(xs.0..xs.1, ys.0..ys.1)
                .map_err(plot_error)?
        ),
        (true, false) => draw!(
            builder
                .build_cartesian_2d((xs.0..xs.1).log_scale(), ys.0..ys.1)
                .map_err(plot_error)?
        ),
        (false, true) => draw!(
            builder
                .build_cartesian_2d(xs.0..xs.1, (ys.0..ys.1).log_scale())
                .map_err(plot_error)?
        ),
        (true, true) => draw!(
            builder
                .build_cartesian_2d((xs.0..xs.1).log_scale(), (ys.0..ys.1).log_scale())
                .map_err(plot_error)?
        ),
    }
    Ok(())
}
