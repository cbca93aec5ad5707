//! The figures `dropmc plot` writes, each computed from the crate's own
//! formulas, oracles and samplers.

use std::path::Path;

use super::chart::{Axis, Series, SeriesStyle, line_chart};
use crate::error::Error;
use crate::exact::enumerate_masks;
use crate::ops::Rate;

/// File names of the figures, in the order they are written.
pub const FIGURES: [&str; 1] = ["attention_row_sum.svg"];

/// Writes every figure into `dir` (created if missing).
pub fn write_all(dir: &Path) -> Result<Vec<std::path::PathBuf>, Error> {
    std::fs::create_dir_all(dir).map_err(|e| Error::Degenerate {
        what: format!("cannot create {}: {e}", dir.display()),
    })?;
    let paths: Vec<_> = FIGURES.iter().map(|f| dir.join(f)).collect();
    attention_row_sum(&paths[0])?;
    Ok(paths)
}

/// The seed example: `a = (0.2, 0.3, 0.5)`, `p = 0.5`. The distribution of
/// the row sum `R = Σ m_i a_i / q` over the 8 equally likely masks, as a
/// cumulative distribution, with its mean `E[R] = 1`.
fn attention_row_sum(path: &Path) -> Result<(), Error> {
    let a = [0.2, 0.3, 0.5];
    let rate = Rate::new(0.5)?;
    // P(R = r) for each mask by enumeration: each mask is one outcome.
    let mut outcomes: Vec<(f64, f64)> = Vec::new();
    enumerate_masks(3, rate, 1, |mask, out| {
        let r: f64 = a
            .iter()
            .zip(mask)
            .filter(|(_, m)| **m)
            .map(|(v, _)| v / rate.q())
            .sum();
        outcomes.push((
            r,
            rate.q().powi(mask.iter().filter(|m| **m).count() as i32)
                * rate.p().powi(mask.iter().filter(|m| !**m).count() as i32),
        ));
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
    // Masks whose row sum rounds to exactly 1 (the two with R = 1).
    let p_one: f64 = outcomes
        .iter()
        .filter(|(r, _)| (r - 1.0).abs() < 1e-12)
        .map(|(_, w)| w)
        .sum();
    let series = vec![
        Series {
            name: format!("P(R <= r) over the 8 masks; P(R = 1) = {p_one}"),
            points: cdf,
            errors: None,
            style: SeriesStyle::Line,
        },
        Series {
            name: "E[R] = 1".into(),
            points: vec![(1.0, 0.0), (1.0, 1.0)],
            errors: None,
            style: SeriesStyle::Dashed,
        },
    ];
    line_chart(
        path,
        "Attention row sum after dropout: a = (0.2, 0.3, 0.5), p = 0.5",
        &Axis {
            label: "row sum R = sum_i m_i a_i / q".into(),
            log: false,
        },
        &Axis {
            label: "cumulative probability".into(),
            log: false,
        },
        &series,
    )
}
