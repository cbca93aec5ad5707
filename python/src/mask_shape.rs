//! The mask-shape claims on a Python dropout whose mask is shared over some
//! axes (`nn.Dropout1d/2d/3d`, Flax `broadcast_dims`, Keras `noise_shape`),
//! at the user's rate.
//!
//! # Setting
//!
//! The Python side flattens one input `x` of the user's shape to a row of
//! `d` entries and names, per entry, its *group*: the entries that differ
//! only along the shared axes form one group `k` and share one mask `m_k`.
//! Broadcasting makes every group the same size `T` (the product of the
//! shared axes' lengths), so the row is, reordered, the `T × G` block of
//! [`dropmc::formulas::mask_shape`] with positions `t` and groups (its
//! "features") `k`: `z_tk = m_k x_tk / q`, group sum `S_k = Σ_t z_tk`.
//!
//! # The claims, at the user's `p` (derivations in the formulas module)
//!
//! The shared-mask claims are the Rust family's own, built at the user's
//! block and rate by [`dropmc::claims::mask_shape::at`] (ids, formula
//! texts, closed forms and per-draw statistics); this file samples the
//! user's layer for them (two calls per draw) and reorders each returned
//! row to the block. One claim exists here alone:
//!
//! ```text
//! mask_shape.mean              E[z_tk] = x_tk          (any mask shape)
//! mask_shape.shared_variance   Var S_k = (p/q) (Σ_t x_tk)²       (Rust's)
//! mask_shape.shared_zero_column P(S_k's entries all 0) = p        (Rust's)
//!                              (for a group with some x_tk ≠ 0)
//! ```
//!
//! An elementwise mask gives `Var S_k = (p/q) Σ_t x_tk²` and
//! `P(all zero) = p^T` instead (the formulas module's independent case),
//! so with `T ≥ 2` and a group whose entries share a sign both claims tell
//! the shapes apart. The elementwise conformance claims that assume one
//! independent mask per unit (the sum variance, the kept count, …) are
//! skipped with that reason, never failed.
//!
//! Judged as [`crate::claims`] judges the elementwise claims: each is a
//! [`dropmc::claims::Claim`] checked by [`dropmc::claims::check`]
//! (Student-t for the means, exact binomial for the zero-group counts), at
//! the suite's level and minimum budgets.

use dropmc::Error;
use dropmc::claims::ClaimResult;
use dropmc::claims::mask_shape::{self as family, MaskShapeClaim, Quantity};
use dropmc::claims::{Card, Claim, Shape};
use dropmc::conformance::Options;
use dropmc::engine::{derive_seed, estimate};
use dropmc::formulas::dropout::unit_raw_moment;
use dropmc::ops::{Rate, Subject};
use dropmc::stats::Statistic;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde_json::json;

use crate::claims::rules::rule_claims;
use crate::claims::{
    PyClaim, PyDropout, Setup, SurvivorRounding, failed_in, failed_low, family_of,
};
use crate::forward::PyForward;
use crate::small_calls;
use crate::to_py;
use dropmc::claims::dropout::{Draw, PairSampler};
use dropmc::claims::fn_claim::PassClaim;

/// The id of the claim only the binding states (the entries' mean under
/// any mask shape): no Rust claim has it.
const MEAN: &str = "mask_shape.mean";

/// The entries of one input row grouped by the mask they share.
#[derive(Debug, Clone, PartialEq)]
pub struct Groups {
    /// `members[k]`: the row indices of group `k`, in row order (`T` each).
    pub members: Vec<Vec<usize>>,
}

impl Groups {
    /// Groups from each entry's group id (`0..G`, every group the same
    /// size, as broadcasting makes them), or an error saying what is wrong.
    pub fn from_ids(ids: &[usize]) -> Result<Groups, Error> {
        let count = ids.iter().max().map_or(0, |m| m + 1);
        let mut members = vec![Vec::new(); count];
        for (i, &k) in ids.iter().enumerate() {
            members[k].push(i);
        }
        let size = members.first().map_or(0, Vec::len);
        if size == 0 || members.iter().any(|m| m.len() != size) {
            return Err(Error::InvalidOption {
                what: "the mask groups must be non-empty and all of one size".into(),
            });
        }
        Ok(Groups { members })
    }

