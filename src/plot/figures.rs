//! The figures `dropmc plot` writes, each computed from the crate's own
//! formulas, oracles and samplers.

use std::path::Path;

use super::Figure;
use super::chart::chart;
use super::spec::{Axis, Dash, Marker, Panel, Series, SeriesStyle};
use crate::claims::norm::NormClaim;
use crate::claims::order::{GapCurve, SWEEP_D};
use crate::engine::Budget;
use crate::error::Error;
use crate::eval::LayerNormParams;
use crate::formulas::layernorm::shrink;
use crate::ops::{Rate, Subject};

/// The gap of each leading-order formula to its exact oracle against `d`.
pub const LEADING_ORDER_GAP: Figure = Figure {
    file: "leading_order_gap.svg",
    about: "each leading-order formula's gap to the exact oracle against d, slope -1",
    draw: leading_order_gap,
};

/// LayerNorm's shrink factor c against the input's mean-to-spread ratio.
pub const LAYERNORM_C: Figure = Figure {
    file: "layernorm_c.svg",
    about: "LayerNorm's c(mu, sigma) against the Monte Carlo estimate",
    draw: layernorm_c,
};

/// The deep-stack experiment's per-layer BatchNorm shrinkage.
pub const DEEP_STACK: Figure = Figure {
    file: "deep_stack.svg",
    about: "BatchNorm eval shrinkage per layer, raw and folded",
    draw: deep_stack,
};

/// The distribution of an attention row's sum after dropout.
pub const ATTENTION_ROW_SUM: Figure = Figure {
    file: "attention_row_sum.svg",
    about: "the distribution of an attention row's sum R after dropout",
    draw: attention_row_sum,
};

/// Writes every figure of `figures` into `dir` (created if missing),
/// calling `progress(done, total)` after each.
#[cfg(feature = "cli")]
pub fn write_all_with_progress(
    figures: &[Figure],
    dir: &Path,
    mut progress: impl FnMut(usize, usize),
) -> Result<Vec<std::path::PathBuf>, Error> {
    let mut written = Vec::with_capacity(figures.len());
    for (i, figure) in figures.iter().enumerate() {
        written.push(write_figure(figure, dir)?);
        progress(i + 1, figures.len());
    }
    Ok(written)
}

/// Writes `figure` into `dir` (created if missing); a figure is looked up
/// by its file name with [`crate::registry::Registry::figure`].
#[cfg(feature = "cli")]
fn write_figure(figure: &Figure, dir: &Path) -> Result<std::path::PathBuf, Error> {
    std::fs::create_dir_all(dir).map_err(|e| Error::Io {
        path: dir.display().to_string(),
        message: format!("cannot create the directory: {e}"),
    })?;
    let path = dir.join(figure.file);
    (figure.draw)(&path)?;
    Ok(path)
}

/// Every leading-order normalization claim that has a width sweep.
fn swept_claims() -> Vec<&'static NormClaim> {
    use crate::claims::{bypass, compound, layernorm, rmsnorm};
    [
        layernorm::norm_claims(),
        rmsnorm::norm_claims(),
        bypass::norm_claims(),
        compound::norm_claims(),
    ]
    .into_iter()
    .flatten()
    .filter(|c| c.sweep.is_some())
    .collect()
}

/// The gap of each leading-order formula to the exact grouped oracle against
/// `d`, log-log, with the fitted `A/d + B/d²` as a dashed line: slope −1.
fn leading_order_gap(path: &Path) -> Result<(), Error> {
    let mut series = Vec::new();
    for (i, claim) in swept_claims().into_iter().enumerate() {
        let curve: GapCurve = claim.gap_curve(&SWEEP_D)?;
        let measured: Vec<(f64, f64)> = curve
            .d
            .iter()
            .map(|&d| d as f64)
            .zip(curve.gap.iter().copied())
            .collect();
        let fitted: Vec<(f64, f64)> = curve
            .d
            .iter()
            .map(|&d| {
                let d = d as f64;
                (d, curve.a / d + curve.b / (d * d))
            })
            .collect();
        series.push(
            Series::new(
                format!("{} (fitted slope {:.3})", claim.card.id, curve.slope),
                measured,
                SeriesStyle::Points(MARKERS[i % MARKERS.len()]),
            )
            .in_color(i),
        );
        series.push(
            Series::new(
                format!("A/d + B/d^2 fit, {}", claim.card.id),
                fitted,
                SeriesStyle::DASHED,
            )
            .in_color(i),
        );
    }
    chart(
        path,
        "Leading-order formulas: gap to the exact value falls like 1/d",
        &[Panel::new(
            Axis::log("width d (units)"),
            Axis::log("mean_k |formula_k - exact_k|"),
            series,
        )],
    )
}

