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
//! ```text
//! mask_shape.mean              E[z_tk] = x_tk          (any mask shape)
//! mask_shape.shared_variance   Var S_k = (p/q) (Σ_t x_tk)²
//! mask_shape.shared_zero_column P(S_k's entries all 0) = p
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
use dropmc::claims::fn_claim::half_squared_difference;
use dropmc::claims::{Card, Shape};
use dropmc::conformance::Options;
use dropmc::engine::{derive_seed, estimate};
use dropmc::formulas::dropout::unit_raw_moment;
use dropmc::formulas::mask_shape as f;
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

/// Draws of each mask-shape claim (the Rust family's budget).
pub const MASK_SHAPE_SAMPLES: u64 = 200_000;

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

    /// Per group, the sum of `z` over its members.
    fn sums(&self, z: &[f64], out: &mut [f64]) {
        for (o, m) in out.iter_mut().zip(&self.members) {
            *o = m.iter().map(|&i| z[i]).sum();
        }
    }
}

/// What a draw statistic sees: the groups and two independent passes.
pub struct GroupDraw<'a> {
    pub groups: &'a Groups,
    pub x: &'a [f64],
    pub z: &'a [f64],
    pub z_alt: &'a [f64],
}

fn group_claim<'a>(
    id: &'static str,
    formula: &'static str,
    statistic_kind: Statistic,
    analytic: Vec<f64>,
    setup: (&'a Groups, Vec<f64>, Rate),
    statistic: fn(&GroupDraw, &mut [f64]),
) -> PyClaim<'a> {
    let (groups, x, rate) = setup;
    let dim = analytic.len();
    let p = rate.p();
    // Conclusive on the generic path's fallback too (a scaled count whose
    // draws do not read back as two-valued is tested as a mean).
    let samples = MASK_SHAPE_SAMPLES.max(statistic_kind.on_generic_path().min_samples());
    PyClaim {
        card: Card::new(id, "mask_shape", formula, Shape::Vector, samples)
            .with_statistic(statistic_kind),
        analytic,
        note: None,
        estimate: Box::new(move |subject, budget| {
            let x = &x;
            let draw = |d: &Draw, out: &mut [f64]| {
                statistic(
                    &GroupDraw {
                        groups,
                        x,
                        z: d.z,
                        z_alt: d.z_alt,
                    },
                    out,
                )
            };
            // Two independent passes per draw (the variance reads both).
            let sampler = PairSampler {
                layer: subject.dropout,
                x,
                p,
                dim,
                pairs: true,
                statistic: &draw,
            };
            Ok(estimate(&sampler, budget)?.estimates())
        }),
    }
}

/// The mask-shape claims at `rate` on the row `x` grouped by `groups`
/// (none at `p = 0`). Every group must hold a non-zero entry, so an
/// all-zero group means a dropped mask.
pub fn mask_shape_claims<'a>(groups: &'a Groups, x: &[f64], rate: Rate) -> Vec<PyClaim<'a>> {
    if rate.p() == 0.0 {
        return Vec::new();
    }
    let block = groups.block(x);
    let g = groups.members.len();
    let t = groups.positions();
    vec![
        group_claim(
            "mask_shape.mean",
            "E[z_tk] = x_tk (any mask shape)",
            // z_tk is x_tk/q or 0: a scaled count, tested exactly when the
            // draws read back as two-valued.
            Statistic::ScaledCount { keep: rate.q() },
            x.iter().map(|&a| unit_raw_moment(a, rate, 1)).collect(),
            (groups, x.to_vec(), rate),
            |d, out| out.copy_from_slice(d.z),
        ),
        group_claim(
            "mask_shape.shared_variance",
            "shared over the given axes: Var S_k = (p/q) (sum_t x_tk)^2",
            // (S_k − S'_k)²/2 is nonzero with probability 2pq.
            Statistic::unit_pair_form(rate.p()),
            f::shared_variance(&block, g, rate),
            (groups, x.to_vec(), rate),
            |d, out| {
                let n = out.len();
                let (mut a, mut b) = (vec![0.0; n], vec![0.0; n]);
                d.groups.sums(d.z, &mut a);
                d.groups.sums(d.z_alt, &mut b);
                for ((o, s), s_alt) in out.iter_mut().zip(&a).zip(&b) {
                    *o = half_squared_difference(*s, *s_alt);
                }
            },
        ),
        group_claim(
            "mask_shape.shared_zero_column",
            "shared over the given axes: P(group k all zero) = p",
            Statistic::Indicator { trials: 1 },
            f::zero_column_probability(t, g, true, rate),
            (groups, x.to_vec(), rate),
            |d, out| {
                for (o, m) in out.iter_mut().zip(&d.groups.members) {
                    let all_zero = m.iter().all(|&i| d.z[i] == 0.0 || d.x[i] == 0.0);
                    *o = if all_zero { 1.0 } else { 0.0 };
                }
            },
        ),
    ]
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
    let mut run = mask_shape_claims(groups, x, setup.rate);
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
    if low("mask_shape.shared_zero_column") || low("mask_shape.shared_variance") {
        causes.push(
            "the entries of a mask group are not dropped together: the mask is not shared over \
             the axes given (an elementwise mask, or one shared over other axes); check shared_axes"
                .into(),
        );
    } else if failed("mask_shape.mean") && failed("semantics.survivors_exact") {
        causes.push(
            "the kept values are not x/q: the survivors' scale is wrong (x*q, x/p), or the layer \
             runs at another rate than the p declared"
                .into(),
        );
    } else if failed("mask_shape.mean")
        || failed("mask_shape.shared_zero_column")
        || failed("mask_shape.shared_variance")
    {
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
        let claims = mask_shape_claims(&g, &[1.0, 2.0, 3.0, 4.0], rate);
        let by_id = |id: &str| claims.iter().find(|c| c.card.id == id).unwrap();
        assert_eq!(
            by_id("mask_shape.shared_variance").analytic,
            vec![9.0, 49.0]
        );
        assert_eq!(
            by_id("mask_shape.shared_zero_column").analytic,
            vec![0.5, 0.5]
        );
        assert_eq!(by_id("mask_shape.mean").analytic, vec![1.0, 2.0, 3.0, 4.0]);
    }
}
