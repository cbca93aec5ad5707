//! Exact expectations of normalised outputs after a dropout [`Site`]: by
//! full enumeration of every mask, and by grouped enumeration of kept
//! counts (see [`super::grouped`]).
//!
//! Both use the crate's convention for a constant input (`LN(const) = β`,
//! `RMS(0) = 0`, the `ε → 0⁺` limit; see [`crate::ops::LayerNorm`]), so with
//! `ε = 0` the all-dropped mask (probability `p^d`) contributes `p^d β_k`
//! rather than an undefined `0/0`.

use crate::error::Error;
use crate::ops::adapters::rounding::{Precision, norm_bound};
use crate::ops::{LayerNorm, Normalization, RmsNorm, Site};
use crate::stats::tolerance;

use super::enumerate::enumerate_mask_bits;
use super::grouped::enumerate_counts;
use super::{MAX_ENUMERATION_D, Oracle};

/// What is applied to the site's output `y`.
#[derive(Debug, Clone, Copy)]
pub enum Pipeline<'a> {
    /// `LN(y)`.
    Ln(&'a LayerNorm),
    /// `RMS(y)`.
    Rms(&'a RmsNorm),
    /// `LN2(LN1(y))`.
    LnLn(&'a LayerNorm, &'a LayerNorm),
}

impl Pipeline<'_> {
    /// Number of units the pipeline expects.
    pub fn dim(&self) -> usize {
        match self {
            Pipeline::Ln(ln) => ln.dim(),
            Pipeline::Rms(rms) => rms.dim(),
            Pipeline::LnLn(ln1, _) => ln1.dim(),
        }
    }

    fn check(&self, d: usize) -> Result<(), Error> {
        let dims = match self {
            Pipeline::LnLn(a, b) => vec![a.dim(), b.dim()],
            other => vec![other.dim()],
        };
        match dims.iter().find(|&&n| n != d) {
            Some(&n) => Err(Error::LengthMismatch {
                what: "norm parameters",
                expected: d,
                got: n,
            }),
            None => Ok(()),
        }
    }

    /// Applies the pipeline to `y` (`tmp` is scratch of the same length).
    pub fn apply(&self, y: &[f64], tmp: &mut [f64], out: &mut [f64]) {
        match self {
            Pipeline::Ln(ln) => ln.forward_unchecked(y, out),
            Pipeline::Rms(rms) => rms.forward_unchecked(y, out),
            Pipeline::LnLn(ln1, ln2) => {
                ln1.forward_unchecked(y, tmp);
                ln2.forward_unchecked(tmp, out);
            }
        }
    }
}

/// `E[f(y)]` over every mask of every term of `site` (`J·d ≤` the full
/// enumeration limit), `f` writing `dim` values.
pub fn site_expectation<F>(site: &Site, dim: usize, mut f: F) -> Result<Oracle, Error>
where
    F: FnMut(&[f64], &mut [f64]),
{
    let d = site.dim();
    let j = site.terms().len();
    let bits = d * j;
    if bits > MAX_ENUMERATION_D {
        return Err(Error::TooLarge {
            what: "mask bits (terms × d) for full enumeration",
            limit: MAX_ENUMERATION_D,
            got: bits,
        });
    }
    // Bit t·d + k of a word is unit k of term t.
    let rates: Vec<_> = site
        .terms()
        .iter()
        .flat_map(|&(_, rate)| std::iter::repeat_n(rate, d))
        .collect();
    let mut y = vec![0.0; d];
    Ok(enumerate_mask_bits(&rates, dim, |mask, out| {
        let masks: Vec<&[bool]> = mask.chunks(d).collect();
        site.apply_masks(&masks, &mut y);
        f(&y, out);
    }))
}