/// Marker shapes in the order series take them.
const MARKERS: [Marker; 3] = [Marker::Circle, Marker::Square, Marker::Triangle];
/// Dash patterns in the order series take them.
const DASHES: [Dash; 3] = [Dash::Solid, Dash::Dashed, Dash::Dotted];

/// `c(μ, σ)` against `μ/σ` for several `p`: the closed form as lines and the
/// Monte Carlo least-squares shrink factor (`eval ln`'s `c`) as points with
/// ± 2 standard errors, at `d = 64`.
fn layernorm_c(path: &Path) -> Result<(), Error> {
    const D: usize = 64;
    // A fixed standardised pattern u (mean 0, variance 1), so x = r + u has
    // μ/σ = r.
    let raw: Vec<f64> = (0..D).map(|k| ((k as f64 + 0.5) * 2.399).sin()).collect();
    let (m, v) = crate::formulas::layernorm::input_moments(&raw)?;
    let u: Vec<f64> = raw.iter().map(|t| (t - m) / v.sqrt()).collect();
    let ratios: Vec<f64> = (0..=8).map(|i| i as f64 * 0.5).collect();
    let (mut curves, mut gaps) = (Vec::new(), Vec::new());
    for (i, p) in [0.1, 0.3, 0.5].into_iter().enumerate() {
        let rate = Rate::new(p)?;
        let grid: Vec<(f64, f64)> = (0..=80)
            .map(|j| {
                let r = j as f64 * 0.05;
                (r, shrink(r, 1.0, rate).unwrap_or(f64::NAN))
            })
            .collect();
        let mut points = Vec::new();
        let mut errors = Vec::new();
        let mut residuals = Vec::new();
        for (j, &r) in ratios.iter().enumerate() {
            let x: Vec<f64> = u.iter().map(|t| r + t).collect();
            let seed = 100 * i as u64 + j as u64;
            let out = crate::eval::norm::ln(
                &x,
                p,
                LayerNormParams::default(),
                Budget::new(100_000, seed)?,
            )?;
            let c = out
                .results
                .iter()
                .find(|res| res.name == "c")
                .ok_or_else(|| Error::Internal {
                    what: "eval ln returned no c".into(),
                })?;
            let (mc, se) =
                c.estimate()
                    .map(|(m, s)| (m[0], s[0]))
                    .ok_or_else(|| Error::Internal {
                        what: "eval ln returned no Monte Carlo c".into(),
                    })?;
            points.push((r, mc));
            errors.push(2.0 * se);
            residuals.push((r, mc - shrink(r, 1.0, rate)?));
        }
        let marker = MARKERS[i % MARKERS.len()];
        curves.push(
            Series::new(
                format!("p = {p}: c = sqrt(q / (1 + p (mu/sigma)^2))"),
                grid,
                SeriesStyle::Line(DASHES[i % DASHES.len()], None),
            )
            .in_color(i),
        );
        curves.push(
            Series::new(
                format!("p = {p}: Monte Carlo, d = {D}, +/- 2 SE"),
                points,
                SeriesStyle::Points(marker),
            )
            .with_errors(errors.clone())
            .in_color(i),
        );
        gaps.push(
            Series::new(
                format!("p = {p}: Monte Carlo - closed form, +/- 2 SE"),
                residuals,
                SeriesStyle::Points(marker),
            )
            .with_errors(errors)
            .in_color(i),
        );
    }
    gaps.push(Series::new("zero", vec![(0.0, 0.0), (4.0, 0.0)], SeriesStyle::DASHED).in_color(5));
    chart(
        path,
        "LayerNorm after dropout: the shrink factor c(mu, sigma)",
        &[
            Panel::new(
                Axis::linear("mu / sigma of the pre-dropout vector"),
                Axis::linear("c  (E[LN(z)] = beta + c (LN(x) - beta))"),
                curves,
            ),
            Panel::new(
                Axis::linear("mu / sigma (the O(1/d) excess grows with mu/sigma)"),
                Axis::linear("Monte Carlo - closed form"),
                gaps,
            )
            .with_height(280),
        ],
    )
}

