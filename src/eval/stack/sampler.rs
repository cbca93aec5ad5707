//! The experiment as an engine [`Sampler`]: one draw is one random network
//! measured at every rate, written as rows ([`LayerRow`] per layer, then a
//! [`RateRow`], rate after rate) in their column order.

use rand::Rng;
use rayon::prelude::*;

use super::config::StackConfig;
use super::network::random_net;
use super::replicate::replicate_on;
use super::rows::{LayerRow, RateRow};
use crate::engine::{Sampler, Stream};
use crate::error::{Error, check_len};
use crate::ops::Subject;

/// Values one rate contributes to a draw: `depth` layer rows and a rate row.
pub(super) fn per_rate(depth: usize) -> usize {
    depth * LayerRow::<f64>::FIELDS.len() + RateRow::<f64>::FIELDS.len()
}

pub(super) struct StackSampler<'a> {
    pub(super) cfg: StackConfig,
    /// Ascending, the first `0` (the null).
    pub(super) rates: Vec<f64>,
    pub(super) subject: &'a Subject<'a>,
}

impl Sampler for StackSampler<'_> {
    type Scratch = ();
    fn dim(&self) -> usize {
        self.rates.len() * per_rate(self.cfg.depth)
    }
    fn scratch(&self) {}
    fn draw(&self, rng: &mut Stream, _: &mut (), out: &mut [f64]) -> Result<(), Error> {
        let net = random_net(&self.cfg, rng)?;
        // One sub-stream per rate, seeded from this draw's stream, so the
        // rates can run in parallel with a thread-independent result.
        let seeds: Vec<u64> = self.rates.iter().map(|_| rng.next_u64()).collect();
        let reps = self
            .rates
            .par_iter()
            .zip(&seeds)
            .map(|(&p, &seed)| {
                let mut sub = crate::engine::stream(seed, 0);
                replicate_on(&net, &self.cfg, self.subject, p, &mut sub)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let null = &reps[0];
        let values: Vec<f64> = reps
            .iter()
            .enumerate()
            .flat_map(|(i, rep)| {
                let previous = i.checked_sub(1).map(|j| &reps[j]);
                (0..self.cfg.depth)
                    .flat_map(move |l| LayerRow::measure(rep, previous, null, l).values())
                    .chain(RateRow::measure(rep).values())
            })
            .collect();
        check_len("stack draw (rates × row values)", &values, out.len())?;
        out.copy_from_slice(&values);
        Ok(())
    }
}
