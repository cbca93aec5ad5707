//! `dropmc eval`: the formulas evaluated on the user's own numbers, beside
//! an exact value and a Monte Carlo estimate.
//!
//! Every quantity is an [`EvalQuantity`] (its clap arguments, its run) listed
//! by [`quantities`]; the command line and the bindings both call
//! [`EvalQuantity::run_args`] or [`EvalQuantity::run_matches`], so they print
//! the same output. Every quantity returns an [`EvalOutput`] whose JSON shape
//! is fixed:
//!
//! ```json
//! {"quantity": "ln", "p": 0.3, "d": 3, "samples": 1000000, "seed": 1, "eps": 0.0,
//!  "results": [{"name": "E[M]", "kind": "exact", "order": null,
//!               "formula": ..., "exact": ..., "mc": ..., "stderr": ...,
//!               "sampler": "fast"}, ...]}
//! ```
//!
//! * `formula` is the closed form; `kind` says whether it is `"exact"` at
//!   every `d` or `"leading_order"`, and `order` is then the power of `1/d`
//!   of the leading neglected term (`1`: the error is `O(1/d)`; `null` for
//!   exact).
//! * `exact` is an exact finite-`d` value: for an exact closed form it is
//!   always filled (by an independent enumeration of the masks where that is
//!   small enough, else by the closed form itself); for a leading-order form,
//!   by enumeration at most [`norm::EXACT_LIMIT`] mask bits, else `null`.
//! * `mc`, `stderr` are the Monte Carlo estimate and its standard error, and
//!   `sampler` which sampler made it (`"fast"`: the bit-mask kernels of
//!   [`crate::ops::fast`]; `"generic"`: one draw at a time through the reference
//!   layer). With `--samples 0` all three are `null`: closed forms and exact
//!   values only.
//! * `eps` (normalization quantities only) is the ε in force.
//! * Scalars are numbers, per-unit quantities arrays.
//!
//! `E[LN(z)]`, `E[RMSNorm(z)]` and `E[LN(y)]` carry two more fields (absent
//! elsewhere): `second_order`, the next-order estimate (error `O(1/d²)`), and
//! `masks_to_resolve_first_order`, the sample-size guide (see
//! `second_order`). A corrected quantity carries `uncorrected`, the value
//! the correction replaces, and a result outside its formula's useful range
//! a `warning` (see [`range`]).

pub mod attn;
pub mod bn;
pub(crate) mod bypass;
pub(crate) mod compound;
pub(crate) mod input;
pub(crate) mod linear_path;
pub(crate) mod ln;
pub mod moments;
pub mod norm;
pub(crate) mod quantity;
pub mod range;
pub(crate) mod rms;
pub(crate) mod second_order;
mod site;
pub mod stack;
mod table;

pub use ln::LayerNormParams;
pub use quantity::{EvalQuantity, SamplingArgs};
pub use table::{table, table_fitted};

use serde::Serialize;

use crate::claims::SamplerKind;
use crate::engine::Budget;
use crate::error::Error;
use crate::stats::Estimate;

/// The crate's quantities, in the order `dropmc eval --help` lists them;
/// each module's `ABOUT` is its one-line help.
pub fn quantities() -> Vec<EvalQuantity> {
    // No long about: a long help switches clap's `--help` to its
    // two-line-per-option layout, unlike every other quantity's.
    vec![
        moments::quantity(),
        ln::quantity(),
        rms::quantity(),
        bypass::quantity(),
        compound::quantity(),
        attn::quantity(),
        bn::quantity(),
        linear_path::quantity(),
    ]
}

/// A power of two close to `max |x|` (1 when `x` is all zeros): dividing by
/// it is exact and brings the largest magnitude near 1.
pub fn power_of_two_scale(x: &[f64]) -> f64 {
    let largest = x.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    if largest == 0.0 || !largest.is_finite() {
        return 1.0;
    }
    // 2^e built from its bits, with e kept to the normal exponents
    // [−1022, 1023]: dividing by a normal power of two is exact even for a
    // subnormal x (the quotient gains exponent, loses no digit), and the
    // scale itself never underflows to 0 or overflows to ∞.
    let e = (largest.log2().round() as i64).clamp(-1022, 1023);
    f64::from_bits(((e + 1023) as u64) << 52)
}

/// The Monte Carlo budget of an `eval` run: `None` for `--samples 0`
/// (closed forms and exact values only); one sample is an error, as
/// everywhere (a standard error needs two draws).
pub fn monte_carlo(budget: Budget) -> Result<Option<Budget>, Error> {
    if budget.samples == 0 {
        return Ok(None);
    }
    Budget::new(budget.samples, budget.seed).map(Some)
}

