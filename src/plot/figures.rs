//! The figures `dropmc plot` writes, each computed from the crate's own
//! formulas, oracles and samplers.

use std::path::{Path, PathBuf};

use super::chart::{Axis, LegendPosition, Series, SeriesStyle, line_chart};
use crate::claims::norm::{GapCurve, NormClaim, SWEEP_D, gap_curve};
use crate::engine::Budget;
use crate::error::Error;
use crate::exact::enumerate_masks;
use crate::formulas::layernorm::shrink;
use crate::ops::{Rate, Subject};

/// File names of the figures, in the order they are written.
pub const FIGURES: [&str; 4] = [
    "leading_order_gap.svg",
    "layernorm_c.svg",
    "deep_stack.svg",
    "attention_row_sum.svg",
];

/// Writes every figure into `dir` (created if missing).
pub fn write_all(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    FIGURES.iter().map(|name| write_figure(name, dir)).collect()
}

/// Writes the figure `name` (one of [`FIGURES`]) into `dir`.
pub fn write_figure(name: &str, dir: &Path) -> Result<PathBuf, Error> {
    std::fs::create_dir_all(dir).map_err(|e| Error::Degenerate {
        what: format!("cannot create {}: {e}", dir.display()),
    })?;
    let path = dir.join(name);
    match name {
        "leading_order_gap.svg" => leading_order_gap(&path)?,
        "layernorm_c.svg" => layernorm_c(&path)?,
        "deep_stack.svg" => deep_stack(&path)?,
        "attention_row_sum.svg" => attention_row_sum(&path)?,
        other => {
            return Err(Error::Degenerate {
                what: format!("no figure named {other:?}; figures: {}", FIGURES.join(", ")),
            });
        }
    }
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
        let curve: GapCurve = gap_curve(claim, &SWEEP_D)?;
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
                format!("{} (fitted slope {:.3})", claim.id, curve.slope),
                measured,
                SeriesStyle::Points,
            )
            .in_color(i),
        );
        series.push(
            Series::new(
                format!("  A/d + B/d^2 fit, {}", claim.id),
                fitted,
                SeriesStyle::Dashed,
            )
            .in_color(i),
        );
    }
    line_chart(
        path,
        "Leading-order formulas: gap to the exact value falls like 1/d",
        &Axis::log("width d (units)"),
        &Axis::log("mean_k |formula_k - exact_k|"),
        &series,
        LegendPosition::LowerLeft,
    )
}

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
    let mut series = Vec::new();
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
        for (j, &r) in ratios.iter().enumerate() {
            let x: Vec<f64> = u.iter().map(|t| r + t).collect();
            let seed = 100 * i as u64 + j as u64;
            let out = crate::eval::norm::ln(&x, p, None, None, 0.0, Budget::new(100_000, seed)?)?;
            let c = out
                .results
                .iter()
                .find(|res| res.name == "c")
                .ok_or_else(|| Error::Degenerate {
                    what: "eval ln returned no c".into(),
                })?;
            points.push((r, c.mc.as_slice()[0]));
            errors.push(2.0 * c.stderr.as_slice()[0]);
        }
        series.push(
            Series::new(
                format!("p = {p}: c = sqrt(q / (1 + p (mu/sigma)^2))"),
                grid,
                SeriesStyle::Line,
            )
            .in_color(i),
        );
        series.push(
            Series::new(
                format!("p = {p}: Monte Carlo, d = {D}, +/- 2 SE"),
                points,
                SeriesStyle::Points,
            )
            .with_errors(errors)
            .in_color(i),
        );
    }
    line_chart(
        path,
        "LayerNorm after dropout: the shrink factor c(mu, sigma)",
        &Axis::linear("mu / sigma of the pre-dropout vector"),
        &Axis::linear("c  (E[LN(z)] = beta + c (LN(x) - beta))"),
        &series,
        LegendPosition::UpperRight,
    )
}

