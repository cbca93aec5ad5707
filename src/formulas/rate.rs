//! A validated drop rate.

use crate::error::{Error, check_rate};

/// A drop rate `p` with its keep probability `q = 1 − p`, validated once:
/// `0 <= p < 1`, not NaN.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    p: f64,
    q: f64,
}

impl Rate {
    /// Validates `p`. `p = 1` is an error: inverted dropout's scale `1/q`
    /// does not exist there.
    pub fn new(p: f64) -> Result<Self, Error> {
        let p = check_rate(p)?;
        Ok(Rate { p, q: 1.0 - p })
    }

    /// The drop rate `p`.
    pub fn p(self) -> f64 {
        self.p
    }

    /// The keep probability `q = 1 − p`, always `> 0`.
    pub fn q(self) -> f64 {
        self.q
    }

    /// `p / q`, the variance a unit's mask adds per unit of `x²`.
    pub fn odds(self) -> f64 {
        self.p / self.q
    }
}