/// One number or one per unit.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Values {
    Scalar(f64),
    PerUnit(Vec<f64>),
}

impl Values {
    /// The values as a slice.
    pub fn as_slice(&self) -> &[f64] {
        match self {
            Values::Scalar(v) => std::slice::from_ref(v),
            Values::PerUnit(v) => v,
        }
    }

    /// `values` in this one's shape.
    pub fn like(&self, values: Vec<f64>) -> Values {
        match self {
            Values::Scalar(_) => Values::Scalar(values[0]),
            Values::PerUnit(_) => Values::PerUnit(values),
        }
    }
}

/// Whether a closed form is exact at every `d` or a leading-order value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FormulaKind {
    Exact,
    LeadingOrder,
}

/// The power of `1/d` of the term the paper's first-order corrections drop.
pub const FIRST_ORDER: u32 = 1;

/// One evaluated quantity.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalResult {
    pub name: String,
    /// Whether `formula` is exact or leading order.
    pub kind: FormulaKind,
    /// The power of `1/d` of the leading neglected term; `None` when exact.
    pub order: Option<u32>,
    pub formula: Values,
    pub exact: Option<Values>,
    /// Per-entry bounds on the rounding of `exact` where it was enumerated
    /// ([`crate::exact::Oracle::rounding`]); not serialized.
    #[serde(skip)]
    pub exact_rounding: Option<Vec<f64>>,
    /// The Monte Carlo estimate; `None` with `--samples 0` or where the
    /// quantity is undefined for this input.
    pub mc: Option<Values>,
    pub stderr: Option<Values>,
    /// Which sampler produced `mc` and `stderr` (`None` without them).
    pub sampler: Option<SamplerKind>,
    /// The value the correction replaces (`LN(x)`, or 1 for a factor).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uncorrected: Option<Values>,
    /// The next-order estimate, where the crate has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub second_order: Option<Values>,
    /// The sample-size guide: masks needed before Monte Carlo tells the
    /// first-order `formula` from the truth (see `second_order`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub masks_to_resolve_first_order: Option<f64>,
    /// Why this result should be read with care (an input adjusted before
    /// evaluation, a formula outside its useful range); the table prints
    /// them, the JSON has them as one `"warning"` line joined by "; ".
    /// The unit each per-unit entry belongs to, where some units have no
    /// value (`eval bn`: the channels with a fold; see
    /// [`EvalOutput::channels`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub units: Option<Vec<usize>>,
    #[serde(
        rename = "warning",
        skip_serializing_if = "Vec::is_empty",
        serialize_with = "one_line"
    )]
    pub warnings: Vec<String>,
}

fn one_line<S: serde::Serializer>(warnings: &[String], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&warnings.join("; "))
}

impl EvalResult {
    fn with_kind(name: &str, kind: FormulaKind, formula: Values, exact: Option<Values>) -> Self {
        EvalResult {
            name: name.to_string(),
            kind,
            order: (kind == FormulaKind::LeadingOrder).then_some(FIRST_ORDER),
            formula,
            exact,
            exact_rounding: None,
            mc: None,
            stderr: None,
            sampler: None,
            uncorrected: None,
            second_order: None,
            masks_to_resolve_first_order: None,
            units: None,
            warnings: Vec::new(),
        }
    }

    /// A closed form that is exact at every `d`: `exact` is `enumerated`
    /// (an independent computation) where there is one, else the closed form.
    pub fn exact(name: &str, formula: Values, enumerated: Option<Vec<f64>>) -> Self {
        let exact = match enumerated {
            Some(e) => formula.like(e),
            None => formula.clone(),
        };
        Self::with_kind(name, FormulaKind::Exact, formula, Some(exact))
    }

    /// A leading-order closed form (error `O(1/d)`), with the exact value
    /// where one was computed.
    pub fn leading(name: &str, formula: Values, exact: Option<Vec<f64>>) -> Self {
        let exact = exact.map(|e| formula.like(e));
        Self::with_kind(name, FormulaKind::LeadingOrder, formula, exact)
    }

    /// The same result with Monte Carlo estimates (in the closed form's
    /// shape) made by `sampler`.
    pub fn with_estimates(mut self, estimates: &[Estimate], sampler: SamplerKind) -> Self {
        self.mc = Some(
            self.formula
                .like(estimates.iter().map(|e| e.value).collect()),
        );
        self.stderr = Some(
            self.formula
                .like(estimates.iter().map(|e| e.stderr).collect()),
        );
        self.sampler = Some(sampler);
        self
    }

