//! The attention family on a Python function that drops attention
//! probabilities, at the user's row `a`, values `v` and rate `p`.
//!
//! # Setting
//!
//! The user's `dropout(A)` gets an `(n, T)` array whose rows are copies of
//! one softmax row `a` (positive, summing to 1) and returns the dropped rows
//! `b`, `b_i = m_i a_i / q` with `m_i ~ Bernoulli(q)` fresh per entry and
//! row. (`F.scaled_dot_product_attention` with the values `V = I_T`
//! returns exactly these rows; `dropmc.torch.sdpa_dropout` builds it.) The
//! row sum is `R = Σ_i b_i`, the output for scalar values `v` is
//! `o = Σ_i b_i v_i`, computed here from the returned row.
//!
//! # The claims
//!
//! The moment claims are the Rust family's own, built at the user's row,
//! values and rate by [`dropmc::claims::attention::at`] (ids, formula
//! texts, closed forms and per-draw statistics; derivations in
//! [`dropmc::formulas::attention`]); this file samples the user's dropout
//! for them (one call per draw, two for the variances' pair forms
//! `½(R − R')²`). Only the rule on every returned row exists here alone:
//!
//! ```text
//! attention.dropped_row       every b_i is 0 or a_i/q      a rule, every row
//! ```
//!
//! Judged as [`crate::claims`] judges the elementwise claims: each is a
//! [`dropmc::claims::Claim`] checked by [`dropmc::claims::check`] at the
//! suite's level and minimum budgets (Student-t for the means, exact for
//! the rule). The law of `R`
//! ([`dropmc::claims::attention::seed_row_sum_pmf`]) is stated at the
//! seed's row only and is reported as skipped.

use dropmc::Error;
use dropmc::claims::attention::{
    self as family, A as SEED_A, AttentionClaim, Quantity, V as SEED_V,
};
use dropmc::conformance::Options;
use dropmc::engine::{derive_seed, estimate};
use dropmc::eval::attn::{probability_row, renormalised_note};
use dropmc::ops::{Rate, Subject};

use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde_json::json;

use crate::claims::rule_claim;
use crate::claims::rules::count_rows;
use crate::claims::{PyClaim, PyDropout, failed_in, failed_low};
use crate::forward::{Dtype, PyForward};
use crate::to_py;
use dropmc::claims::dropout::{Draw, PairSampler};
use dropmc::claims::fn_claim::PassClaim;

/// The id of the rule only the binding states (every returned row is
/// dropped right): no Rust claim has it.
const DROPPED_ROW: &str = "attention.dropped_row";

/// Relative slack of a kept entry `b_i` around `a_i / q`, in units of the
/// dtype's `ε`, for a row of `T` keys whose smallest entry is `a_min`.
///
/// A framework does not drop the `a` it is given but recomputes it: SDPA
/// takes logits `ln a_i` (each rounded: absolute error `ε |ln a_i| / 2`,
/// a relative error of the same size after `exp`), exponentiates (`ε/2`),
/// sums `T` positive terms (relative `(T − 1) ε/2`), divides (`ε/2`) and
/// scales by `1/q` (`ε/2` for `1/q`, `ε/2` for the product). Summing the
/// first-order terms: `(|ln a_min| + T + 3) ε / 2`. The slack doubles it
/// (second-order terms and a framework's fused `exp(x − max)`), so a
/// correct dropout is never flagged, while any wrong scale (`1/p`, a
/// renormalised row) is off by far more than `10³ ε` at rows of a few
/// keys.
pub fn kept_tolerance(a: &[f64], dtype: Dtype) -> f64 {
    let a_min = a.iter().copied().fold(f64::INFINITY, f64::min);
    (a_min.ln().abs() + a.len() as f64 + 3.0) * dtype.epsilon()
}

/// The row and values the claims sample at, and the rate.
#[derive(Clone)]
struct Row {
    a: Vec<f64>,
    v: Vec<f64>,
    rate: Rate,
}

/// The Rust `claim` on the Python dropout: one call per draw (two for a
/// pair form), each draw's rows handed to the claim's own statistic. The
/// test declares the pair-form statistic, which is what this sampler runs.
fn moment_claim<'a>(claim: AttentionClaim) -> Result<PyClaim<'a>, Error> {
    Ok(PyClaim {
        null_range: claim.widths(),
        card: claim.card_with(claim.statistic_on_pairs()),
        analytic: claim.closed_form()?,
        note: None,
        estimate: Box::new(move |subject, budget| {
            let statistic = |d: &Draw, out: &mut [f64]| claim.draw_statistic(d.z, d.z_alt, out);
            let sampler = PairSampler {
                layer: subject.dropout,
                x: &claim.a,
                p: claim.p,
                dim: claim.dim(),
                pairs: claim.reads_pair(),
                statistic: &statistic,
            };
            Ok(estimate(&sampler, budget)?.estimates())
        }),
    })
}

