//! `dropmc eval`: the formulas evaluated on the user's own numbers, beside
//! an exact value and a Monte Carlo estimate.
//!
//! Every quantity returns an [`EvalOutput`] whose JSON shape is fixed:
//!
//! ```json
//! {"quantity": "moments", "p": 0.3, "d": 3, "samples": 1000000, "seed": 1,
//!  "results": [{"name": "E[z]", "formula": [...], "exact": [...],
//!               "mc": [...], "stderr": [...], "sampler": "fast"}, ...]}
//! ```
//!
//! `formula` is the closed form (the leading-order value where the claim is
//! leading order), `exact` an exact finite-`d` value where the crate can
//! compute one (else `null`), `mc` and `stderr` the estimate, `sampler`
//! which sampler made it (`"fast"`: the bit-mask kernels of [`crate::fast`];
//! `"generic"`: one draw at a time through the reference layer). Scalars are
//! numbers, per-unit quantities arrays.
//!
//! `E[LN(z)]`, `E[RMSNorm(z)]` and `E[LN(y)]` carry two more fields (absent
//! elsewhere): `second_order`, the next-order estimate, and
//! `masks_to_resolve_first_order`, the sample-size guide (see
//! [`second_order`]).

pub mod attn;
pub mod bn;
pub mod moments;
pub mod norm;
pub mod second_order;

use serde::Serialize;

use crate::claims::SamplerKind;
use crate::report::{format_estimate, format_value};
use crate::stats::Estimate;

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

    fn like(&self, values: Vec<f64>) -> Values {
        match self {
            Values::Scalar(_) => Values::Scalar(values[0]),
            Values::PerUnit(_) => Values::PerUnit(values),
        }
    }
}

/// One evaluated quantity.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalResult {
    pub name: String,
    pub formula: Values,
    pub exact: Option<Values>,
    pub mc: Values,
    pub stderr: Values,
    /// Which sampler produced `mc` and `stderr`.
    pub sampler: SamplerKind,
    /// The next-order estimate, where the crate has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub second_order: Option<Values>,
    /// The sample-size guide: masks needed before Monte Carlo tells the
    /// first-order `formula` from the truth (see [`second_order`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub masks_to_resolve_first_order: Option<f64>,
    /// Why this result should be read with care (an input adjusted before
    /// evaluation, a formula outside its useful range); the table prints it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

impl EvalResult {
    /// A result from its closed form, optional exact value and estimates
    /// (the estimates take the closed form's shape).
    pub fn new(
        name: &str,
        formula: Values,
        exact: Option<Vec<f64>>,
        estimates: &[Estimate],
    ) -> Self {
        let mc = formula.like(estimates.iter().map(|e| e.value).collect());
        let stderr = formula.like(estimates.iter().map(|e| e.stderr).collect());
        let exact = exact.map(|e| formula.like(e));
        EvalResult {
            name: name.to_string(),
            formula,
            exact,
            mc,
            stderr,
            sampler: SamplerKind::Generic,
            second_order: None,
            masks_to_resolve_first_order: None,
            warning: None,
        }
    }

    /// The same result with a warning line.
    pub fn with_warning(mut self, warning: impl Into<String>) -> Self {
        self.warning = Some(warning.into());
        self
    }

    /// The same result, marked as made by `sampler`.
    pub fn with_sampler(mut self, sampler: SamplerKind) -> Self {
        self.sampler = sampler;
        self
    }
}

/// The output of one `eval` quantity.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalOutput {
    pub quantity: &'static str,
    pub p: f64,
    pub d: usize,
    pub samples: u64,
    pub seed: u64,
    pub results: Vec<EvalResult>,
}

impl EvalOutput {
    /// Returns the output if every number in it is finite; an input whose
    /// powers overflow `f64` (for example `|x| ≈ 1e200` in `E[z⁴]`) is an
    /// error rather than a table of infinities or NaN.
    pub fn checked(self) -> Result<Self, crate::Error> {
        for r in &self.results {
            let mut all = r
                .formula
                .as_slice()
                .iter()
                .chain(r.mc.as_slice())
                .chain(r.stderr.as_slice());
            let exact = r.exact.as_ref().map_or(&[][..], |e| e.as_slice());
            if all.any(|v| !v.is_finite()) || exact.iter().any(|v| !v.is_finite()) {
                return Err(crate::Error::Overflow {
                    what: r.name.to_string(),
                });
            }
        }
        Ok(self)
    }
}

/// Renders an output as a readable table, one line per component.
pub fn table(output: &EvalOutput) -> String {
    let mut samplers: Vec<&str> = output.results.iter().map(|r| r.sampler.label()).collect();
    samplers.dedup();
    let mut out = format!(
        "{} at p = {}, d = {} ({} samples, seed {}, {} sampler)\n",
        output.quantity,
        output.p,
        output.d,
        output.samples,
        output.seed,
        samplers.join(" and ")
    );
    let header = [
        "quantity",
        "formula",
        "exact",
        "Monte Carlo ± SE",
        "second order",
    ];
    let mut rows: Vec<[String; 5]> = vec![header.map(String::from)];
    for r in &output.results {
        let formula = r.formula.as_slice();
        for (k, value) in formula.iter().enumerate() {
            let name = match r.formula {
                Values::Scalar(_) => r.name.clone(),
                Values::PerUnit(_) => format!("{}[{k}]", r.name),
            };
            let exact = r
                .exact
                .as_ref()
                .map_or("-".to_string(), |e| format_value(e.as_slice()[k]));
            rows.push([
                name,
                format_value(*value),
                exact,
                format_estimate(r.mc.as_slice()[k], r.stderr.as_slice()[k]),
                r.second_order
                    .as_ref()
                    .map_or(String::new(), |s| format_value(s.as_slice()[k])),
            ]);
        }
    }
    // The second-order column only where some quantity has one.
    let columns = if rows.iter().skip(1).any(|r| !r[4].is_empty()) {
        5
    } else {
        4
    };
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out.push_str(&second_order::guide_lines(output));
    for r in &output.results {
        if let Some(w) = &r.warning {
            out.push_str(&format!("warning ({}): {w}\n", r.name));
        }
    }
    out
}
