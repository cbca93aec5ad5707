//! The text `dropmc stack` prints.

use super::StackTable;
use super::rows::{LayerRow, RateRow};
use crate::stats::Estimate;
use crate::table::{Table, wrap_text};

/// One variant column of the printed table: its header, the layer
/// statistic it shows, and the readout statistic of its readout row (`None`
/// prints `-`).
struct VariantColumn {
    header: &'static str,
    layer: fn(&LayerRow<Estimate>) -> Estimate,
    readout: Option<fn(&RateRow<Estimate>) -> Estimate>,
}

/// A [`VariantColumn`] (a `const fn`, so the table below is one line a
/// column).
const fn column(
    header: &'static str,
    layer: fn(&LayerRow<Estimate>) -> Estimate,
    readout: Option<fn(&RateRow<Estimate>) -> Estimate>,
) -> VariantColumn {
    VariantColumn {
        header,
        layer,
        readout,
    }
}

/// The printed variant columns, in order (eval/train variance ratios).
const VARIANT_COLUMNS: [VariantColumn; 5] = [
    column("dropout->BN", |r| r.base, Some(|r| r.readout_base)),
    column("folded", |r| r.fold, Some(|r| r.readout_fold)),
    column(
        "re-estimated",
        |r| r.reestimate,
        Some(|r| r.readout_reestimate),
    ),
    column("dropout after last BN", |r| r.after_last, None),
    column("LayerNorm", |r| r.layer_norm, None),
];

fn cell(e: Estimate) -> String {
    crate::table::format_estimate(e.value, e.stderr)
}

/// The table `dropmc stack` prints: per rate and layer, the eval/train
/// variance ratio (the squared output scale) of every variant.
pub fn table(t: &StackTable, width: usize) -> String {
    let c = &t.config;
    let intro = format!(
        "deep stack: {} blocks [linear -> ReLU -> dropout(p) -> BN], width {}, batch {}, \
         {} buffer-refresh batches, {} eval examples, input N({}, 1); {} random networks (seed {})",
        c.depth,
        c.width,
        c.batch,
        c.refresh_batches,
        c.eval_examples,
        c.input_mean,
        t.replicates,
        t.seed
    );
    let cells = "cells: eval/train variance ratio per layer (1 = no shift; the first layer's \
                 is Delta = c^2), mean ± SE over networks";
    let mut out = String::new();
    for line in wrap_text(&intro, width)
        .into_iter()
        .chain(wrap_text(cells, width))
    {
        out.push_str(&line);
        out.push('\n');
    }
    out.push('\n');
    let headers = ["p", "layer"]
        .into_iter()
        .chain(VARIANT_COLUMNS.iter().map(|v| v.header));
    let mut rows = Table::new(headers).wrap(5);
    for r in &t.rates {
        for (l, layer) in r.layers.iter().enumerate() {
            let cells = VARIANT_COLUMNS.iter().map(|v| cell((v.layer)(layer)));
            rows.row(
                [format!("{}", r.p), format!("{}", l + 1)]
                    .into_iter()
                    .chain(cells),
            );
        }
        let readout = VARIANT_COLUMNS
            .iter()
            .map(|v| v.readout.map_or("-".into(), |f| cell(f(&r.extra))));
        rows.row(
            [format!("{}", r.p), "readout".into()]
                .into_iter()
                .chain(readout),
        );
    }
    out.push_str(&rows.render(width));
    out.push('\n');
    for r in &t.rates {
        let line = format!(
            "p = {}: readout mean shift (eval - train) = {} train sd; first layer minus formula \
             mean_k c_k^2 = {}",
            r.p,
            cell(r.extra.readout_mean_shift),
            cell(r.extra.first_shift_minus_formula)
        );
        for part in wrap_text(&line, width) {
            out.push_str(&part);
            out.push('\n');
        }
    }
    out
}