    /// The same result, with `estimates` if there are any.
    pub fn with_optional_estimates(
        self,
        estimates: Option<&[Estimate]>,
        sampler: SamplerKind,
    ) -> Self {
        match estimates {
            Some(e) => self.with_estimates(e, sampler),
            None => self,
        }
    }

    /// The same result with the value its correction replaces.
    pub fn with_uncorrected(mut self, uncorrected: Vec<f64>) -> Self {
        self.uncorrected = Some(self.formula.like(uncorrected));
        self
    }

    /// The same result, its per-unit entries belonging to `units`.
    pub fn for_units(mut self, units: Vec<usize>) -> Self {
        self.units = Some(units);
        self
    }

    /// The unit of the `k`-th per-unit entry.
    pub fn unit(&self, k: usize) -> usize {
        self.units.as_ref().map_or(k, |u| u[k])
    }

    /// The same result with one more warning line.
    pub fn with_warning(mut self, warning: impl Into<String>) -> Self {
        self.add_warning(warning);
        self
    }

    /// Adds a warning line.
    pub fn add_warning(&mut self, warning: impl Into<String>) {
        self.warnings.push(warning.into());
    }

    /// Every number of the result: closed form, exact value, estimate,
    /// standard error, uncorrected and second-order values.
    pub fn numbers(&self) -> impl Iterator<Item = f64> + '_ {
        std::iter::once(&self.formula)
            .chain(&self.exact)
            .chain(&self.mc)
            .chain(&self.stderr)
            .chain(&self.uncorrected)
            .chain(&self.second_order)
            .flat_map(|v| v.as_slice().iter().copied())
    }

    /// The Monte Carlo estimates and their standard errors, if a run made
    /// them.
    pub fn estimate(&self) -> Option<(&[f64], &[f64])> {
        Some((
            self.mc.as_ref()?.as_slice(),
            self.stderr.as_ref()?.as_slice(),
        ))
    }

    /// The value a result is judged against: `exact` where known, else the
    /// Monte Carlo estimate.
    pub fn truth(&self) -> Option<&[f64]> {
        self.exact
            .as_ref()
            .or(self.mc.as_ref())
            .map(Values::as_slice)
    }
}

/// The output of one `eval` quantity.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalOutput {
    pub quantity: &'static str,
    pub p: f64,
    pub d: usize,
    /// Monte Carlo draws (0: none were made).
    pub samples: u64,
    pub seed: u64,
    /// The normalization ε in force (normalization quantities only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eps: Option<f64>,
    pub results: Vec<EvalResult>,
    /// Each channel's status (`eval bn` only): whether it has a value and,
    /// if not, why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub channels: Vec<ChannelStatus>,
}

/// Whether a channel was evaluated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChannelVerdict {
    /// Its buffers have a fold: `c` and the folded value are in the results.
    Folded,
    /// Its buffers have no fold (`q · rv − p · rm² ≤ 0`): no value.
    NoFold,
}

/// One channel's status, with the reason when it has no value.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChannelStatus {
    pub channel: usize,
    pub status: ChannelVerdict,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl EvalOutput {
    /// An output without `eps`.
    pub fn new(
        quantity: &'static str,
        p: f64,
        d: usize,
        budget: Budget,
        results: Vec<EvalResult>,
    ) -> Self {
        EvalOutput {
            quantity,
            p,
            d,
            samples: budget.samples,
            seed: budget.seed,
            eps: None,
            results,
            channels: Vec::new(),
        }
    }

    /// The same output with each channel's status.
    pub fn with_channels(mut self, channels: Vec<ChannelStatus>) -> Self {
        self.channels = channels;
        self
    }

    /// The same output, saying which ε was used.
    pub fn with_eps(mut self, eps: f64) -> Self {
        self.eps = Some(eps);
        self
    }

    /// Returns the output if every number in it is finite; an input whose
    /// powers overflow `f64` (for example `|x| ≈ 1e200` in `E[z⁴]`) is an
    /// error rather than a table of infinities or NaN.
    pub fn checked(self) -> Result<Self, Error> {
        for r in &self.results {
            if r.numbers().any(|v| !v.is_finite()) {
                return Err(Error::Overflow {
                    what: r.name.to_string(),
                });
            }
        }
        Ok(self)
    }

    /// The result named `name`.
    pub fn result_mut(&mut self, name: &str) -> Option<&mut EvalResult> {
        self.results.iter_mut().find(|r| r.name == name)
    }
}
