//! The sampler of the family on an implementation under test: one or two
//! independent training passes of the subject's layer per draw, reduced to
//! a claim's per-draw statistic.

use crate::engine::{Sampler, Stream};
use crate::error::Error;
use crate::ops::{DropoutLayer, TrainPass};

/// One sample: two independent training passes over `x`.
pub struct Draw<'a> {
    pub x: &'a [f64],
    pub z: &'a [f64],
    pub z_alt: &'a [f64],
    pub mask: &'a [bool],
}

/// A draw statistic of the passes of [`PairSampler`].
pub type DrawStatistic<'s> = &'s (dyn Fn(&Draw, &mut [f64]) + Sync);

/// Draws one training pass of `layer` on `x` per sample, or two independent
/// ones when `pairs` (`z'` stays all zeros otherwise), then `statistic`:
/// the sampler of every claim that states a moment of one row or a variance
/// as the half squared difference of two rows (the dropout family here, the
/// Python layer's moment, attention and mask-shape claims).
pub struct PairSampler<'a> {
    pub layer: &'a dyn DropoutLayer,
    pub x: &'a [f64],
    pub p: f64,
    pub dim: usize,
    /// Whether the statistic reads the second pass.
    pub pairs: bool,
    pub statistic: DrawStatistic<'a>,
}

/// Working buffers of [`PairSampler`].
pub struct PairScratch {
    z: Vec<f64>,
    z_alt: Vec<f64>,
    mask: Vec<bool>,
    mask_alt: Vec<bool>,
}

impl Sampler for PairSampler<'_> {
    type Scratch = PairScratch;
    fn dim(&self) -> usize {
        self.dim
    }
    fn scratch(&self) -> PairScratch {
        let d = self.x.len();
        PairScratch {
            z: vec![0.0; d],
            z_alt: vec![0.0; d],
            mask: vec![false; d],
            mask_alt: vec![false; d],
        }
    }
    fn draw(&self, rng: &mut Stream, s: &mut PairScratch, out: &mut [f64]) -> Result<(), Error> {
        let layer = self.layer;
        layer.forward_train(TrainPass::new(self.x, &mut s.z, &mut s.mask), self.p, rng)?;
        if self.pairs {
            layer.forward_train(
                TrainPass::new(self.x, &mut s.z_alt, &mut s.mask_alt),
                self.p,
                rng,
            )?;
        }
        let draw = Draw {
            x: self.x,
            z: &s.z,
            z_alt: &s.z_alt,
            mask: &s.mask,
        };
        (self.statistic)(&draw, out);
        Ok(())
    }
}