/// `E[pipeline(y)]` per unit by full enumeration.
///
/// # Rounding bound (absolute and relative)
///
/// Per mask, the pipeline's own rounding is bounded component by component
/// with the computation's own row passed in, not as a multiple of the
/// output (which is invalid where the output is near zero by cancellation,
/// `β_k ≈ −γ_k u_k`, or where the row's mean dominates its spread):
///
/// ```text
/// standardized u_k:   |δu_k| ≤ b_k(y)          (adapters::rounding::norm_bound:
///                                               centring, variance, ε, 1/√ — first
///                                               order, doubled)
/// affine γ_k u_k + β_k: + γ_2 (|γ_k u_k| + |β_k|)   (one product, one sum)
/// output error_k ≤ |γ_k| b_k(y) + γ_2 (|γ_k u_k| + |β_k|)
/// ```
///
/// For `LN2 ∘ LN1` the first stage's error vector `e₁` enters the second
/// through the standardization's Jacobian `(I − 11ᵀ/d − u uᵀ/d)/s₂`, whose
/// spectral norm is at most `1/s₂`, so stage 2 adds `‖e₁‖₂ / s₂` to its own
/// `b_k(t)` on the LN1 output `t`. The oracle's bound is the weighted mean
/// of these per-mask bounds plus the enumeration's own.
pub fn site_pipeline(site: &Site, pipeline: Pipeline) -> Result<Oracle, Error> {
    let d = site.dim();
    pipeline.check(d)?;
    let (mut tmp, mut first, mut stage) = (vec![0.0; d], vec![0.0; d], vec![0.0; d]);
    let raw = site_expectation(site, 2 * d, |y, out| {
        let (value, bound) = out.split_at_mut(d);
        pipeline.apply(y, &mut tmp, value);
        match pipeline {
            Pipeline::Ln(ln) => affine_bound(
                Normalization::LayerNorm,
                y,
                ln.eps(),
                ln.gamma(),
                Some(ln.beta()),
                value,
                bound,
            ),
            Pipeline::Rms(rms) => affine_bound(
                Normalization::RmsNorm,
                y,
                rms.eps(),
                rms.gamma(),
                None,
                value,
                bound,
            ),
            Pipeline::LnLn(ln1, ln2) => {
                affine_bound(
                    Normalization::LayerNorm,
                    y,
                    ln1.eps(),
                    ln1.gamma(),
                    Some(ln1.beta()),
                    &tmp,
                    &mut first,
                );
                affine_bound(
                    Normalization::LayerNorm,
                    &tmp,
                    ln2.eps(),
                    ln2.gamma(),
                    Some(ln2.beta()),
                    value,
                    &mut stage,
                );
                let (_, v) = crate::formulas::mean_and_variance(&tmp);
                let s2 = (v + ln2.eps()).sqrt();
                let carried = if s2 > 0.0 {
                    first.iter().map(|e| e * e).sum::<f64>().sqrt() / s2
                } else {
                    0.0
                };
                for ((b, st), g) in bound.iter_mut().zip(&stage).zip(ln2.gamma()) {
                    *b = st + g.abs() * carried;
                }
            }
        }
    })?;
    let values = raw.values[..d].to_vec();
    let rounding = (0..d)
        .map(|k| raw.rounding[k] + raw.values[d + k] + raw.rounding[d + k])
        .collect();
    Ok(Oracle { values, rounding })
}

/// Per-component rounding bound of `γ_k u_k + β_k` computed from the row
/// `y` (see [`site_pipeline`]); `output` is the computed value.
fn affine_bound(
    centring: Normalization,
    y: &[f64],
    eps: f64,
    gamma: &[f64],
    beta: Option<&[f64]>,
    output: &[f64],
    bound: &mut [f64],
) {
    norm_bound(centring, Precision::F64, y, eps, bound);
    for (k, b) in bound.iter_mut().enumerate() {
        let shift = beta.map_or(0.0, |b| b[k]);
        *b = gamma[k].abs() * *b
            + tolerance::bound(2.0, (output[k] - shift).abs() + 2.0 * shift.abs());
    }
}

/// Interchangeable units: same `h`, `v` (and `γ1`, `β1` for `LN2∘LN1`).
struct Groups {
    /// Group of each unit.
    of: Vec<usize>,
    sizes: Vec<usize>,
    /// Kept and dropped value of `y` per group.
    kept: Vec<f64>,
    dropped: Vec<f64>,
    /// `γ1`, `β1` per group (`LN2∘LN1` only; 1 and 0 otherwise).
    gamma1: Vec<f64>,
    beta1: Vec<f64>,
}

fn groups(site: &Site, pipeline: Pipeline) -> Result<Groups, Error> {
    if site.terms().len() != 1 {
        return Err(Error::Unsupported {
            what: "the grouped oracle handles one dropped term".into(),
        });
    }
    let (v, rate) = &site.terms()[0];
    let mut keys: Vec<[f64; 4]> = Vec::new();
    let mut of = Vec::with_capacity(site.dim());
    for (k, (&h, &vk)) in site.h().iter().zip(v).enumerate() {
        let (g1, b1) = match pipeline {
            Pipeline::LnLn(ln1, _) => (ln1.gamma()[k], ln1.beta()[k]),
            _ => (1.0, 0.0),
        };
        let key = [h, vk, g1, b1];
        let g = match keys.iter().position(|c| *c == key) {
            Some(g) => g,
            None => {
                keys.push(key);
                keys.len() - 1
            }
        };
        of.push(g);
    }
    let mut sizes = vec![0; keys.len()];
    of.iter().for_each(|&g| sizes[g] += 1);
    Ok(Groups {
        of,
        sizes,
        kept: keys.iter().map(|c| c[0] + c[1] / rate.q()).collect(),
        dropped: keys.iter().map(|c| c[0]).collect(),
        gamma1: keys.iter().map(|c| c[2]).collect(),
        beta1: keys.iter().map(|c| c[3]).collect(),
    })
}