/// The deep stack: eval/train variance ratio per layer for several `p`,
/// with the fold applied and without (32 random networks, ± 2 SE).
fn deep_stack(path: &Path) -> Result<(), Error> {
    use crate::stack::{StackConfig, run};
    let rates = [0.1, 0.3, 0.5];
    let table = run(
        StackConfig::default(),
        &rates,
        &Subject::reference(),
        Budget::new(32, 1)?,
    )?;
    let mut series = Vec::new();
    for (i, p) in rates.into_iter().enumerate() {
        let Some(rt) = table.rate(p) else { continue };
        for (field, label, style) in [
            ("base", "BN as trained (+/- 2 SE)", SeriesStyle::Points),
            ("fold", "after the fold", SeriesStyle::Line),
        ] {
            let est: Vec<_> = (1..=rt.layers.len())
                .map(|l| rt.at(l, field))
                .collect::<Option<_>>()
                .ok_or_else(|| Error::Degenerate {
                    what: format!("no stack field {field}"),
                })?;
            let points = est
                .iter()
                .enumerate()
                .map(|(l, e)| ((l + 1) as f64, e.value))
                .collect();
            let mut s = Series::new(format!("p = {p}, {label}"), points, style).in_color(i);
            if style == SeriesStyle::Points {
                s = s.with_errors(est.iter().map(|e| 2.0 * e.stderr).collect());
            }
            series.push(s);
        }
    }
    line_chart(
        path,
        "Dropout before BatchNorm: eval/train output variance by depth",
        &Axis::integer("block (linear -> ReLU -> dropout -> BN)"),
        &Axis::log("eval variance / train variance (log)"),
        &series,
        LegendPosition::LowerLeft,
    )
}

/// The seed example: `a = (0.2, 0.3, 0.5)`, `p = 0.5`. The distribution of
/// the row sum `R = Σ m_i a_i / q` over the 8 equally likely masks, as a
/// cumulative distribution, with its mean `E[R] = 1`.
fn attention_row_sum(path: &Path) -> Result<(), Error> {
    let a = [0.2, 0.3, 0.5];
    let rate = Rate::new(0.5)?;
    let mut outcomes: Vec<(f64, f64)> = Vec::new();
    enumerate_masks(3, rate, 1, |mask, out| {
        let r: f64 = a
            .iter()
            .zip(mask)
            .filter(|(_, m)| **m)
            .map(|(v, _)| v / rate.q())
            .sum();
        let kept = mask.iter().filter(|m| **m).count() as i32;
        outcomes.push((r, rate.q().powi(kept) * rate.p().powi(3 - kept)));
        out[0] = r;
    })?;
    outcomes.sort_by(|x, y| x.0.total_cmp(&y.0));
    let mut cdf = vec![(outcomes[0].0 - 0.2, 0.0)];
    let mut total = 0.0;
    for (r, w) in &outcomes {
        cdf.push((*r, total));
        total += w;
        cdf.push((*r, total));
    }
    cdf.push((outcomes.last().map_or(2.0, |o| o.0) + 0.2, 1.0));
    // Masks whose row sum is 1 up to rounding (the two with R = 1).
    let p_one: f64 = outcomes
        .iter()
        .filter(|(r, _)| (r - 1.0).abs() < 1e-12)
        .map(|(_, w)| w)
        .sum();
    let series = vec![
        Series::new(
            format!("P(R <= r) over the 8 masks; P(R = 1) = {p_one}"),
            cdf,
            SeriesStyle::Line,
        ),
        Series::new(
            "E[R] = 1",
            vec![(1.0, 0.0), (1.0, 1.0)],
            SeriesStyle::Dashed,
        ),
    ];
    line_chart(
        path,
        "Attention row sum after dropout: a = (0.2, 0.3, 0.5), p = 0.5",
        &Axis::linear("row sum R = sum_i m_i a_i / q"),
        &Axis::linear("cumulative probability"),
        &series,
        LegendPosition::UpperLeft,
    )
}
