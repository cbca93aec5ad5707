//! The caller's batch: claims on the layer called with one row at a time.
//!
//! # Why
//!
//! The other claims stack thousands of copies of `x` into each call
//! ([`crate::forward`]), so a layer whose scale or mask depends on the
//! call itself looks right there: a channel dropout that scales its
//! survivors by `numel/kept` of the call's own mask is unbiased only for
//! large calls. Kept with probability `q` each, `C` channels, the factor
//! `C/K` on a kept channel (`K ≥ 1` the kept count) has
//! `E[m_c C/K] = C q E[1/(1 + B)]` with `B ~ Binomial(C − 1, q)`, and
//! `E[1/(1 + B)] = (1 − p^C)/(C q)`, so `E[z] = (1 − p^C) x`: a bias of
//! `p^C`, nil in a call of thousands of channels, 9 % in a call of one
//! sample of two channels at `p = 0.3`.
//!
//! # The claims
//!
//! The means again, each draw its own call of one row (the shape `(1, d)`,
//! or `(1, *x.shape)` for a shared mask), with the same targets and tests
//! as in the large calls: `calls.one_row_sum_mean`, the row sum's mean
//! `E[S] = Σ_k x_k` of `dropout.sum_mean` (with its composite null in
//! half precision; the sum's skewness is smaller than a unit's, so its
//! minimum budget is: 11 700 calls at the default input and `p = 0.1`,
//! against 33 300 for a unit's mean), and for a shared mask
//! `calls.one_sample_mean`, `E[z_tk] = x_tk` of `mask_shape.mean`. Each
//! runs [`CALL_SAMPLES`] draws (one Python call each), or its statistic's
//! minimum budget where that is larger. The claim's note and the result's
//! `call_rows` field say which call sizes ran.

use dropmc::claims::dropout::ids as dropout_ids;
use dropmc::claims::dropout::{Draw, PairSampler};
use dropmc::claims::{Card, Shape};
use dropmc::engine::estimate;
use dropmc::ops::{DropoutLayer, Rate};
use dropmc::stats::Statistic;
use pyo3::prelude::*;

use crate::claims::family_of;
use crate::claims::{CompositeNull, PyClaim};
use crate::forward::{Dtype, PyForward};

/// Draws (one Python call each) of a small-call claim: above the row sum's
/// minimum budget at the default input and `p = 0.1` (11 700, `4686 γ²`
/// with `γ = −1.58`); a claim whose statistic needs more takes that.
pub const CALL_SAMPLES: u64 = 15_000;

/// The rows of each small call.
pub const CALL_ROWS: usize = 1;

/// The elementwise check's small-call claim.
pub const ONE_ROW_SUM_MEAN: &str = "calls.one_row_sum_mean";

/// A forward over the same training callable, called with [`CALL_ROWS`]
/// rows (training mode only: no gradients are drawn, so its seed is moot).
pub fn one_row_forward(py: Python<'_>, train: &Py<PyAny>, dtype: Dtype) -> PyForward {
    PyForward::train_only(py, train.clone_ref(py), dtype, 0).with_rows_per_call(CALL_ROWS)
}

/// What a small-call claim states: its formula, targets and statistic,
/// the per-draw statistic, and its width under the null where one is known
/// ([`dropmc::claims::Claim::null_range`]: what decides a gross deviation
/// below the minimum budget, such as a mask reused on every call, whose
/// draws all agree and whose `z` is infinite).
pub struct Stated {
    pub formula: &'static str,
    pub targets: Vec<f64>,
    pub statistic: Statistic,
    pub per_draw: fn(&Draw, &mut [f64]),
    pub null_range: Option<Vec<f64>>,
}

/// The mean claim `id` on `layer` (whose forward makes calls of
/// [`CALL_ROWS`] rows), input `x`; `large_rows`: the rows of the other
/// claims' calls, for the note.
pub fn one_row_mean<'a>(
    id: &'static str,
    layer: &'a dyn DropoutLayer,
    x: Vec<f64>,
    rate: Rate,
    stated: Stated,
    large_rows: usize,
) -> PyClaim<'a> {
    let dim = stated.targets.len();
    let p = rate.p();
    let statistic = stated.statistic;
    let samples = CALL_SAMPLES.max(statistic.on_generic_path().min_samples());
    let per_draw = stated.per_draw;
    let shape = if dim == 1 {
        Shape::Scalar
    } else {
        Shape::Vector
    };
    PyClaim {
        null_range: stated.null_range,
        card: Card::new(id, family_of(id), stated.formula, shape, samples)
            .with_statistic(statistic),
        analytic: stated.targets,
        note: Some(format!(
            "calls of {CALL_ROWS} row (the other claims: calls of {large_rows} rows)"
        )),
        estimate: Box::new(move |_, budget| {
            let sampler = PairSampler {
                layer,
                x: &x,
                p,
                dim,
                pairs: false,
                statistic: &per_draw,
            };
            Ok(estimate(&sampler, budget)?.estimates())
        }),
    }
}

/// The composite null of `dropout.sum_mean` carried over to the
/// small-call sum `id` (the same target, the same admissible roundings).
pub fn carried_null(nulls: &[CompositeNull], id: &'static str) -> Option<CompositeNull> {
    nulls
        .iter()
        .find(|n| n.id == dropout_ids::SUM_MEAN)
        .map(|n| CompositeNull { id, ..n.clone() })
}