/// The moment claims at `row` (none at `p = 0`, where every row is `a`).
fn moment_claims<'a>(row: &Row) -> Result<Vec<PyClaim<'a>>, Error> {
    if row.rate.p() == 0.0 {
        return Ok(Vec::new());
    }
    family::at(&row.a, &row.v, row.rate.p())
        .into_iter()
        .map(moment_claim)
        .collect()
}

/// Entries of one returned row that are neither 0 nor `a_i / q` within
/// the relative `tolerance` ([`kept_tolerance`]).
pub fn misdropped_entries(a: &[f64], b: &[f64], rate: Rate, tolerance: f64) -> usize {
    a.iter()
        .zip(b)
        .filter(|&(&a, &b)| {
            let kept = a / rate.q();
            b != 0.0 && (b - kept).abs() > tolerance * kept
        })
        .count()
}

/// `attention.dropped_row`: every entry of every row is dropped (0) or
/// kept and scaled (`a_i / q`).
fn dropped_row_claim<'a>(forward: &'a PyForward, row: &Row) -> PyClaim<'a> {
    let (a, rate) = (row.a.clone(), row.rate);
    let tolerance = kept_tolerance(&a, forward.dtype());
    rule_claim(
        DROPPED_ROW,
        "every b_i is 0 or a_i/q (relative slack (|ln a_min| + T + 3) eps): entries off = 0",
        None,
        move |budget| {
            count_rows(budget, || {
                forward.train_row(&a, |r| misdropped_entries(&a, r.out, rate, tolerance))
            })
        },
    )
}

/// Why the law of `R` is skipped.
fn pmf_skip_reason() -> String {
    format!(
        "the law of R at the seed's row a = (0.2, 0.3, 0.5) only: dropmc report checks it on the mathematics; {DROPPED_ROW} judges each of your rows"
    )
}

/// Runs the attention claims on the Python dropout.
fn run(forward: &PyForward, row: &Row, options: &Options) -> Result<crate::Outcome, Error> {
    let layer = PyDropout::at_rate(forward, row.rate.p());
    let subject = Subject::with_dropout(&layer);
    let mut claims = moment_claims(row)?;
    claims.push(dropped_row_claim(forward, row));
    let results = crate::check_claims(&claims, &subject, options)?;
    Ok((
        results,
        vec![(family::seed_row_sum_pmf().card.id, pmf_skip_reason())],
    ))
}

/// `check_attention_dropout`: the attention claims on `train`, a wrapped
/// `dropout(A)` on `(n, T)` rows of `a`. Returns the run's JSON (the
/// layout of [`crate::check_dropout`]'s) and one summary dict per claim.
#[pyfunction]
#[pyo3(signature = (train, p, dtype_name, a, v, samples, seed))]
#[allow(clippy::too_many_arguments)]
pub fn check_attention(
    py: Python<'_>,
    train: Py<PyAny>,
    p: f64,
    dtype_name: &str,
    a: Vec<f64>,
    v: Vec<f64>,
    samples: Option<u64>,
    seed: u64,
) -> PyResult<(String, Vec<Py<PyDict>>)> {
    let rate = Rate::new(p).map_err(to_py)?;
    let dtype = crate::dtype(dtype_name)?;
    dropmc::check_finite_vec("a", &a).map_err(to_py)?;
    dropmc::check_len("values", &v, a.len()).map_err(to_py)?;
    let (a, renormalised) = probability_row(&a).map_err(to_py)?;
    let row = Row {
        a: a.iter().map(|&x| dtype.round(x)).collect(),
        v,
        rate,
    };
    let forward = PyForward::train_only(py, train, dtype, derive_seed(seed, "python/attention"));
    let options = crate::run_options(seed, samples);
    let (results, skipped) = crate::run_detached(py, &forward, || run(&forward, &row, &options))?;
    let fields = [
        ("likely_causes", json!(attention_causes(&results))),
        ("renormalised", json!(renormalised.map(renormalised_note))),
        ("p", json!(p)),
        ("dtype", json!(dtype_name)),
        ("rows", json!(forward.rows_served())),
        ("a", json!(row.a)),
        ("values", json!(row.v)),
        ("kept_tolerance", json!(kept_tolerance(&row.a, dtype))),
    ];
    crate::outcome_json(py, seed, results, &skipped, fields)
}