/// Standardises class values `(count, value)` in place: LayerNorm's
/// `(y − M)/sqrt(V + ε)`, with `0` for a constant input.
fn standardise(classes: &mut [(f64, f64)], d: f64, eps: f64) {
    let populated = || classes.iter().filter(|c| c.0 > 0.0);
    let first = populated().next().map_or(0.0, |c| c.1);
    if populated().all(|c| c.1 == first) {
        classes.iter_mut().for_each(|c| c.1 = 0.0);
        return;
    }
    let m = populated().map(|c| c.0 * c.1).sum::<f64>() / d;
    let v = populated()
        .map(|c| c.0 * (c.1 - m) * (c.1 - m))
        .sum::<f64>()
        / d;
    let inv = 1.0 / (v + eps).sqrt();
    classes.iter_mut().for_each(|c| c.1 = (c.1 - m) * inv);
}

fn rms_scale(classes: &mut [(f64, f64)], d: f64, eps: f64) {
    let r2 = classes.iter().map(|c| c.0 * c.1 * c.1).sum::<f64>() / d;
    let inv = if r2 + eps > 0.0 {
        1.0 / (r2 + eps).sqrt()
    } else {
        0.0
    };
    classes.iter_mut().for_each(|c| c.1 *= inv);
}

/// `E[pipeline(y)]` per unit by grouped enumeration of kept counts: exact at
/// any `d` when the units fall into few groups (one dropped term only).
///
/// The last norm's `γ`, `β` may differ unit by unit: `E[γ_k s_k + β_k] =
/// γ_k E[s_k] + β_k`, and `E[s_k]` depends only on the unit's group.
pub fn grouped_pipeline(site: &Site, pipeline: Pipeline) -> Result<Oracle, Error> {
    let d = site.dim();
    pipeline.check(d)?;
    let gr = groups(site, pipeline)?;
    let k = gr.sizes.len();
    let df = d as f64;
    let mut classes = vec![(0.0, 0.0); 2 * k];
    // |f| ≤ sqrt(d): a standardised entry (y_k − M)/sqrt(V) has square at
    // most d − 1 (the other d − 1 deviations sum to its negative), and an
    // RMS-scaled entry y_k/R has square at most d.
    let sup_f = df.sqrt();
    let raw = enumerate_counts(&gr.sizes, site.terms()[0].1, k, sup_f, |counts, out| {
        for g in 0..k {
            classes[2 * g] = (counts[g] as f64, gr.kept[g]);
            classes[2 * g + 1] = ((gr.sizes[g] - counts[g]) as f64, gr.dropped[g]);
        }
        match pipeline {
            Pipeline::Ln(ln) => standardise(&mut classes, df, ln.eps()),
            Pipeline::Rms(rms) => rms_scale(&mut classes, df, rms.eps()),
            Pipeline::LnLn(ln1, ln2) => {
                standardise(&mut classes, df, ln1.eps());
                for g in 0..k {
                    for c in &mut classes[2 * g..2 * g + 2] {
                        c.1 = gr.gamma1[g] * c.1 + gr.beta1[g];
                    }
                }
                standardise(&mut classes, df, ln2.eps());
            }
        }
        for (g, o) in out.iter_mut().enumerate() {
            let share = counts[g] as f64 / gr.sizes[g] as f64;
            *o = share * classes[2 * g].1 + (1.0 - share) * classes[2 * g + 1].1;
        }
    })?;
    // Per-evaluation rounding of the class arithmetic: two reductions over
    // 2K classes and a few operations, per norm.
    let stages = if matches!(pipeline, Pipeline::LnLn(..)) {
        2.0
    } else {
        1.0
    };
    let per_eval = stages * tolerance::gamma_upper(tolerance::class_norm_roundings(k));
    let (gamma, beta): (&[f64], Option<&[f64]>) = match pipeline {
        Pipeline::Ln(ln) => (ln.gamma(), Some(ln.beta())),
        Pipeline::Rms(rms) => (rms.gamma(), None),
        Pipeline::LnLn(_, ln2) => (ln2.gamma(), Some(ln2.beta())),
    };
    let mut values = Vec::with_capacity(d);
    let mut rounding = Vec::with_capacity(d);
    for unit in 0..d {
        let g = gr.of[unit];
        let s = raw.values[g];
        // raw.rounding[g] ≥ ε Σ w |f| (an enumeration counts at least one
        // rounding), so the class arithmetic's rounding, per_eval · Σ w |f|,
        // is at most (per_eval / ε) · raw.rounding[g].
        let r = raw.rounding[g] * (1.0 + per_eval / tolerance::gamma_upper(1.0));
        let b = beta.map_or(0.0, |b| b[unit]);
        let value = gamma[unit] * s + b;
        values.push(value);
        rounding.push(
            gamma[unit].abs() * r
                + tolerance::gamma_upper(tolerance::AFFINE_ROUNDINGS) * value.abs(),
        );
    }
    Ok(Oracle { values, rounding })
}