    /// Positions `T` per group.
    pub fn positions(&self) -> usize {
        self.members[0].len()
    }

    /// The row reordered to the row-major `T × G` block of
    /// [`dropmc::formulas::mask_shape`] (block entry `(t, k)` is the `t`-th
    /// member of group `k`).
    pub fn block(&self, row: &[f64]) -> Vec<f64> {
        let g = self.members.len();
        let mut out = vec![0.0; self.positions() * g];
        for (k, m) in self.members.iter().enumerate() {
            for (t, &i) in m.iter().enumerate() {
                out[t * g + k] = row[i];
            }
        }
        out
    }
}

/// A claim on the Python layer at the row `x`: two independent passes per
/// draw, `statistic` on each draw's rows (in the row's order);
/// `null_range` the statistic's widths under the null where known
/// ([`dropmc::claims::Claim::null_range`]).
fn group_claim<'a>(
    card: Card,
    analytic: Vec<f64>,
    null_range: Option<Vec<f64>>,
    x: &[f64],
    rate: Rate,
    statistic: impl Fn(&Draw, &mut [f64]) + Sync + 'a,
) -> PyClaim<'a> {
    let (x, p, dim) = (x.to_vec(), rate.p(), analytic.len());
    PyClaim {
        null_range,
        card,
        analytic,
        note: None,
        estimate: Box::new(move |subject, budget| {
            let sampler = PairSampler {
                layer: subject.dropout,
                x: &x,
                p,
                dim,
                pairs: true,
                statistic: &statistic,
            };
            Ok(estimate(&sampler, budget)?.estimates())
        }),
    }
}

/// The Rust shared-mask `claim` at the reordered row: each draw's rows
/// reordered to its block and handed to its own statistic.
fn shared_claim<'a>(
    claim: MaskShapeClaim,
    groups: &'a Groups,
    x: &[f64],
    rate: Rate,
) -> Result<PyClaim<'a>, Error> {
    let (card, analytic, widths) = (claim.card(), claim.closed_form()?, claim.widths());
    Ok(group_claim(
        card,
        analytic,
        widths,
        x,
        rate,
        move |d, out| claim.draw_statistic(&groups.block(d.z), &groups.block(d.z_alt), out),
    ))
}

/// `mask_shape.mean`: `E[z_tk] = x_tk` whatever the mask's shape; `z_tk`
/// is `x_tk/q` or 0, a scaled count, tested exactly when the draws read
/// back as two-valued.
fn mean_claim<'a>(x: &[f64], rate: Rate) -> PyClaim<'a> {
    let statistic = Statistic::ScaledCount { keep: rate.q() };
    let card = Card::new(
        MEAN,
        "mask_shape",
        "E[z_tk] = x_tk (any mask shape)",
        Shape::Vector,
        family::samples_for(statistic),
    )
    .with_statistic(statistic);
    let analytic = x.iter().map(|&a| unit_raw_moment(a, rate, 1)).collect();
    group_claim(card, analytic, None, x, rate, |d, out| {
        out.copy_from_slice(d.z)
    })
}

/// The mask-shape claims at `rate` on the row `x` grouped by `groups`
/// (none at `p = 0`): the entries' mean, then the Rust family's shared-mask
/// claims at the reordered block. Every group must hold a non-zero entry,
/// so an all-zero group means a dropped mask.
pub fn mask_shape_claims<'a>(
    groups: &'a Groups,
    x: &[f64],
    rate: Rate,
) -> Result<Vec<PyClaim<'a>>, Error> {
    if rate.p() == 0.0 {
        return Ok(Vec::new());
    }
    let shared = family::at(&groups.block(x), groups.positions(), rate.p())
        .into_iter()
        .filter(|c| c.quantity.shared())
        .map(|c| shared_claim(c, groups, x, rate));
    std::iter::once(Ok(mean_claim(x, rate)))
        .chain(shared)
        .collect()
}

/// Why each elementwise conformance claim is not run on a shared mask.
pub const SHARED_SKIP_REASON: &str = "shared_axes given: this claim assumes one independent mask per unit; mask_shape.* state the shared-mask versions";