/// The likely causes of the attention claims' failures, in words:
///
/// * `row_sum_variance` or `output_variance` fails *low*: two rows of a
///   call differ less than two independent masks make them — the rows are
///   correlated (a mask shared across heads, across the batch, or reused);
///   the means then fail too because their rows are not independent draws;
/// * `dropped_row` fails: the kept entries are not `a_i/q` (a wrong scale,
///   or the row renormalised after dropping);
/// * a mean fails with the entries right: the keep probability is not `q`.
pub fn attention_causes(results: &[dropmc::claims::ClaimResult]) -> Vec<String> {
    let failed = |id: &str| failed_in(results, id);
    let low = |id: &str| failed_low(results, id);
    let mut causes = Vec::new();
    let (row_sum_variance, output_variance) =
        (Quantity::RowSumVariance.id(), Quantity::OutputVariance.id());
    if low(row_sum_variance) || low(output_variance) {
        causes.push(
            "the rows of one call are correlated: two rows differ less than two independent \
             masks make them (one mask shared across heads, across the batch, or reused); the \
             means may fail with it, their rows not being independent draws"
                .to_string(),
        );
    }
    if failed(DROPPED_ROW) {
        causes.push(
            "the kept entries are not a_i/q: the survivors' scale is wrong (1/p, x*q), or the \
             row is renormalised after dropping"
                .to_string(),
        );
    } else if causes.is_empty()
        && [
            Quantity::EntryMean,
            Quantity::RowSumMean,
            Quantity::OutputMean,
        ]
        .iter()
        .any(|q| failed(q.id()))
    {
        causes.push(
            "the kept entries are right but the keep probability is not q = 1 - p: the layer \
             drops at another rate, or its keep rule is inverted"
                .to_string(),
        );
    } else if causes.is_empty() && (failed(row_sum_variance) || failed(output_variance)) {
        causes.push(
            "the row's variance is above (p/q) sum a_i^2: the entries are not dropped \
             independently (several dropped together) or the rate differs"
                .to_string(),
        );
    }
    causes
}

/// The family's default row and values (the seed's).
#[pyfunction]
pub fn attention_defaults() -> (Vec<f64>, Vec<f64>) {
    (SEED_A.to_vec(), SEED_V.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_at_the_seed_row() {
        // a = (0.2, 0.3, 0.5), v = (1, -2, 3), p = 0.5 (p/q = 1):
        // Var R = 0.04 + 0.09 + 0.25 = 0.38; E[o] = 0.2 - 0.6 + 1.5 = 1.1;
        // Var o = 0.04 + 0.36 + 2.25 = 2.65.
        let row = Row {
            a: SEED_A.to_vec(),
            v: SEED_V.to_vec(),
            rate: Rate::new(0.5).unwrap(),
        };
        let claims = moment_claims(&row).unwrap();
        let by = |q: Quantity| {
            &claims
                .iter()
                .find(|c| c.card.id == q.id())
                .unwrap()
                .analytic
        };
        let close = |x: f64, y: f64| (x - y).abs() <= 4.0 * f64::EPSILON;
        assert!(close(by(Quantity::RowSumVariance)[0], 0.38));
        assert!(close(by(Quantity::OutputMean)[0], 1.1));
        assert!(close(by(Quantity::OutputVariance)[0], 2.65));
    }

    #[test]
    fn the_rule_accepts_zero_and_the_scaled_entry_only() {
        let rate = Rate::new(0.5).unwrap();
        let a = [0.2, 0.3, 0.5];
        let tol = kept_tolerance(&a, Dtype::F64);
        assert_eq!(misdropped_entries(&a, &[0.4, 0.0, 1.0], rate, tol), 0);
        // Renormalised survivors (0.2, 0.3)/0.5 and a 1/p scale at p = 0.5
        // coincide with 1/q; renormalising after dropping the last key does not.
        assert_eq!(misdropped_entries(&a, &[0.4, 0.6, 0.0], rate, tol), 0);
        assert_eq!(
            misdropped_entries(&a, &[0.2 / 0.7, 0.0, 0.5 / 0.7], rate, tol),
            2
        );
    }
}
