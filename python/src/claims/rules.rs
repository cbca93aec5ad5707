//! The semantics rules on a Python dropout (eval identity, eval draws
//! nothing, survivors, the input left unchanged, backward mask, `p = 0`
//! identity), each a count of violations over rows at the user's rate and
//! dtype.

use dropmc::Error;
use dropmc::claims::semantics::{self, ids as semantics_ids};
use dropmc::engine::Budget;
use dropmc::formulas::semantics::{backward_bound_in, kept_roundings};
use dropmc::ops::Rate;

use super::repeats::repeat_claim;
use super::{PyClaim, Setup, rule_claim};
use crate::forward::{Dtype, PyForward};

/// Sums `per_row` over `budget.samples` rows.
pub(crate) fn count_rows(
    budget: Budget,
    mut per_row: impl FnMut() -> Result<usize, Error>,
) -> Result<f64, Error> {
    let mut total = 0usize;
    for _ in 0..budget.samples {
        total += per_row()?;
    }
    Ok(total as f64)
}

/// Which roundings of `x/q` a check admits as a kept value
/// (`check_dropout(..., rounding=...)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SurvivorRounding {
    /// Any of the dtype's usual roundings ([`accepted_survivors`]).
    Any,
    /// `x/q` rounded once to the dtype, nothing else: the best a dtype
    /// allows ([`ONCE`]).
    Once,
}

impl SurvivorRounding {
    /// Parses the Python option's value.
    pub fn from_name(name: &str) -> Option<SurvivorRounding> {
        match name {
            "any" => Some(SurvivorRounding::Any),
            "once" => Some(SurvivorRounding::Once),
            _ => None,
        }
    }

    /// The kept values this rule admits for the input `x` (one of the
    /// dtype's values) at `rate`.
    pub fn admitted(self, x: f64, rate: Rate, dtype: Dtype) -> Vec<f64> {
        let all = accepted_survivors(x, rate, dtype);
        match self {
            SurvivorRounding::Any => all.to_vec(),
            SurvivorRounding::Once => vec![all[ONCE]],
        }
    }
}

/// Index in [`accepted_survivors`] of `x/q` rounded once.
pub(crate) const ONCE: usize = 0;
/// Index in [`accepted_survivors`] of `fl(x · fl(1/q))`.
pub(crate) const RECIPROCAL: usize = 2;

/// The kept outputs a dtype's arithmetic may give for `x / q`, in this
/// order:
///
/// 0. [`ONCE`]: `x/q` with `q = 1 − p` as given (a float64), rounded once
///    to the dtype: the correctly rounded quotient (in float64, `x / q`);
/// 1. `fl(x / fl(q))`: the quotient by `q` cast to the dtype first;
/// 2. [`RECIPROCAL`]: `fl(x · fl(1/q))`, the reciprocal rounded from its
///    float64 value (PyTorch's float16 and bfloat16 dropout, see
///    [`crate::dtype`]);
/// 3. `fl(x · fl(1/fl(q)))`: the reciprocal of the rounded `q`.
///
/// In float64 these are the Rust suite's two roundings ([`kept_roundings`]);
/// numpy, JAX and PyTorch cast a Python float scale to the array's dtype,
/// hence 1–3. Rounding once from float64 is the correct rounding of the
/// real `x/q` but for a float64 quotient within `2⁻⁵³` relative of a
/// midpoint of the dtype (the double rounding `53 → t` bits), far below
/// any input a check uses.
pub(super) fn accepted_survivors(x: f64, rate: Rate, dtype: Dtype) -> [f64; 4] {
    match dtype {
        Dtype::F64 => {
            let (division, reciprocal) = kept_roundings(x, rate);
            [division, division, reciprocal, reciprocal]
        }
        _ => {
            let (x, q) = (dtype.round(x), dtype.round(rate.q()));
            let inverse = dtype.round(1.0 / rate.q());
            [
                dtype.round(x / rate.q()),
                dtype.div(x, q),
                dtype.mul(x, inverse),
                dtype.mul(x, dtype.div(1.0, q)),
            ]
        }
    }
}

/// Bound on `|backward_k − g_k/q|` for a kept unit from rounding alone in
/// `dtype`: the Rust suite's [`backward_bound_in`] (float64's
/// [`dropmc::formulas::semantics::backward_bound`], or the longest of the
/// survivor rule's roundings, [`accepted_survivors`], in a narrower dtype).
fn backward_error_bound(g: f64, rate: Rate, dtype: Dtype) -> f64 {
    backward_bound_in(g, rate, dtype.epsilon(), dtype.smallest_subnormal())
}

/// The Rust suite's statement of its semantics rule `id` (an id of
/// [`semantics_ids`]), which the rule here checks on the user's layer.
fn suite_formula(id: &str) -> &'static str {
    semantics::card(id).map_or("the Rust suite states no such semantics rule", |card| {
        card.formula
    })
}

fn same_bits(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits()
}

/// The components of `a` and `b` whose bits differ.
fn differing_bits(a: &[f64], b: &[f64]) -> usize {
    a.iter()
        .zip(b)
        .filter(|(u, v)| !same_bits(**u, **v))
        .count()
}

