//! Graded perturbations of the reference dropout, for measuring power: how
//! small a deviation from the correct layer does the suite still catch?

use rand::Rng;

use crate::engine::keep;
use crate::error::Error;
use crate::ops::{DropoutLayer, InvertedDropout, Rate};

/// Drops at `p' = p (1 + relative)` but still rescales by the nominal `1/q`,
/// so `E[z] = x (1 − p · relative / q)`: a drop rate off by `relative`.
#[derive(Debug, Clone)]
pub struct RateOff {
    pub relative: f64,
    name: String,
}

impl RateOff {
    /// A drop rate off by the fraction `relative` (0.01 is 1 %).
    pub fn new(relative: f64) -> Self {
        RateOff {
            relative,
            name: format!("drop rate off by {:+}%", 100.0 * relative),
        }
    }
}

impl DropoutLayer for RateOff {
    fn name(&self) -> &str {
        &self.name
    }
    fn forward_train(
        &self,
        x: &[f64],
        p: f64,
        rng: &mut dyn Rng,
        out: &mut [f64],
        mask: &mut [bool],
    ) -> Result<(), Error> {
        let rate = Rate::new(p)?;
        let actual = (p * (1.0 + self.relative)).clamp(0.0, 1.0);
        for ((o, m), &v) in out.iter_mut().zip(mask.iter_mut()).zip(x) {
            *m = keep(rng, actual);
            *o = if *m { v / rate.q() } else { 0.0 };
        }
        Ok(())
    }
    fn forward_eval(
        &self,
        x: &[f64],
        p: f64,
        rng: &mut dyn Rng,
        out: &mut [f64],
    ) -> Result<(), Error> {
        InvertedDropout.forward_eval(x, p, rng, out)
    }
    fn backward(&self, g: &[f64], p: f64, mask: &[bool], gi: &mut [f64]) -> Result<(), Error> {
        InvertedDropout.backward(g, p, mask, gi)
    }
}

/// Correct masks, but every training output multiplied by `1 + relative`:
/// a mean shifted by `relative`.
#[derive(Debug, Clone)]
pub struct MeanShift {
    pub relative: f64,
    name: String,
}

impl MeanShift {
    /// A mean shifted by the fraction `relative` (0.001 is 0.1 %).
    pub fn new(relative: f64) -> Self {
        MeanShift {
            relative,
            name: format!("mean shifted by {:+}%", 100.0 * relative),
        }
    }
}

impl DropoutLayer for MeanShift {
    fn name(&self) -> &str {
        &self.name
    }
    fn forward_train(
        &self,
        x: &[f64],
        p: f64,
        rng: &mut dyn Rng,
        out: &mut [f64],
        mask: &mut [bool],
    ) -> Result<(), Error> {
        InvertedDropout.forward_train(x, p, rng, out, mask)?;
        out.iter_mut().for_each(|o| *o *= 1.0 + self.relative);
        Ok(())
    }
    fn forward_eval(
        &self,
        x: &[f64],
        p: f64,
        rng: &mut dyn Rng,
        out: &mut [f64],
    ) -> Result<(), Error> {
        InvertedDropout.forward_eval(x, p, rng, out)
    }
    fn backward(&self, g: &[f64], p: f64, mask: &[bool], gi: &mut [f64]) -> Result<(), Error> {
        InvertedDropout.backward(g, p, mask, gi)
    }
}

/// The graded perturbations `dropmc power` measures: drop rate off by
/// 0.5, 1, 2 and 5 %, mean shifted by 0.1 and 1 %.
pub fn graded() -> Vec<Box<dyn DropoutLayer>> {
    let mut all: Vec<Box<dyn DropoutLayer>> = Vec::new();
    for r in [0.005, 0.01, 0.02, 0.05] {
        all.push(Box::new(RateOff::new(r)));
    }
    for r in [0.001, 0.01] {
        all.push(Box::new(MeanShift::new(r)));
    }
    all
}