/// Why `semantics.masks_never_repeat` is not run on a shared mask.
const REPEAT_SKIP_REASON: &str = "shared_axes given: the rule's window is sized for one independent keep bit per unit, and a shared mask has one per group";

/// Runs the mask-shape claims on the Python layer, and the semantics rules
/// that hold whatever the mask's shape (eval identity, eval draws nothing,
/// survivors, input preserved, backward mask: each on the user's sample,
/// with the shared mask) or says why one was not run; every other
/// conformance claim of the elementwise suite is returned as skipped with
/// [`SHARED_SKIP_REASON`].
pub fn run(setup: &Setup, groups: &Groups, options: &Options) -> Result<crate::Outcome, Error> {
    let x = &setup.semantics_x;
    if let Some(k) = groups
        .members
        .iter()
        .position(|m| m.iter().all(|&i| x[i] == 0.0))
    {
        return Err(Error::InvalidOption {
            what: format!(
                "mask group {k} of x is all zero: a dropped group cannot be told from a kept one"
            ),
        });
    }
    let layer = PyDropout::at_rate(setup.forward, setup.rate.p());
    let subject = Subject::with_dropout(&layer);
    let mut run = mask_shape_claims(groups, x, setup.rate)?;
    let (rules, mut skipped) = rule_claims(setup);
    for rule in rules {
        if rule.card.id == "semantics.masks_never_repeat" {
            skipped.push((rule.card.id, REPEAT_SKIP_REASON.to_string()));
        } else {
            run.push(rule);
        }
    }
    skipped.retain(|(id, _)| *id != "semantics.masks_never_repeat");
    skipped.push((
        "semantics.masks_never_repeat",
        REPEAT_SKIP_REASON.to_string(),
    ));
    let results = crate::check_claims(&run, &subject, options)?;
    let stated: Vec<&str> = run
        .iter()
        .map(|c| c.card.id)
        .chain(skipped.iter().map(|(id, _)| *id))
        .collect();
    let others: Vec<_> = dropmc::conformance::claims(&Options::default())
        .iter()
        .map(|c| c.id())
        .filter(|id| family_of(id) != "mask_shape" && !stated.contains(id))
        .map(|id| (id, SHARED_SKIP_REASON.to_string()))
        .collect();
    skipped.extend(others);
    Ok((results, skipped))
}

/// `check_dropout(..., shared_axes=…)`: the mask-shape claims and the
/// shape-free semantics rules on the wrapped callables. `x` is the
/// flattened input, `group_ids` each entry's mask group. Returns the run's
/// JSON (the layout of [`crate::check_dropout`]'s) and one summary dict
/// per claim.
#[pyfunction]
#[pyo3(signature = (train, evaluate, backward, p, dtype_name, x, group_ids, samples, seed, has_rng_state))]
#[allow(clippy::too_many_arguments)]
pub fn check_mask_shape(
    py: Python<'_>,
    train: Py<PyAny>,
    evaluate: Py<PyAny>,
    backward: Option<Py<PyAny>>,
    p: f64,
    dtype_name: &str,
    x: Vec<f64>,
    group_ids: Vec<usize>,
    samples: Option<u64>,
    seed: u64,
    has_rng_state: bool,
) -> PyResult<(String, Vec<Py<PyDict>>)> {
    let rate = Rate::new(p).map_err(to_py)?;
    let dtype = crate::dtype(dtype_name)?;
    if group_ids.len() != x.len() {
        return Err(PyValueError::new_err("one group id per entry of x"));
    }
    let groups = Groups::from_ids(&group_ids).map_err(to_py)?;
    let one_sample = small_calls::one_row_forward(py, &train, dtype);
    let forward = PyForward::new(
        train,
        evaluate,
        backward,
        dtype,
        derive_seed(seed, "python/mask shape"),
    );
    let setup = Setup {
        forward: &forward,
        rate,
        moment_x: x.clone(),
        semantics_x: x.clone(),
        has_rng_state,
        samples,
        rounding: SurvivorRounding::Any,
    };
    let options = crate::run_options(seed, samples);
    let (mut results, skipped) =
        crate::run_detached(py, &forward, || run(&setup, &groups, &options))?;
    let large_rows = forward.call_rows(x.len());
    let (small, _) = crate::run_detached(py, &one_sample, || {
        small_calls::run_mask_shape(&one_sample, &x, rate, &options, large_rows)
    })?;
    results.extend(small);
    let causes = mask_shape_causes(&results);
    let fields = [
        ("likely_causes", json!(causes)),
        ("p", json!(p)),
        ("dtype", json!(dtype_name)),
        (
            "rows",
            json!(forward.rows_served() + one_sample.rows_served()),
        ),
        ("call_rows", json!([large_rows, small_calls::CALL_ROWS])),
        ("mask_groups", json!(groups.members.len())),
        ("positions_per_group", json!(groups.positions())),
    ];
    crate::outcome_json(py, seed, results, &skipped, fields)
}

