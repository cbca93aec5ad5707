//! The second-order estimates and the sample-size guide in `dropmc eval`.
//!
//! For `E[LN(z)]` (`eval ln`), `E[RMSNorm(z)]` (`eval rms`) and `E[LN(y)]`
//! (`eval bypass`) the output carries, beside the paper's first-order
//! `formula`:
//!
//! * `second_order`: the estimate of [`crate::formulas::second_order`], whose
//!   error is `O(1/d²)` against the first order's `O(1/d)`;
//! * `masks_to_resolve_first_order`: how many masks a Monte Carlo run needs
//!   before it can tell the first-order formula from the truth.
//!
//! # The sample-size guide
//!
//! A Monte Carlo estimate of `E[out_k]` from `n` masks has standard error
//! `sd_k/√n`, `sd_k` the per-draw standard deviation of `out_k`
//! ([`layer_norm_draw_sd`], [`rms_norm_draw_sd`], to leading order). The
//! first-order formula is off by a gap `g_k`; a z-test at the suite's level
//! (critical value `z_crit`) notices it with the suite's power (`z_power`)
//! once `sd_k/√n ≤ |g_k| / (z_crit + z_power)`, that is from
//!
//! ```text
//! n* = min_k ((z_crit + z_power) · sd_k / |g_k|)²
//! ```
//!
//! masks on ([`masks_to_resolve`]). The gap is `exact − formula` when the
//! exact value is computed (at most 20 mask bits), else
//! `second_order − formula`, which equals the gap up to `O(1/d²)`. Read it
//! as: an experiment with fewer masks than `n*` cannot see the paper's
//! approximation error, so for it the first-order formula is as good as the
//! truth; beyond `n*`, use the second order (or the exact value).
//!
//! The guide is an order-of-magnitude figure: `sd_k` is leading order, off
//! by `O(1/d)` relative (on the claims' two-value input with `p = 0.3`, at
//! most 3 % for LayerNorm and 7 % for RMSNorm at `d = 20`, 14 % and 29 % at
//! `d = 8`; `tests/second_order.rs`), and `n*` goes with its square.
//!
//! The table prints the guide after the per-unit rows; the JSON has it as
//! `masks_to_resolve_first_order` (rounded up; absent when the gap is zero).

use super::{EvalOutput, FormulaKind, Values};
use crate::error::Error;
use crate::formulas::second_order::{
    NoisyUnits, layer_norm_draw_sd, layer_norm_expectation, rms_norm_draw_sd, rms_norm_expectation,
};
use crate::ops::AnyNorm;
use crate::stats::masks_to_resolve;

/// Adds `second_order` and `masks_to_resolve_first_order` to the result
/// named `name` of `output`, the result of `norm`.
pub fn attach(
    output: &mut EvalOutput,
    name: &str,
    units: &NoisyUnits,
    norm: &AnyNorm,
) -> Result<(), Error> {
    // An exact closed form (the zero vector of RMSNorm with ε > 0, a
    // constant x of LayerNorm) needs no next order.
    if output
        .results
        .iter()
        .all(|r| r.name != name || r.kind == FormulaKind::Exact)
    {
        return Ok(());
    }
    let (second, sd) = match norm {
        AnyNorm::Layer(ln) => (
            layer_norm_expectation(units, ln.gamma(), ln.beta(), ln.eps())?,
            layer_norm_draw_sd(units, ln.gamma(), ln.eps())?,
        ),
        AnyNorm::Rms(rms) => (
            rms_norm_expectation(units, rms.gamma(), rms.eps())?,
            rms_norm_draw_sd(units, rms.gamma(), rms.eps())?,
        ),
    };
    if second.iter().chain(&sd).any(|v| !v.is_finite()) {
        return Err(Error::Overflow {
            what: format!("the second order of {name}"),
        });
    }
    let Some(result) = output.results.iter_mut().find(|r| r.name == name) else {
        return Ok(());
    };
    let formula = result.formula.as_slice();
    let truth = result.exact.as_ref().map_or(&second[..], |e| e.as_slice());
    let gap: Vec<f64> = truth.iter().zip(formula).map(|(t, f)| t - f).collect();
    result.masks_to_resolve_first_order = masks_to_resolve(&gap, &sd).map(f64::ceil);
    result.second_order = Some(Values::PerUnit(second));
    Ok(())
}

/// The table's lines for the guide, one per result that has one.
pub fn guide_lines(output: &EvalOutput) -> String {
    let mut out = String::new();
    for r in &output.results {
        if r.second_order.is_none() {
            continue;
        }
        let basis = if r.exact.is_some() {
            "exact"
        } else {
            "second order"
        };
        match r.masks_to_resolve_first_order {
            Some(n) => out.push_str(&format!(
                "masks before Monte Carlo tells the first-order {} from the truth: {n:.0} \
                 (gap to the {basis} value over the per-draw sd)\n",
                r.name
            )),
            None => out.push_str(&format!(
                "the first-order {} equals the {basis} value: no number of masks tells them apart\n",
                r.name
            )),
        }
    }
    out
}
