//! `eval attn`: attention dropout on the user's row — `E[b]`, `E[R]`,
//! `Var[R]`, and with values `E[o]`, `Var[o]`. Derivations:
//! [`crate::formulas::attention`].

use clap::Args;

use super::quantity::RateArg;

use super::{EvalOutput, EvalResult, Values, monte_carlo};
use crate::claims::SamplerKind;
use crate::engine::Budget;
use crate::error::{Error, check_finite_vec, check_len};
use crate::eval::input::read_list;
use crate::exact::{MAX_ENUMERATION_D, enumerate_masks};
use crate::formulas::attention as f;
use crate::ops::Rate;
use crate::ops::fast::attention_row as fast;
use crate::stats::Estimate;
use crate::stats::tolerance;

/// How far `Σ a` may sit from 1 for a row of `d` probabilities that a
/// float32 softmax produced.
///
/// A float32 softmax computes `e_i = fl(exp(l_i − max))` (one rounding,
/// relative `u = 2⁻²⁴`), `S = fl(Σ e_i)` (at most `d − 1` roundings of the
/// running sum, relative `(d − 1)u` to first order) and `a_i = fl(e_i / S)`
/// (one more). Each `a_i` is therefore `e_i/S_exact · (1 + δ_i)` with
/// `|δ_i| ≤ (d + 1)u + O(u²)`, and `Σ a_i = 1 + Σ (e_i/S_exact) δ_i`, so
/// `|Σ a − 1| ≤ (d + 1)u`. Printing each float32 with nine significant
/// digits (enough to round-trip) adds at most `5·10⁻⁹` relative per entry,
/// `5·10⁻⁹` on the sum, and summing in `f64` adds `d·2⁻⁵³`. The bound is their
/// sum, with one more `u` for the second-order terms.
pub fn float32_row_sum_slack(d: usize) -> f64 {
    const U32: f64 = 1.0 / 16_777_216.0; // 2⁻²⁴, float32's unit roundoff
    const PRINTED: f64 = 5e-9; // half a unit in the ninth significant digit
    (d as f64 + 2.0) * U32 + PRINTED + tolerance::first_order(d as f64)
}

/// The one rule for an attention row, shared by `eval attn` and the Python
/// `check_attention_dropout`: a row whose sum is off 1 by more than a
/// float32 softmax's rounding ([`float32_row_sum_slack`]) is refused; one
/// off by rounding is renormalised, so every formula sees `Σ a = 1`.
/// Returns the row to use and, when it was renormalised, `Σ a − 1`
/// ([`renormalised_note`] words it).
pub fn probability_row(a: &[f64]) -> Result<(Vec<f64>, Option<f64>), Error> {
    let total: f64 = a.iter().sum();
    let slack = float32_row_sum_slack(a.len());
    if (total - 1.0).abs() > slack || total.is_nan() {
        return Err(Error::InvalidOption {
            what: format!(
                "--a sums to {total}, not 1 (within a float32 softmax's rounding, {slack:.1e} \
                 at d = {}); a must be a probability row",
                a.len()
            ),
        });
    }
    if total == 1.0 {
        Ok((a.to_vec(), None))
    } else {
        Ok((a.iter().map(|v| v / total).collect(), Some(total - 1.0)))
    }
}

/// What [`probability_row`] did to a row off 1 by `off`, in words.
pub fn renormalised_note(off: f64) -> String {
    format!("a summed to 1 {off:+.1e} (float32 softmax rounding); it was renormalised to sum 1")
}