/// The likely causes of the mask-shape run's failures: the semantics rules'
/// own ([`crate::claims::likely_causes`] names them), then the pattern of
/// the mask-shape claims:
///
/// * `shared_zero_column` fails low (fewer all-zero groups than `p`) or
///   `shared_variance` fails low: the entries of a group are not dropped
///   together — the mask is not shared over the axes declared (an
///   elementwise mask, or shared over other axes);
/// * `mean` fails with the survivors right: the keep probability is not
///   `q` (another rate, or an inverted keep rule); with the survivors
///   wrong: the scale.
pub fn mask_shape_causes(results: &[ClaimResult]) -> Vec<String> {
    let failed = |id: &str| failed_in(results, id);
    let low = |id: &str| failed_low(results, id);
    let mut causes = crate::claims::rule_causes(results);
    let (zero_column, variance) = (
        Quantity::SharedZeroColumn.id(),
        Quantity::SharedVariance.id(),
    );
    if low(zero_column) || low(variance) {
        causes.push(
            "the entries of a mask group are not dropped together: the mask is not shared over \
             the axes given (an elementwise mask, or one shared over other axes); check shared_axes"
                .into(),
        );
    } else if failed(MEAN) && failed(dropmc::claims::semantics::ids::SURVIVORS_EXACT) {
        causes.push(
            "the kept values are not x/q: the survivors' scale is wrong (x*q, x/p), or the layer \
             runs at another rate than the p declared"
                .into(),
        );
    } else if failed(MEAN) || failed(zero_column) || failed(variance) {
        causes.push(
            "the kept values are right but a group is kept with another probability than \
             q = 1 - p: the layer drops at another rate, or its keep rule is inverted"
                .into(),
        );
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_reorder_to_the_formula_block() {
        // Two groups of three, interleaved: (C=2, L=3) shared over L.
        let g = Groups::from_ids(&[0, 0, 0, 1, 1, 1]).unwrap();
        assert_eq!(g.positions(), 3);
        let block = g.block(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(block, vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    }

    #[test]
    fn unequal_groups_are_refused() {
        assert!(Groups::from_ids(&[0, 0, 1]).is_err());
        assert!(Groups::from_ids(&[]).is_err());
    }

    #[test]
    fn shared_targets_at_the_users_rate() {
        // x = (1, 2 | 3, 4) shared in pairs at p = 0.5 (p/q = 1):
        // Var S = (1+2)², (3+4)²; P(all zero) = 0.5.
        let g = Groups::from_ids(&[0, 0, 1, 1]).unwrap();
        let rate = Rate::new(0.5).unwrap();
        let claims = mask_shape_claims(&g, &[1.0, 2.0, 3.0, 4.0], rate).unwrap();
        let by_id = |id: &str| claims.iter().find(|c| c.card.id == id).unwrap();
        assert_eq!(
            by_id(Quantity::SharedVariance.id()).analytic,
            vec![9.0, 49.0]
        );
        assert_eq!(
            by_id(Quantity::SharedZeroColumn.id()).analytic,
            vec![0.5, 0.5]
        );
        assert_eq!(by_id(MEAN).analytic, vec![1.0, 2.0, 3.0, 4.0]);
    }
}
