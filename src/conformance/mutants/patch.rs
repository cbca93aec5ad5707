//! How a mutant differs from the reference: a [`Deviation`] (data), and the
//! one layer [`Deviant`] that runs the reference with that deviation
//! patched in. Every part a deviation does not name is the reference
//! [`InvertedDropout`]'s, call for call.
//! A test outside the crate that needs a one-off wrong layer (a deviation
//! not in the gallery) builds a [`Deviant`] from a [`Deviation`] too.

use std::sync::atomic::{AtomicU64, Ordering};

use rand::{Rng, RngExt};

use crate::error::Error;
use crate::ops::{
    BackwardPass, BlockPass, DropoutLayer, EvalPass, InvertedDropout, MaskShape, Rate, TrainPass,
    default_positions, keep_and_scale, scale_kept_gradients,
};

/// The reference, for the parts a mutant leaves alone.
const REFERENCE: InvertedDropout = InvertedDropout;

/// Which units a training pass keeps, from `u ~ U[0, 1)` per unit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Keep {
    /// `u >= p`: the reference rule, `P(keep) = q`.
    AtLeastP,
    /// `u > p`: differs from the reference only at `u = p` exactly.
    AboveP,
    /// `u < p`: the complement of the reference mask, `P(keep) = p`.
    BelowP,
    /// `u >= 1 − f·q`: keeps with probability `f·q` instead of `q`.
    ScaledKeep(f64),
}

impl Keep {
    fn keeps(self, u: f64, rate: Rate) -> bool {
        match self {
            Keep::AtLeastP => u >= rate.p(),
            Keep::AboveP => u > rate.p(),
            Keep::BelowP => u < rate.p(),
            Keep::ScaledKeep(f) => u >= 1.0 - f * rate.q(),
        }
    }
}

/// What a kept unit's value (or gradient) `v` becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// `v / q`: the reference.
    DivideByQ,
    /// `v · fl(1/q)`: the other standard rounding of a survivor (most
    /// frameworks multiply by a precomputed reciprocal).
    TimesReciprocalQ,
    /// `v / q` moved this many units in the last place away from zero (a
    /// non-finite or zero quotient left as is).
    UlpsAwayFromQuotient(u64),
    /// `v / p`.
    DivideByP,
    /// `v · q`.
    MultiplyByQ,
    /// `v`, no scale.
    Unscaled,
}

impl Scale {
    fn apply(self, v: f64, rate: Rate) -> f64 {
        match self {
            Scale::DivideByQ => v / rate.q(),
            Scale::TimesReciprocalQ => v * (1.0 / rate.q()),
            Scale::UlpsAwayFromQuotient(ulps) => {
                let z = v / rate.q();
                if z.is_finite() && z != 0.0 {
                    f64::from_bits(z.to_bits() + ulps)
                } else {
                    z
                }
            }
            Scale::DivideByP => v / rate.p(),
            Scale::MultiplyByQ => v * rate.q(),
            Scale::Unscaled => v,
        }
    }
}

/// The one place a mutant departs from the reference.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Deviation {
    /// Training keeps by `keep` and writes `survivor` for a kept unit; the
    /// backward pass writes `gradient` for a kept unit's gradient. The
    /// reference is `{ AtLeastP, DivideByQ, DivideByQ }`.
    Scaling {
        keep: Keep,
        survivor: Scale,
        gradient: Scale,
    },
    /// Training masks without scaling, then divides every unit, dropped
    /// ones included, by `q`.
    RescaleDropped,
    /// Evaluation returns `q·x`.
    EvalScalesByQ,
    /// Evaluation draws one `u64` before returning `x`.
    EvalDraws,
    /// Evaluation runs the training pass.
    EvalMasks,
    /// The backward pass ignores the given mask and draws its own.
    BackwardFreshMask,
    /// Attention rows: the training pass, then the survivors renormalised to
    /// sum to one.
    AttentionRenormalised,
    /// Attention rows: the training pass on the logits `ln a`, then a
    /// softmax.
    AttentionLogits,
    /// `T × d` blocks always get this mask shape, whatever is asked.
    ForcedShape(MaskShape),
    /// Training draws one mask per input length from its own fixed stream
    /// and reuses it on every call of that length, ignoring the generator
    /// it is given (a mask cached per shape; a generator re-seeded alike on
    /// each call).
    MaskPerShape,
}

/// The seed of [`Deviation::MaskPerShape`]'s own stream (its index is the
/// input's length).
const MASK_PER_SHAPE_SEED: u64 = 0x5a9e_5eed;

/// The reference with one [`Deviation`] patched in: the layer of a gallery
/// mutant.
#[derive(Debug, Clone, Copy)]
pub struct Deviant {
    /// The layer's name (the mutant's id).
    pub name: &'static str,
    pub deviation: Deviation,
}

