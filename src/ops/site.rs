//! A dropout site: `y = h + Σ_j dropout_{p_j}(v_j)`.
//!
//! One definition covers every configuration the normalization families
//! need: plain dropout in front of a norm (`h = 0`, one term `v = x`), a
//! bypass (`h` plus one dropped term) and several independently dropped
//! terms. The noise-free input is `x = h + Σ_j v_j`.

use rand::Rng;

use super::dropout::DropoutLayer;
use super::pass::TrainPass;
use crate::error::{Error, check_finite_vec, check_len};
use crate::formulas::Rate;

/// `y = h + Σ_j dropout_{p_j}(v_j)`, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Site {
    h: Vec<f64>,
    terms: Vec<(Vec<f64>, Rate)>,
}

impl Site {
    /// A site from `h` and its dropped terms `(v_j, p_j)`; every vector has
    /// the same non-zero length and finite entries, every rate is valid.
    pub fn new(h: Vec<f64>, terms: Vec<(Vec<f64>, f64)>) -> Result<Self, Error> {
        check_finite_vec("h", &h)?;
        if terms.is_empty() {
            return Err(Error::Empty {
                what: "dropped terms",
            });
        }
        let mut checked = Vec::with_capacity(terms.len());
        for (v, p) in terms {
            check_len("v", &v, h.len())?;
            check_finite_vec("v", &v)?;
            checked.push((v, Rate::new(p)?));
        }
        Ok(Site { h, terms: checked })
    }

    /// Plain dropout of `x` at rate `p` (`h = 0`).
    pub fn plain(x: &[f64], p: f64) -> Result<Self, Error> {
        Site::new(vec![0.0; x.len()], vec![(x.to_vec(), p)])
    }

    /// Number of units.
    pub fn dim(&self) -> usize {
        self.h.len()
    }
    /// The undropped part `h`.
    pub fn h(&self) -> &[f64] {
        &self.h
    }
    /// The dropped terms and their rates.
    pub fn terms(&self) -> &[(Vec<f64>, Rate)] {
        &self.terms
    }

    /// The noise-free input `x = h + Σ_j v_j` (what evaluation mode sees).
    pub fn clean(&self) -> Vec<f64> {
        crate::formulas::DropoutSite::clean(self)
    }

    /// One training-mode draw through `layer`: writes `y`, uses `buf` and
    /// `mask` (each `dim()` long) as scratch.
    pub fn draw(
        &self,
        layer: &dyn DropoutLayer,
        rng: &mut dyn Rng,
        y: &mut [f64],
        buf: &mut [f64],
        mask: &mut [bool],
    ) -> Result<(), Error> {
        y.copy_from_slice(&self.h);
        for (v, rate) in &self.terms {
            layer.forward_train(TrainPass::new(v, buf, mask), rate.p(), rng)?;
            for (a, b) in y.iter_mut().zip(buf.iter()) {
                *a += b;
            }
        }
        Ok(())
    }

    /// `y` for given keep masks, one per term (`masks[j][k]`), computed as the
    /// reference inverted dropout does (`v / q` on kept units).
    pub fn apply_masks(&self, masks: &[&[bool]], y: &mut [f64]) {
        y.copy_from_slice(&self.h);
        for ((v, rate), mask) in self.terms.iter().zip(masks) {
            for ((a, b), &m) in y.iter_mut().zip(v).zip(*mask) {
                if m {
                    *a += b / rate.q();
                }
            }
        }
    }
}

impl crate::formulas::DropoutSite for Site {
    fn h(&self) -> &[f64] {
        &self.h
    }
    fn terms(&self) -> &[(Vec<f64>, Rate)] {
        &self.terms
    }
}