/// Evaluates attention dropout on the probability row `a` at rate `p`;
/// `values` (one per position) adds the output `o = Σ b_i v_i`.
///
/// Every closed form is exact; `exact` enumerates every mask when
/// `d <= 22` (above, it is the closed form itself). The
/// estimates come from the fast sampler ([`crate::ops::fast::attention_row::row`]:
/// one mask per sample, the variances as sample variances).
pub fn attn(
    a: &[f64],
    p: f64,
    values: Option<&[f64]>,
    budget: Budget,
) -> Result<EvalOutput, Error> {
    check_finite_vec("a", a)?;
    let rate = Rate::new(p)?;
    let mc = monte_carlo(budget)?;
    if let Some(i) = a.iter().position(|v| *v < 0.0) {
        return Err(Error::InvalidOption {
            what: format!("a[{i}] = {} is negative; a must be a probability row", a[i]),
        });
    }
    let (row, renormalised) = probability_row(a)?;
    let a = row.as_slice();
    let d = a.len();
    let zeros = vec![0.0; d];
    let v = match values {
        Some(v) => {
            check_finite_vec("values", v)?;
            check_len("values", v, d)?;
            v
        }
        None => &zeros[..],
    };
    let est = mc.map(|b| fast::row(a, v, p, b)).transpose()?;
    let exact = if d <= MAX_ENUMERATION_D {
        let raw = enumerate_masks(d, rate, d + 4, |mask, out| {
            let b: Vec<f64> = a
                .iter()
                .zip(mask)
                .map(|(x, &m)| if m { x / rate.q() } else { 0.0 })
                .collect();
            let (r, o) = (b.iter().sum::<f64>(), f::output_mean(&b, v));
            out[..d].copy_from_slice(&b);
            out[d..].copy_from_slice(&[r, r * r, o, o * o]);
        })?;
        let x = raw.values;
        Some::<ExactRow>((
            x[..d].to_vec(),
            x[d],
            x[d + 1] - x[d] * x[d],
            x[d + 2],
            x[d + 3] - x[d + 2] * x[d + 2],
        ))
    } else {
        None
    };
    let fast_estimates =
        |pick: fn(&fast::AttentionRowEstimates) -> Vec<Estimate>| est.as_ref().map(pick);
    // A scalar row: its closed form, the enumerated value `exact_pick` takes
    // from `exact` and the fast estimate `fast_pick` takes from `est`.
    let scalar = |name: &str,
                  formula: f64,
                  exact_pick: fn(&ExactRow) -> f64,
                  fast_pick: fn(&fast::AttentionRowEstimates) -> Estimate| {
        EvalResult::exact(
            name,
            Values::Scalar(formula),
            exact.as_ref().map(|e| vec![exact_pick(e)]),
        )
        .with_optional_estimates(
            est.as_ref().map(|e| vec![fast_pick(e)]).as_deref(),
            SamplerKind::Fast,
        )
    };
    let mut results = vec![
        EvalResult::exact(
            "E[b]",
            Values::PerUnit(f::entry_mean(a)),
            exact.as_ref().map(|e| e.0.clone()),
        )
        .with_optional_estimates(
            fast_estimates(|e| e.entry_mean.clone()).as_deref(),
            SamplerKind::Fast,
        ),
        scalar("E[R]", f::row_sum_mean(a), |e| e.1, |e| e.row_sum_mean),
        scalar(
            "Var[R]",
            f::row_sum_variance(a, rate),
            |e| e.2,
            |e| e.row_sum_variance,
        ),
    ];
    if values.is_some() {
        results.push(scalar(
            "E[o]",
            f::output_mean(a, v),
            |e| e.3,
            |e| e.output_mean,
        ));
        results.push(scalar(
            "Var[o]",
            f::output_variance(a, v, rate),
            |e| e.4,
            |e| e.output_variance,
        ));
    }
    if let Some(off) = renormalised {
        results[0].add_warning(renormalised_note(off));
    }
    EvalOutput::new("attn", p, d, budget, results).checked()
}

/// The enumerated values: E[b] per entry, E[R], Var[R], E[o], Var[o].
type ExactRow = (Vec<f64>, f64, f64, f64, f64);

/// The one-line help of `eval attn`.
pub const ABOUT: &str = "Attention dropout after softmax: E[b], E[R], Var[R], E[o], Var[o].";

/// Arguments of `eval attn`.
#[allow(rustdoc::broken_intra_doc_links)] // the help text writes E[o], not links
#[derive(Debug, Clone, Args)]
pub struct AttnArgs {
    /// The attention probability row, comma-separated (or @FILE), summing to 1.
    #[arg(long, allow_hyphen_values = true)]
    pub a: String,
    #[command(flatten)]
    pub p: RateArg,
    /// Values averaged by the row, one per position (adds E[o], Var[o]).
    #[arg(long, allow_hyphen_values = true)]
    pub values: Option<String>,
}

super::quantity::eval_quantity!("attn");

/// `eval attn` from its arguments.
pub fn run(a: AttnArgs, budget: Budget) -> Result<EvalOutput, Error> {
    let values = a
        .values
        .as_deref()
        .map(|v| read_list("--values", v))
        .transpose()?;
    attn(
        &read_list("--a", &a.a)?,
        a.p.value()?,
        values.as_deref(),
        budget,
    )
}