/// Counts [`Deviation::BackwardFreshMask`] calls: each seeds its own fresh
/// mask.
static FRESH_MASK_CALLS: AtomicU64 = AtomicU64::new(0);

/// Softmax of `logits` into `out`, shifted by the maximum.
fn softmax(logits: &[f64], out: &mut [f64]) {
    let top = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let total: f64 = logits.iter().map(|l| (l - top).exp()).sum();
    for (o, l) in out.iter_mut().zip(logits) {
        *o = (l - top).exp() / total;
    }
}

impl DropoutLayer for Deviant {
    fn name(&self) -> &str {
        self.name
    }

    fn forward_train(&self, pass: TrainPass<'_>, p: f64, rng: &mut dyn Rng) -> Result<(), Error> {
        let (keep, survivor) = match self.deviation {
            Deviation::Scaling { keep, survivor, .. } => (keep, survivor),
            Deviation::RescaleDropped => (Keep::AtLeastP, Scale::Unscaled),
            Deviation::MaskPerShape => {
                let mut own = crate::engine::stream(MASK_PER_SHAPE_SEED, pass.x.len() as u64);
                return REFERENCE.forward_train(pass, p, &mut own);
            }
            _ => return REFERENCE.forward_train(pass, p, rng),
        };
        let TrainPass { x, out, mask } = pass;
        let kept = |rng: &mut dyn Rng, rate| keep.keeps(rng.random::<f64>(), rate);
        let scaled = |v, rate| survivor.apply(v, rate);
        keep_and_scale(TrainPass::new(x, out, mask), p, rng, kept, scaled)?;
        if self.deviation == Deviation::RescaleDropped {
            let q = 1.0 - p;
            out.iter_mut().for_each(|o| *o /= q);
        }
        Ok(())
    }

    fn forward_eval(&self, pass: EvalPass<'_>, p: f64, rng: &mut dyn Rng) -> Result<(), Error> {
        match self.deviation {
            Deviation::EvalScalesByQ => {
                let rate = Rate::new(p)?;
                pass.check_lengths()?;
                for (o, v) in pass.out.iter_mut().zip(pass.x) {
                    *o = v * rate.q();
                }
                Ok(())
            }
            Deviation::EvalDraws => {
                let _ = rng.next_u64();
                REFERENCE.forward_eval(pass, p, rng)
            }
            Deviation::EvalMasks => {
                let mut mask = vec![false; pass.x.len()];
                REFERENCE.forward_train(TrainPass::new(pass.x, pass.out, &mut mask), p, rng)
            }
            _ => REFERENCE.forward_eval(pass, p, rng),
        }
    }

    fn backward(&self, pass: BackwardPass<'_>, p: f64) -> Result<(), Error> {
        match self.deviation {
            Deviation::Scaling { gradient, .. } => {
                scale_kept_gradients(pass, p, |g, rate| gradient.apply(g, rate))
            }
            Deviation::BackwardFreshMask => {
                let call = FRESH_MASK_CALLS.fetch_add(1, Ordering::Relaxed);
                let mut own = crate::engine::stream(0x5eed, call);
                let fresh: Vec<bool> = pass
                    .grad_out
                    .iter()
                    .map(|_| crate::engine::keep(&mut own, p))
                    .collect();
                REFERENCE.backward(BackwardPass::new(pass.grad_out, &fresh, pass.grad_in), p)
            }
            _ => REFERENCE.backward(pass, p),
        }
    }

    fn forward_attention(&self, a: TrainPass<'_>, p: f64, rng: &mut dyn Rng) -> Result<(), Error> {
        let TrainPass { x, out, mask } = a;
        match self.deviation {
            Deviation::AttentionRenormalised => {
                REFERENCE.forward_train(TrainPass::new(x, out, mask), p, rng)?;
                let total: f64 = out.iter().sum();
                if total > 0.0 {
                    out.iter_mut().for_each(|o| *o /= total);
                }
                Ok(())
            }
            Deviation::AttentionLogits => {
                // Logits whose softmax is `a`, dropped, then normalised.
                let logits: Vec<f64> = x.iter().map(|v| v.ln()).collect();
                let mut dropped = vec![0.0; x.len()];
                REFERENCE.forward_train(TrainPass::new(&logits, &mut dropped, mask), p, rng)?;
                softmax(&dropped, out);
                Ok(())
            }
            _ => self.forward_train(TrainPass::new(x, out, mask), p, rng),
        }
    }

    fn forward_positions(&self, b: BlockPass<'_>, p: f64, rng: &mut dyn Rng) -> Result<(), Error> {
        match self.deviation {
            Deviation::ForcedShape(forced) => {
                default_positions(&REFERENCE, b.with_shape(forced), p, rng)
            }
            _ => default_positions(self, b, p, rng),
        }
    }
}
