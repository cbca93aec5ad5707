//! Graded perturbations of the reference dropout, for measuring power: how
//! small a deviation from the correct layer does the suite still catch?

use rand::Rng;

use crate::engine::keep;
use crate::error::Error;
use crate::ops::{
    BackwardPass, DropoutLayer, EvalPass, InvertedDropout, TrainPass, keep_and_scale,
};

/// A graded deviation of the training pass, of relative size `relative`
/// (0.01 is 1 %); evaluation and backward stay the reference's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Perturbation {
    /// Drops at `p' = p (1 + relative)` but still rescales by the nominal
    /// `1/q`, so `E[z] = x (1 − p · relative / q)`: a drop rate off by
    /// `relative`.
    RateOff { relative: f64 },
    /// Correct masks, but every training output multiplied by
    /// `1 + relative`: a mean shifted by `relative`.
    MeanShift { relative: f64 },
}

/// The reference with a [`Perturbation`] in its training pass.
#[derive(Debug, Clone)]
pub struct Perturbed {
    pub perturbation: Perturbation,
    name: String,
}

impl Perturbed {
    /// The reference perturbed by `perturbation`, named after it.
    pub fn new(perturbation: Perturbation) -> Self {
        let name = match perturbation {
            Perturbation::RateOff { relative } => {
                format!("drop rate off by {:+}%", 100.0 * relative)
            }
            Perturbation::MeanShift { relative } => {
                format!("mean shifted by {:+}%", 100.0 * relative)
            }
        };
        Perturbed { perturbation, name }
    }
}

impl DropoutLayer for Perturbed {
    fn name(&self) -> &str {
        &self.name
    }

    fn forward_train(&self, pass: TrainPass<'_>, p: f64, rng: &mut dyn Rng) -> Result<(), Error> {
        match self.perturbation {
            Perturbation::RateOff { relative } => {
                let actual = (p * (1.0 + relative)).clamp(0.0, 1.0);
                keep_and_scale(pass, p, rng, |rng, _| keep(rng, actual), |v, r| v / r.q())
            }
            Perturbation::MeanShift { relative } => {
                let TrainPass { x, out, mask } = pass;
                InvertedDropout.forward_train(TrainPass::new(x, out, mask), p, rng)?;
                out.iter_mut().for_each(|o| *o *= 1.0 + relative);
                Ok(())
            }
        }
    }

    fn forward_eval(&self, pass: EvalPass<'_>, p: f64, rng: &mut dyn Rng) -> Result<(), Error> {
        InvertedDropout.forward_eval(pass, p, rng)
    }

    fn backward(&self, pass: BackwardPass<'_>, p: f64) -> Result<(), Error> {
        InvertedDropout.backward(pass, p)
    }
}

/// The graded perturbations `dropmc power` measures: drop rate off by
/// 0.5, 1, 2 and 5 %, mean shifted by 0.1 and 1 %.
pub fn graded() -> Vec<Box<dyn DropoutLayer>> {
    let rate_off = [0.005, 0.01, 0.02, 0.05].map(|relative| Perturbation::RateOff { relative });
    let mean_shift = [0.001, 0.01].map(|relative| Perturbation::MeanShift { relative });
    rate_off
        .into_iter()
        .chain(mean_shift)
        .map(|p| Box::new(Perturbed::new(p)) as Box<dyn DropoutLayer>)
        .collect()
}
