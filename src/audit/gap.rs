//! The gap of an estimate to the truth over a site's tokens.
//!
//! # Why a root-mean-square gap with the noise subtracted
//!
//! The truth `E_tk` of token `t`, unit `k` comes from the sampler as
//! `Ê_tk = E_tk + e_tk` with `E[e_tk] = 0`, `E[e_tk²] = s_tk²` (its
//! standard error squared). For an estimate `P_tk`,
//!
//! ```text
//! E[(Ê_tk − P_tk)² − s_tk²] = (E_tk − P_tk)²          (the cross term has mean 0)
//! ```
//!
//! so `g²_t = mean_k [(Ê_tk − P_tk)² − ŝ_tk²]` is an unbiased estimate of the
//! token's mean squared gap (up to the error of `ŝ²`, a relative
//! `O(1/batches)`), where the mean `|Ê − P|` would be biased upwards by the
//! noise — and at `d = 512` the first-order gap is far below the noise of
//! any affordable per-unit estimate, while its square averaged over
//! `d · tokens` units is not. The site's gap is
//!
//! ```text
//! G² = mean_t g²_t,   SE(G²) = sd_t(g²_t)/√T,   G = sqrt(max(G², 0))
//! ```
//!
//! `SE(G²)` from the spread over tokens holds both the tokens' own spread
//! and the sampling noise (each `g²_t` carries its own). By the delta method
//! `SE(G) = SE(G²)/(2G)`. `G` is *resolved* when `G² > Z_RESOLVED · SE(G²)`;
//! otherwise only the bound `G ≤ sqrt(max(G², 0) + Z_RESOLVED · SE(G²))` is
//! reported. An enumerated truth has `s = 0` and the same formulas.

use serde::Serialize;

use super::token::TokenValues;

/// The z at which a gap counts as resolved, and of the upper bound of one
/// that is not (one-sided, about 0.13 % under the normal law).
pub const Z_RESOLVED: f64 = 3.0;

/// The RMS gap of an estimate to the truth over a site's tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Gap {
    /// `G²`, the noise-corrected mean squared gap.
    pub mean_square: f64,
    /// `SE(G²)`.
    pub mean_square_se: f64,
    /// `G`.
    pub rms: f64,
    /// `SE(G)` (∞ when `G = 0`).
    pub rms_se: f64,
    /// `G² > Z_RESOLVED · SE(G²)`.
    pub resolved: bool,
    /// `sqrt(max(G², 0) + Z_RESOLVED · SE(G²))`.
    pub upper: f64,
}

impl Gap {
    /// The gap of `estimate(t)` to `t.truth` over `tokens` (at least one).
    pub fn over(tokens: &[TokenValues], estimate: impl Fn(&TokenValues) -> &[f64]) -> Gap {
        let per_token: Vec<f64> = tokens
            .iter()
            .map(|t| {
                let p = estimate(t);
                let total: f64 = t
                    .truth
                    .iter()
                    .zip(&t.truth_se)
                    .zip(p)
                    .map(|((e, s), p)| (e - p) * (e - p) - s * s)
                    .sum();
                total / p.len() as f64
            })
            .collect();
        Gap::from_token_squares(&per_token)
    }

    /// The gap of `estimate(t)` where every token has one, else `None`
    /// (an estimate the site's form does not define).
    pub fn over_optional(
        tokens: &[TokenValues],
        estimate: impl Fn(&TokenValues) -> Option<&[f64]>,
    ) -> Option<Gap> {
        if tokens.iter().all(|t| estimate(t).is_some()) {
            Some(Gap::over(tokens, |t| estimate(t).unwrap_or_default()))
        } else {
            None
        }
    }

    /// The gap from the per-token `g²_t`.
    pub fn from_token_squares(g2: &[f64]) -> Gap {
        let n = g2.len() as f64;
        let mean = g2.iter().sum::<f64>() / n;
        let se = if g2.len() < 2 {
            f64::INFINITY
        } else {
            (g2.iter().map(|g| (g - mean) * (g - mean)).sum::<f64>() / (n - 1.0) / n).sqrt()
        };
        let rms = mean.max(0.0).sqrt();
        Gap {
            mean_square: mean,
            mean_square_se: se,
            rms,
            rms_se: if rms > 0.0 {
                se / (2.0 * rms)
            } else {
                f64::INFINITY
            },
            resolved: mean > Z_RESOLVED * se,
            upper: (mean.max(0.0) + Z_RESOLVED * se).sqrt(),
        }
    }

    /// Whether this gap's `G²` exceeds `other`'s by more than `Z_RESOLVED`
    /// standard errors of the difference (taken as independent: their
    /// correlation is positive, so this overstates the SE and the flag is
    /// conservative).
    pub fn farther_than(&self, other: &Gap) -> bool {
        let se = self.mean_square_se.hypot(other.mean_square_se);
        self.mean_square - other.mean_square > Z_RESOLVED * se
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_values() {
        // g² = (1, 3): mean 2, sd √2, SE 1; G = √2, SE(G) = 1/(2√2); 2 < 3·1: unresolved.
        let g = Gap::from_token_squares(&[1.0, 3.0]);
        assert_eq!(g.mean_square, 2.0);
        assert_eq!(g.mean_square_se, 1.0);
        assert_eq!(g.rms, 2f64.sqrt());
        assert!(!g.resolved);
        assert_eq!(g.upper, 5f64.sqrt());
        let far = Gap::from_token_squares(&[10.0, 10.0]);
        assert!(far.resolved && far.farther_than(&g) && !g.farther_than(&far));
    }
}
