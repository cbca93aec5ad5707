//! Exact expectations over every mask of a linear path
//! ([`crate::formulas::linear_path`]): each mask word runs the path's
//! forward (the source's dropout, the mat-vecs, the adds, the further
//! dropouts) and the expectation weighs it by `Π_b q_b^{m_b} p_b^{1−m_b}`.
//! Nothing of the closed forms' rules is used: the oracle sees only the
//! forward, so a wrong covariance rule cannot agree with it by
//! construction.
//!
//! # Rounding of one forward
//!
//! Along the path each computed entry is a sum of products; by Higham's
//! bound for a matrix product (`|fl(AB) − AB| ≤ γ_n |A||B|`, composed op by
//! op), the computed `ŷ` satisfies `|ŷ_k − y_k| ≤ γ_n ŷabs_k`, where
//! `ŷabs` is the same forward run on absolute values (`|u|`, `|a|`, `|v|`,
//! `|W|`, `|b|`, `|h|`) and `n` = [`forward_roundings`]: per op, the
//! length of its sums plus its products (source: a division and, for
//! attention, `T` products summed; `Linear`: `m` products and sums plus
//! the bias; `Add` and `Dropout`: one). The same count bounds the closed
//! form's rules (each a product of at most that many factors summed over
//! at most that many terms per op, twice for the two sides of `W Σ Wᵀ`),
//! charged as `2n`.

use nalgebra::DVector;

use super::Oracle;
use super::enumerate::enumerate_mask_bits;
use crate::error::Error;
use crate::formulas::linear_path::{Head, Path, Source, Step};
use crate::ops::Rate;

/// The rate of every mask bit of the path, source first, then each further
/// dropout's (one bit per unit it sees).
pub fn mask_rates(path: &Path) -> Result<Vec<Rate>, Error> {
    path.validate()?;
    let mut rates = match &path.source {
        Source::Dropped { u, rate } => vec![*rate; u.len()],
        Source::Attention { heads, rate } => vec![*rate; heads.iter().map(|h| h.a.len()).sum()],
    };
    let mut width = path.source.width();
    for step in &path.steps {
        match step {
            Step::Linear { w, .. } => width = w.nrows(),
            Step::Add(_) => {}
            Step::Dropout(rate) => rates.extend(std::iter::repeat_n(*rate, width)),
        }
    }
    Ok(rates)
}

/// `n` of the module docs: the roundings one forward (or one rule of the
/// closed form) makes along the path, per entry.
pub fn forward_roundings(path: &Path) -> f64 {
    let source = match &path.source {
        Source::Dropped { .. } => 3,
        Source::Attention { heads, .. } => {
            3 + heads.iter().map(|h| 2 * h.a.len()).max().unwrap_or(0)
        }
    };
    let steps: usize = path
        .steps
        .iter()
        .map(|s| match s {
            Step::Linear { w, .. } => 2 * w.ncols() + 2,
            Step::Add(_) | Step::Dropout(_) => 3,
        })
        .sum();
    (source + steps) as f64
}

/// The forward of one mask (`mask` laid out as [`mask_rates`]).
pub fn forward(path: &Path, mask: &[bool]) -> DVector<f64> {
    let mut bit = 0;
    let mut x = match &path.source {
        Source::Dropped { u, rate } => {
            bit = u.len();
            DVector::from_fn(u.len(), |j, _| if mask[j] { u[j] / rate.q() } else { 0.0 })
        }
        Source::Attention { heads, rate } => {
            let mut out = Vec::with_capacity(path.source.width());
            for head in heads {
                let mut o = DVector::zeros(head.v.ncols());
                for (s, &a) in head.a.iter().enumerate() {
                    if mask[bit + s] {
                        o.axpy(a / rate.q(), &head.v.row(s).transpose(), 1.0);
                    }
                }
                bit += head.a.len();
                out.extend(o.iter().copied());
            }
            DVector::from_vec(out)
        }
    };
    for step in &path.steps {
        x = match step {
            Step::Linear { w, b } => w * &x + b,
            Step::Add(h) => &x + h,
            Step::Dropout(rate) => {
                let n = x.len();
                let y =
                    DVector::from_fn(n, |k, _| if mask[bit + k] { x[k] / rate.q() } else { 0.0 });
                bit += n;
                y
            }
        };
    }
    x
}

/// The same path on absolute values (`|u|`, `|a|`, `|v|`, `|W|`, `|b|`,
/// `|h|`): its forward is `ŷabs`, its closed-form moments bound the
/// magnitude of every term the closed form sums.
pub fn absolute(path: &Path) -> Path {
    Path {
        source: match &path.source {
            Source::Dropped { u, rate } => Source::Dropped {
                u: u.iter().map(|x| x.abs()).collect(),
                rate: *rate,
            },
            Source::Attention { heads, rate } => Source::Attention {
                heads: heads
                    .iter()
                    .map(|h| Head {
                        a: h.a.iter().map(|x| x.abs()).collect(),
                        v: h.v.abs(),
                    })
                    .collect(),
                rate: *rate,
            },
        },
        steps: path
            .steps
            .iter()
            .map(|s| match s {
                Step::Linear { w, b } => Step::Linear {
                    w: w.abs(),
                    b: b.abs(),
                },
                Step::Add(h) => Step::Add(h.abs()),
                Step::Dropout(rate) => Step::Dropout(*rate),
            })
            .collect(),
    }
}

/// `E f(y, ŷabs)` over every mask of the path, `f` writing `dim` values.
pub fn path_expectation(
    path: &Path,
    dim: usize,
    mut f: impl FnMut(&DVector<f64>, &DVector<f64>, &mut [f64]),
) -> Result<Oracle, Error> {
    let rates = mask_rates(path)?;
    if rates.len() > super::MAX_ENUMERATION_D {
        return Err(Error::TooLarge {
            what: "mask bits of the path for full enumeration",
            limit: super::MAX_ENUMERATION_D,
            got: rates.len(),
        });
    }
    let abs = absolute(path);
    Ok(enumerate_mask_bits(&rates, dim, |mask, out| {
        f(&forward(path, mask), &forward(&abs, mask), out)
    }))
}

/// The eval forward `ȳ` (every bit kept at `q = 1`: every mask kept, no
/// scaling) and its absolute twin.
pub fn eval_forward(path: &Path) -> Result<(DVector<f64>, DVector<f64>), Error> {
    let kept = vec![true; mask_rates(path)?.len()];
    let unit = path_free_of_scaling(path);
    Ok((forward(&unit, &kept), forward(&absolute(&unit), &kept)))
}

/// The same path with every rate 0 (so `1/q = 1`): its all-kept forward is
/// the eval forward.
fn path_free_of_scaling(path: &Path) -> Path {
    let none = Rate::new(0.0).expect("0 is a rate");
    Path {
        source: match &path.source {
            Source::Dropped { u, .. } => Source::Dropped {
                u: u.clone(),
                rate: none,
            },
            Source::Attention { heads, .. } => Source::Attention {
                heads: heads.clone(),
                rate: none,
            },
        },
        steps: path
            .steps
            .iter()
            .map(|s| match s {
                Step::Dropout(_) => Step::Dropout(none),
                other => other.clone(),
            })
            .collect(),
    }
}