/// The deep stack: eval/train variance ratio per layer for several `p`,
/// with the fold applied and without (32 random networks, ± 2 SE).
fn deep_stack(path: &Path) -> Result<(), Error> {
    use crate::eval::stack::{StackConfig, run};
    let rates = [0.1, 0.3, 0.5];
    let table = run(
        StackConfig::default(),
        &rates,
        &Subject::reference(),
        Budget::new(32, 1)?,
    )?;
    let (mut trained, mut folded) = (Vec::new(), Vec::new());
    for (i, p) in rates.into_iter().enumerate() {
        let Some(rt) = table.rate(p) else { continue };
        let marker = MARKERS[i % MARKERS.len()];
        for field in ["base", "fold"] {
            let est: Vec<_> = (1..=rt.layers.len())
                .map(|l| rt.at(l, field))
                .collect::<Option<_>>()
                .ok_or_else(|| Error::Internal {
                    what: format!("no stack field {field}"),
                })?;
            let points = est
                .iter()
                .enumerate()
                .map(|(l, e)| ((l + 1) as f64, e.value))
                .collect();
            let errors = est.iter().map(|e| 2.0 * e.stderr).collect();
            if field == "base" {
                trained.push(
                    Series::new(
                        format!("p = {p}, BN as trained, +/- 2 SE"),
                        points,
                        SeriesStyle::Points(marker),
                    )
                    .with_errors(errors)
                    .in_color(i),
                );
            } else {
                folded.push(
                    Series::new(
                        format!("p = {p}, after the fold q rv - p rm^2"),
                        points,
                        SeriesStyle::Line(DASHES[i % DASHES.len()], Some(marker)),
                    )
                    .in_color(i),
                );
            }
        }
    }
    // Same shape as layernorm_c's chart: both figures declare two panels as data (axes, series, height).
    chart(
        path,
        "Dropout before BatchNorm: eval/train output variance by depth",
        &[
            Panel::new(
                Axis::integer("block (linear -> ReLU -> dropout -> BN)"),
                Axis::log("eval / train variance, BN as trained (log)"),
                trained,
            ),
            Panel::new(
                Axis::integer("block"),
                Axis::linear("eval / train variance, folded"),
                folded,
            )
            .with_height(300),
        ],
    )
}

/// The seed example: `a = (0.2, 0.3, 0.5)`, `p = 0.5`. The distribution of
/// the row sum `R = Σ m_i a_i / q` over the 8 equally likely masks, as bars,
/// with its mean `E[R] = 1` marked on the axis.
///
/// The row sums are computed in exact integer arithmetic: with `a_i = n_i/10`
/// and `q = 1/2`, `R = Σ m_i 2 n_i / 10`, so masks with the same numerator
/// `Σ m_i 2 n_i` have the same `R` and their probabilities add (the two masks
/// with `R = 1` make the tallest bar).
fn attention_row_sum(path: &Path) -> Result<(), Error> {
    const TENTHS: [u32; 3] = [2, 3, 5];
    // Each of the 2³ masks has probability q³ = 1/8 at p = 1/2.
    let mut mass = std::collections::BTreeMap::<u32, f64>::new();
    for mask in 0u32..8 {
        let numerator: u32 = (0..3)
            .filter(|i| mask >> i & 1 == 1)
            .map(|i| 2 * TENTHS[i])
            .sum();
        *mass.entry(numerator).or_insert(0.0) += 0.125;
    }
    let bars: Vec<(f64, f64)> = mass
        .iter()
        .map(|(&n, &w)| (f64::from(n) / 10.0, w))
        .collect();
    let mean: f64 = bars.iter().map(|(r, w)| r * w).sum();
    let p_one = mass.get(&10).copied().unwrap_or(0.0);
    let series = vec![
        Series::new(
            format!("P(R = r) over the 8 masks; P(R = 1) = {p_one}"),
            bars,
            SeriesStyle::Bars(0.12),
        )
        .in_color(0),
        Series::new(
            format!("E[R] = {mean} (the mean, marked on the axis)"),
            vec![(mean, 0.0)],
            SeriesStyle::Points(Marker::Triangle),
        )
        .in_color(1),
        Series::new(
            "the mean's position",
            vec![(mean, 0.0), (mean, 0.3)],
            SeriesStyle::Line(Dash::Dotted, None),
        )
        .in_color(1),
    ];
    chart(
        path,
        "Attention row sum after dropout: a = (0.2, 0.3, 0.5), p = 0.5",
        &[Panel::new(
            Axis::linear("row sum R = sum_i m_i a_i / q"),
            Axis::linear("probability").starting_at_zero(),
            series,
        )],
    )
}
