//! `eval attn`: attention dropout on the user's row — `E[b]`, `E[R]`,
//! `Var[R]`, and with values `E[o]`, `Var[o]`. Derivations:
//! [`crate::formulas::attention`].

use super::{EvalOutput, EvalResult, Values};
use crate::claims::fn_claim::half_sq;
use crate::engine::{Budget, Sampler, Stream, estimate};
use crate::error::{Error, check_finite_vec, check_len};
use crate::exact::{MAX_ENUMERATION_D, enumerate_masks};
use crate::formulas::attention as f;
use crate::ops::{DropoutLayer, InvertedDropout, Rate};

/// How far `Σ a` may sit from 1: the precision of a typed-in row (values
/// typed to about nine digits), not a statistical tolerance.
pub const ROW_SUM_SLACK: f64 = 1e-9;

struct AttnSampler<'a> {
    a: &'a [f64],
    v: &'a [f64],
    p: f64,
}

impl AttnSampler<'_> {
    fn pass(&self, rng: &mut Stream, b: &mut [f64], m: &mut [bool]) -> Result<(f64, f64), Error> {
        InvertedDropout.forward_attention(self.a, self.p, rng, b, m)?;
        Ok((b.iter().sum(), f::output_mean(b, self.v)))
    }
}

impl Sampler for AttnSampler<'_> {
    type Scratch = (Vec<f64>, Vec<bool>);
    fn dim(&self) -> usize {
        self.a.len() + 4
    }
    fn scratch(&self) -> Self::Scratch {
        (vec![0.0; self.a.len()], vec![false; self.a.len()])
    }
    fn draw(&self, rng: &mut Stream, s: &mut Self::Scratch, out: &mut [f64]) -> Result<(), Error> {
        let d = self.a.len();
        let (r1, o1) = self.pass(rng, &mut s.0, &mut s.1)?;
        out[..d].copy_from_slice(&s.0);
        let (r2, o2) = self.pass(rng, &mut s.0, &mut s.1)?;
        out[d] = r1;
        out[d + 1] = half_sq(r1, r2);
        out[d + 2] = o1;
        out[d + 3] = half_sq(o1, o2);
        Ok(())
    }
}

/// Evaluates attention dropout on the probability row `a` at rate `p`;
/// `values` (one per position) adds the output `o = Σ b_i v_i`.
///
/// `exact` enumerates every mask when `d <= 22`, else is `null`.
pub fn attn(
    a: &[f64],
    p: f64,
    values: Option<&[f64]>,
    budget: Budget,
) -> Result<EvalOutput, Error> {
    check_finite_vec("a", a)?;
    let rate = Rate::new(p)?;
    let budget = Budget::new(budget.samples, budget.seed)?;
    if let Some(i) = a.iter().position(|v| *v < 0.0) {
        return Err(Error::Degenerate {
            what: format!("a[{i}] = {} is negative; a must be a probability row", a[i]),
        });
    }
    let total: f64 = a.iter().sum();
    if (total - 1.0).abs() > ROW_SUM_SLACK {
        return Err(Error::Degenerate {
            what: format!("a sums to {total}, not 1; a must be a probability row"),
        });
    }
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
    let est = estimate(&AttnSampler { a, v, p }, budget)?.estimates();
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
        Some((
            x[..d].to_vec(),
            x[d],
            x[d + 1] - x[d] * x[d],
            x[d + 2],
            x[d + 3] - x[d + 2] * x[d + 2],
        ))
    } else {
        None
    };
    let mut results = vec![
        EvalResult::new(
            "E[b]",
            Values::PerUnit(f::entry_mean(a)),
            exact.as_ref().map(|e| e.0.clone()),
            &est[..d],
        ),
        EvalResult::new(
            "E[R]",
            Values::Scalar(f::row_sum_mean(a)),
            exact.as_ref().map(|e| vec![e.1]),
            &est[d..d + 1],
        ),
        EvalResult::new(
            "Var[R]",
            Values::Scalar(f::row_sum_variance(a, rate)),
            exact.as_ref().map(|e| vec![e.2]),
            &est[d + 1..d + 2],
        ),
    ];
    if values.is_some() {
        results.push(EvalResult::new(
            "E[o]",
            Values::Scalar(f::output_mean(a, v)),
            exact.as_ref().map(|e| vec![e.3]),
            &est[d + 2..d + 3],
        ));
        results.push(EvalResult::new(
            "Var[o]",
            Values::Scalar(f::output_variance(a, v, rate)),
            exact.as_ref().map(|e| vec![e.4]),
            &est[d + 3..],
        ));
    }
    EvalOutput {
        quantity: "attn",
        p,
        d,
        samples: budget.samples,
        seed: budget.seed,
        results,
    }
    .checked()
}