/// The survivor rule `id` on `forward`'s training rows of input `x`: every
/// kept value one that `rounding` admits for its input, bit for bit (in
/// [`crate::small_calls`] too, on one-row calls).
pub(crate) fn survivors_claim<'a>(
    id: &'static str,
    forward: &'a PyForward,
    x: Vec<f64>,
    rate: Rate,
    rounding: SurvivorRounding,
) -> PyClaim<'a> {
    let dtype = forward.dtype();
    rule_claim(
        id,
        match rounding {
            SurvivorRounding::Any => suite_formula(semantics_ids::SURVIVORS_EXACT),
            SurvivorRounding::Once => {
                "rounding=\"once\": kept z_k = x_k / q rounded once to the input's dtype, bit for bit, dropped z_k = 0: 0 violations"
            }
        },
        None,
        move |budget| {
            let accepted: Vec<Vec<f64>> = x
                .iter()
                .map(|&a| rounding.admitted(a, rate, dtype))
                .collect();
            count_rows(budget, || {
                forward.train_row(&x, |row| {
                    row.out
                        .iter()
                        .zip(&accepted)
                        .filter(|(z, ok)| **z != 0.0 && !ok.iter().any(|a| same_bits(*a, **z)))
                        .count()
                })
            })
        },
    )
}

/// The semantics rules: eval identity, eval draws nothing, survivors,
/// backward mask, `p = 0` identity (each where the subject can express it;
/// the rest are returned as skipped, with the reason).
pub(crate) fn rule_claims<'a>(
    setup: &Setup<'a>,
) -> (Vec<PyClaim<'a>>, Vec<(&'static str, String)>) {
    let forward = setup.forward;
    let dtype = forward.dtype();
    let rate = setup.rate;
    let x: Vec<f64> = setup.semantics_x.iter().map(|&v| dtype.round(v)).collect();
    let mut claims = Vec::new();
    let mut skipped = Vec::new();
    let xe = x.clone();
    claims.push(rule_claim(
        semantics_ids::EVAL_IDENTITY,
        "eval: bits of z differing from x = 0",
        None,
        move |budget| {
            count_rows(budget, || {
                forward.eval_row(&xe, |row| differing_bits(&xe, row.out))
            })
        },
    ));
    if setup.has_rng_state {
        let xd = x.clone();
        claims.push(rule_claim(
            "semantics.eval_draws_nothing",
            "eval: rows from forward(X, False) calls that changed rng_state() = 0",
            None,
            move |budget| {
                count_rows(budget, || {
                    forward.eval_row(&xd, |row| usize::from(row.drew == Some(true)))
                })
            },
        ));
    } else {
        skipped.push((
            "semantics.eval_draws_nothing",
            "no rng_state given: pass rng_state=lambda: <your generator's state> to check \
             that eval mode draws no random numbers"
                .to_string(),
        ));
    }
    claims.push(survivors_claim(
        semantics_ids::SURVIVORS_EXACT,
        forward,
        x.clone(),
        rate,
        setup.rounding,
    ));
    let informative = x
        .iter()
        .map(|v| v.abs() >= dtype.smallest_normal())
        .collect();
    match repeat_claim(setup, x.clone(), informative) {
        Ok(claim) => claims.push(claim),
        Err(why) => skipped.push(("semantics.masks_never_repeat", why)),
    }
    let xi = x.clone();
    claims.push(rule_claim(
        "semantics.forward_preserves_input",
        "forward(X, True) leaves X as it was, bit for bit: rows written into = 0",
        None,
        move |budget| {
            count_rows(budget, || {
                forward.train_row(&xi, |row| usize::from(row.input_changed))
            })
        },
    ));
    // The mask is read off the output, so the backward rule runs on the
    // units whose kept output cannot be zero: inputs of normal magnitude
    // (a zero input reads as dropped, and so does a subnormal one under a
    // flush-to-zero float mode, as XLA uses on the CPU).
    // The backward call gets the whole row (a shaped layer's sample keeps
    // its shape); only the units of normal magnitude are judged.
    let xb = x.clone();
    let judged: Vec<usize> = (0..x.len())
        .filter(|&k| x[k].abs() >= dtype.smallest_normal())
        .collect();
    if !forward.has_backward() {
        skipped.push((
            semantics_ids::BACKWARD_MASK,
            "no backward given: pass backward=lambda x, grad, training: ... (the gradient of \
             the most recent forward call) to check that it uses the forward's mask"
                .to_string(),
        ));
    } else if rate.p() == 0.0 {
        skipped.push((
            semantics_ids::BACKWARD_MASK,
            "p = 0: semantics.p_zero_identity checks backward = g bit for bit".to_string(),
        ));
    } else if !judged.is_empty() {
        claims.push(rule_claim(
            semantics_ids::BACKWARD_MASK,
            suite_formula(semantics_ids::BACKWARD_MASK),
            None,
            move |budget| {
                count_rows(budget, || {
                    forward.backward_row(&xb, |row| {
                        judged
                            .iter()
                            .filter(|&&k| {
                                let (g, kept) = (row.grad_out[k], row.out[k] != 0.0);
                                let want = if kept { g / rate.q() } else { 0.0 };
                                let bound = backward_error_bound(g, rate, dtype);
                                let err = (row.grad_in[k] - want).abs();
                                err.is_nan() || err > bound
                            })
                            .count()
                    })
                })
            },
        ));
    }
    if rate.p() == 0.0 {
        let x0 = x.clone();
        let backward = forward.has_backward();
        claims.push(rule_claim(
            semantics_ids::P_ZERO_IDENTITY,
            "p = 0: z = x (and backward = g when given), bit for bit: 0 violations",
            None,
            move |budget| {
                count_rows(budget, || {
                    let mut bad = forward.train_row(&x0, |row| differing_bits(&x0, row.out))?;
                    if backward {
                        bad += forward
                            .backward_row(&x0, |row| differing_bits(row.grad_out, row.grad_in))?;
                    }
                    Ok(bad)
                })
            },
        ));
    } else {
        skipped.push((
            semantics_ids::P_ZERO_IDENTITY,
            "runs at p = 0 only (your forward's rate is fixed): check a forward built \
             with p = 0 as check_dropout(forward0, 0.0)"
                .to_string(),
        ));
    }
    (claims, skipped)
}
