//! What one normalization claim is about: the dropout site and the norms
//! after it ([`Config`]), and the per-draw statistic it estimates
//! ([`Stat`]). The generic sampler ([`super::norm`]), the fast path
//! ([`super::norm_fast`]) and the statistic's moments
//! ([`super::norm_moments`]) all read these, so they live below all three.

use crate::error::Error;
use crate::exact::Pipeline;
use crate::formulas::mean_and_variance;
use crate::ops::{LayerNorm, Rate, RmsNorm, Site};

/// A configuration: the site and the norms applied after it.
#[derive(Debug, Clone)]
pub struct Config {
    pub site: Site,
    /// LayerNorm (LN1 for the compound site).
    pub ln: LayerNorm,
    /// LN2 of the compound site (unused elsewhere).
    pub ln2: LayerNorm,
    pub rms: RmsNorm,
}

impl Config {
    /// A configuration with plain norms (`γ = 1`, `β = 0`, `ε = 0`).
    pub fn plain(site: Site) -> Result<Self, Error> {
        let d = site.dim();
        Ok(Config {
            site,
            ln: LayerNorm::plain(d, 0.0)?,
            ln2: LayerNorm::plain(d, 0.0)?,
            rms: RmsNorm::new(vec![1.0; d], 0.0)?,
        })
    }

    /// The site's clean input `x` and the rate of its one dropped term
    /// (every family's site has one).
    pub fn x_and_rate(&self) -> (Vec<f64>, Rate) {
        (self.site.clean(), self.site.terms()[0].1)
    }

    /// A scalar closed form `g(x, rate)` ([`Self::x_and_rate`]) as a
    /// claim's one component.
    pub fn scalar(&self, g: fn(&[f64], Rate) -> Result<f64, Error>) -> Result<Vec<f64>, Error> {
        let (x, rate) = self.x_and_rate();
        Ok(vec![g(&x, rate)?])
    }

    pub(super) fn pipeline(&self, stat: Stat) -> Option<Pipeline<'_>> {
        match stat {
            Stat::Ln => Some(Pipeline::Ln(&self.ln)),
            Stat::Rms => Some(Pipeline::Rms(&self.rms)),
            Stat::LnLn => Some(Pipeline::LnLn(&self.ln, &self.ln2)),
            _ => None,
        }
    }

    /// What one draw contributes to `stat`'s mean, from the site's output
    /// `y` (width `d`), into `out` (`stat.dim(d)` long; `tmp` a scratch row
    /// of width `d`): `M = mean_k y_k`, `V = mean_k (y_k − M)²`,
    /// `R² = mean_k y_k²`, or the norm's output per unit. For `Var M` it is
    /// `M`: the draw the estimator averages is the pair form
    /// `(M − M′)²/2` of two such values ([`pair_form`]). The generic
    /// sampler, the exact oracle and the statistic's moments all call this
    /// one function, so they cannot disagree on what a draw is.
    pub(super) fn per_draw(&self, stat: Stat, y: &[f64], tmp: &mut [f64], out: &mut [f64]) {
        match stat {
            Stat::M | Stat::VarM => out[0] = mean_and_variance(y).0,
            Stat::V => out[0] = mean_and_variance(y).1,
            Stat::R2 => out[0] = y.iter().map(|v| v * v).sum::<f64>() / y.len() as f64,
            Stat::Ln => Pipeline::Ln(&self.ln).apply(y, tmp, out),
            Stat::Rms => Pipeline::Rms(&self.rms).apply(y, tmp, out),
            Stat::LnLn => Pipeline::LnLn(&self.ln, &self.ln2).apply(y, tmp, out),
        }
    }
}

/// `(M − M′)²/2` of two independent draws' means `M`, `M′`: the draw of
/// `Var M`'s estimator, whose mean is `Var M` (`E[(M − M′)²] = 2 Var M`).
pub(super) fn pair_form(m: f64, m_alt: f64) -> f64 {
    0.5 * (m - m_alt) * (m - m_alt)
}

/// Masks per pair of the pair form `(M − M′)²/2` on the fast path.
pub const PAIR_DRAWS: u64 = 2;

/// The per-draw statistic of a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stat {
    /// `M = mean_k y_k`.
    M,
    /// `(M − M')²/2`, whose mean is `Var M`.
    VarM,
    /// `V = mean_k (y_k − M)²`.
    V,
    /// `R² = mean_k y_k²`.
    R2,
    /// `LN(y)`, per unit.
    Ln,
    /// `RMS(y)`, per unit.
    Rms,
    /// `LN2(LN1(y))`, per unit.
    LnLn,
}

impl Stat {
    pub(super) fn dim(self, d: usize) -> usize {
        match self {
            Stat::Ln | Stat::Rms | Stat::LnLn => d,
            _ => 1,
        }
    }
}
