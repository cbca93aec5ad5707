//! What a chart shows, independent of how it is drawn: series (points with
//! optional error bars, in a style), axes and panels. [`super::chart`] draws
//! them.

/// How a line is stroked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dash {
    Solid,
    /// Long dashes (a prediction).
    Dashed,
    /// Short dots.
    Dotted,
}

/// The marker drawn at each point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    Circle,
    Square,
    Triangle,
}

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SeriesStyle {
    /// A line through the points, optionally with a marker at each point.
    Line(Dash, Option<Marker>),
    /// Markers with vertical error bars (`± err`), no line.
    Points(Marker),
    /// Vertical bars from 0 to each point, `width` in x units.
    Bars(f64),
}

impl SeriesStyle {
    /// A dashed line without markers (a prediction or a reference value).
    pub const DASHED: SeriesStyle = SeriesStyle::Line(Dash::Dashed, None);
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

    pub(super) fn errors_or_zero(&self) -> Vec<f64> {
        self.errors
            .clone()
            .unwrap_or_else(|| vec![0.0; self.points.len()])
    }
}

/// An axis: its label and whether it is logarithmic.
#[derive(Debug, Clone)]
pub struct Axis {
    pub label: String,
    pub log: bool,
    /// Label only whole numbers (for counts such as layers).
    pub integer: bool,
    /// Include 0 in the range (bars, probabilities).
    pub from_zero: bool,
}

impl Axis {
    /// A linear axis.
    pub fn linear(label: impl Into<String>) -> Self {
        Axis {
            label: label.into(),
            log: false,
            integer: false,
            from_zero: false,
        }
    }

    /// A logarithmic axis.
    pub fn log(label: impl Into<String>) -> Self {
        Axis {
            log: true,
            ..Axis::linear(label)
        }
    }

    /// A linear axis labelled at whole numbers only.
    pub fn integer(label: impl Into<String>) -> Self {
        Axis {
            integer: true,
            ..Axis::linear(label)
        }
    }

    /// The same axis with 0 inside its range.
    pub fn starting_at_zero(mut self) -> Self {
        self.from_zero = true;
        self
    }
}

/// The default height of a panel, in pixels.
const PANEL_HEIGHT: u32 = 520;

/// One panel: its axes and series.
#[derive(Debug, Clone)]
pub struct Panel {
    pub x: Axis,
    pub y: Axis,
    pub series: Vec<Series>,
    /// Height in pixels.
    pub height: u32,
}

impl Panel {
    /// A panel of the default height.
    pub fn new(x: Axis, y: Axis, series: Vec<Series>) -> Self {
        Panel {
            x,
            y,
            series,
            height: PANEL_HEIGHT,
        }
    }

    /// The same panel with another height.
    pub fn with_height(mut self, height: u32) -> Self {
        self.height = height;
        self
    }
}
