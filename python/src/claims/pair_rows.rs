//! Two independent training passes of the Python layer per draw, for the
//! claims that state a moment of one row and a variance as the half squared
//! difference of two rows (the attention and mask-shape claims).

use dropmc::Error;
use dropmc::engine::{Sampler, Stream};
use dropmc::ops::{DropoutLayer, TrainPass};

/// A draw statistic of the two rows `(z, z')` (`z'` is all zeros when the
/// sampler runs one pass).
pub type PairStatistic<'s> = &'s (dyn Fn(&[f64], &[f64], &mut [f64]) + Sync);

/// One or two training passes of `layer` on `x` per draw, then `statistic`.
pub struct PairRows<'a> {
    pub layer: &'a dyn DropoutLayer,
    pub x: &'a [f64],
    pub p: f64,
    pub dim: usize,
    /// Whether the statistic reads the second row.
    pub pairs: bool,
    pub statistic: PairStatistic<'a>,
}

/// Working rows of [`PairRows`].
pub struct PairScratch {
    z: Vec<f64>,
    z_alt: Vec<f64>,
    mask: Vec<bool>,
}

impl Sampler for PairRows<'_> {
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
        }
    }
    fn draw(&self, rng: &mut Stream, s: &mut PairScratch, out: &mut [f64]) -> Result<(), Error> {
        self.layer
            .forward_train(TrainPass::new(self.x, &mut s.z, &mut s.mask), self.p, rng)?;
        if self.pairs {
            self.layer.forward_train(
                TrainPass::new(self.x, &mut s.z_alt, &mut s.mask),
                self.p,
                rng,
            )?;
        }
        (self.statistic)(&s.z, &s.z_alt, out);
        Ok(())
    }
}