/// The mask-shape check's small-call claim.
pub const ONE_SAMPLE_MEAN: &str = "calls.one_sample_mean";

/// The mask-shape check's small-call mean on `one_row` (a forward making
/// one-sample calls, [`one_row_forward`]): `E[z_tk] = x_tk` for the
/// flattened sample `x`, tested as `mask_shape.mean` is (a scaled count,
/// exact when the draws read back as two-valued).
pub fn run_mask_shape(
    one_row: &PyForward,
    x: &[f64],
    rate: Rate,
    options: &dropmc::conformance::Options,
    large_rows: usize,
) -> Result<crate::Outcome, dropmc::Error> {
    if rate.p() == 0.0 {
        return Ok((Vec::new(), Vec::new()));
    }
    let layer = crate::claims::PyDropout::at_rate(one_row, rate.p());
    let subject = dropmc::ops::Subject::with_dropout(&layer);
    let targets: Vec<f64> = x
        .iter()
        .map(|&a| dropmc::formulas::dropout::unit_raw_moment(a, rate, 1))
        .collect();
    let stated = Stated {
        formula: "E[z_tk] = x_tk, each draw its own call of one sample",
        targets,
        statistic: Statistic::ScaledCount { keep: rate.q() },
        per_draw: |d, out| out.copy_from_slice(d.z),
        // A scaled count's width is known to the verdict already.
        null_range: None,
    };
    let claim = one_row_mean(
        ONE_SAMPLE_MEAN,
        &layer,
        x.to_vec(),
        rate,
        stated,
        large_rows,
    );
    Ok((
        crate::check_claims(&[claim], &subject, options)?,
        Vec::new(),
    ))
}

/// `calls.one_row_sum_mean`'s statement from `dropout.sum_mean`'s target,
/// statistic and null width ([`crate::claims::sum_mean_target`]).
pub fn row_sum((targets, statistic, width): (Vec<f64>, Statistic, Vec<f64>)) -> Stated {
    Stated {
        formula: "E[S] = sum_k x_k, each draw its own call of one row",
        targets,
        statistic,
        per_draw: |d, out| out[0] = d.z.iter().sum(),
        null_range: Some(width),
    }
}

/// The elementwise check's one-row survivor rule.
pub const ONE_ROW_SURVIVORS: &str = "calls.one_row_survivors";

/// One-row calls of the survivor rule: fewer than the large calls' rule
/// ([`crate::claims::RULE_SAMPLES`]), since each row is a Python call; a
/// rule has no sampling error, and a scale that depends on the call's kept
/// count shows on nearly every kept value.
pub const SURVIVOR_CALLS: u64 = 2_000;

/// `semantics.survivors_exact` on `one_row`'s calls of one row of `x`.
pub fn one_row_survivors<'a>(
    one_row: &'a PyForward,
    x: &[f64],
    rate: Rate,
    rounding: crate::claims::SurvivorRounding,
) -> PyClaim<'a> {
    let x = x.iter().map(|&v| one_row.dtype().round(v)).collect();
    let mut claim =
        crate::claims::rules::survivors_claim(ONE_ROW_SURVIVORS, one_row, x, rate, rounding);
    claim.card.samples = SURVIVOR_CALLS;
    claim.note = Some(format!(
        "calls of {CALL_ROWS} row; the kept values of semantics.survivors_exact's input"
    ));
    claim
}

/// The elementwise check's one-row repeat rule.
pub const ONE_ROW_MASKS_NEVER_REPEAT: &str = "calls.one_row_masks_never_repeat";

/// `semantics.masks_never_repeat` on `one_row`'s calls of one row of the
/// semantics input `x`, [`SURVIVOR_CALLS`] of them (or the user's `cap`).
///
/// # Why a second repeat rule
///
/// The large calls put thousands of rows in one call, so a run capped at
/// 1 000 rows reads them all from one call, and a layer that draws a fresh
/// mask within a call but reuses it on the next call of the same shape
/// (a mask cached per input shape, a generator re-seeded alike on each
/// call) passes there. Here every row is its own call, so every window of
/// rows spans calls: such a layer gives the same row on every call and the
/// second window repeats the first.
///
/// # Its size
///
/// The rule's, unchanged ([`crate::claims::repeats`]): windows of `w` rows of
/// `k` informative bits, `B = w k ≥ (ln(N²/2) + ln(1/α)) / (−ln(p² + q²))`,
/// so a correct dropout (independent Bernoulli bits, whatever the call)
/// repeats a window with probability at most `(N²/2)(p² + q²)^B ≤ α`. At
/// `p = 0.1`, 6 informative units and `N = 1 000` calls: `B = 182` bits,
/// `w = 31` rows, two windows need 62 calls; at `N = 2 000`, `w = 32`.
pub fn one_row_repeats<'a>(
    one_row: &'a PyForward,
    x: &[f64],
    rate: Rate,
    cap: Option<u64>,
) -> Result<PyClaim<'a>, String> {
    let dtype = one_row.dtype();
    let x: Vec<f64> = x.iter().map(|&v| dtype.round(v)).collect();
    let informative = x
        .iter()
        .map(|v| v.abs() >= dtype.smallest_normal())
        .collect();
    let source = crate::claims::repeats::RowSource {
        id: ONE_ROW_MASKS_NEVER_REPEAT,
        forward: one_row,
        rate,
        rows: SURVIVOR_CALLS,
        cap,
    };
    crate::claims::repeats::repeat_rule(source, x, informative)
}
