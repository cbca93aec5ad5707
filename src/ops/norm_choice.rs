//! "LayerNorm or RMSNorm", said once: [`Normalization`], which of the two a
//! site, a bound or a framework's layer is, and [`AnyNorm`], one of the two
//! with its parameters. Everything that branches on the kind of norm (the
//! fast site kernel, the rounding bounds, the audit, `eval`, the framework
//! adapters, the Python binding) takes one of these two.

use super::norm::{LayerNorm, NormKind, RmsNorm};
use crate::error::Error;

/// Which normalization: LayerNorm centres the row (`(z − M)/sqrt(V + ε)`),
/// RMSNorm does not (`z / sqrt(R² + ε)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Normalization {
    LayerNorm,
    RmsNorm,
}

impl Normalization {
    /// The norm's name as errors and reports print it: `"LayerNorm"`,
    /// `"RMSNorm"` (the same as [`NormKind::NAME`]).
    pub fn name(self) -> &'static str {
        match self {
            Normalization::LayerNorm => <super::LayerNormKind as NormKind>::NAME,
            Normalization::RmsNorm => <super::RmsNormKind as NormKind>::NAME,
        }
    }

    /// True for LayerNorm, whose statistic is the centred `V`; RMSNorm's is
    /// the raw `R²`.
    pub fn centres(self) -> bool {
        self == Normalization::LayerNorm
    }
}

/// A LayerNorm or an RMSNorm, with its parameters.
#[derive(Debug, Clone, PartialEq)]
pub enum AnyNorm {
    Layer(LayerNorm),
    Rms(RmsNorm),
}

impl AnyNorm {
    /// Which of the two.
    pub fn kind(&self) -> Normalization {
        match self {
            AnyNorm::Layer(_) => Normalization::LayerNorm,
            AnyNorm::Rms(_) => Normalization::RmsNorm,
        }
    }

    /// Number of units.
    pub fn dim(&self) -> usize {
        self.gamma().len()
    }

    /// The gains `γ`.
    pub fn gamma(&self) -> &[f64] {
        match self {
            AnyNorm::Layer(ln) => ln.gamma(),
            AnyNorm::Rms(rms) => rms.gamma(),
        }
    }

    /// The shifts `β`; `None` for RMSNorm, which has none.
    pub fn beta(&self) -> Option<&[f64]> {
        match self {
            AnyNorm::Layer(ln) => Some(ln.beta()),
            AnyNorm::Rms(_) => None,
        }
    }

    /// `ε`.
    pub fn eps(&self) -> f64 {
        match self {
            AnyNorm::Layer(ln) => ln.eps(),
            AnyNorm::Rms(rms) => rms.eps(),
        }
    }

    /// The checked forward pass of the norm (see [`super::Norm::forward`]).
    pub fn forward(&self, z: &[f64], out: &mut [f64]) -> Result<(), Error> {
        match self {
            AnyNorm::Layer(ln) => ln.forward(z, out),
            AnyNorm::Rms(rms) => rms.forward(z, out),
        }
    }
}

impl From<LayerNorm> for AnyNorm {
    fn from(ln: LayerNorm) -> Self {
        AnyNorm::Layer(ln)
    }
}

impl From<RmsNorm> for AnyNorm {
    fn from(rms: RmsNorm) -> Self {
        AnyNorm::Rms(rms)
    }
}
