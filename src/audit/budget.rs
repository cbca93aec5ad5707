//! How much of a site the audit spends on: the tokens it visits.
//!
//! # The token sample
//!
//! A site's cost is masks × tokens × d, and its gap is a mean over tokens
//! (`super::gap`), so a site with more tokens than its gap needs is audited
//! on a uniform sample of `n` of its `T` tokens, drawn without replacement
//! from the site's seed. The sample is the `n` tokens with the smallest
//! keys `splitmix64(seed ⊕ t)`, a random permutation's first `n`: every
//! `n`-subset is equally likely up to the mixer's quality, and the sample
//! depends only on the seed, the site's name and `T` (not on the thread
//! count). The tokens are audited in their original order.
//!
//! # What the sample does to the gap's standard error
//!
//! With `ĝ²_t` a token's noise-corrected squared gap (its truth sampled or
//! enumerated), the sample mean `Ĝ² = mean_{t ∈ sample} ĝ²_t` is unbiased
//! for the mean over all `T` tokens: each token is in the sample with
//! probability `n/T`. Under sampling without replacement
//!
//! ```text
//! Var(Ĝ²) = (1 − n/T) S²/n + σ̄²/n
//! ```
//!
//! with `S²` the spread of the tokens' true `g²_t` (the finite-population
//! correction `1 − n/T` multiplies only this part) and `σ̄²` the mean Monte
//! Carlo variance of one `ĝ²_t`. The sample variance `s²` of the `ĝ²_t`
//! estimates `S² + σ̄²`, so `s²/n`, the SE [`super::gap::Gap`] reports,
//! bounds `Var(Ĝ²)` from above. The correction is not applied: separating
//! `σ̄²` from `S²` would need the units' covariance within a token (they
//! share the masks), and a correction applied to both would understate the
//! Monte Carlo part. The reported SE is therefore conservative by at most a
//! factor `1/sqrt(1 − n/T)` on the spread part, and at `n = T` it is the SE
//! of the gap as a property of the token distribution, as it was before
//! tokens were sampled.

use crate::error::Error;

/// Tokens per site audited by default (the default of `tokens=` in
/// Python): sites with more are audited on a seeded uniform sample of this
/// many. At `d = 768` and the default 2¹² masks a token costs about 10 ms
/// of one core, so a site costs about a second, whatever the input's length.
pub const DEFAULT_TOKENS: usize = 128;

/// Which of a site's tokens the audit visits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tokens {
    /// Every token.
    All,
    /// A seeded uniform sample of at most this many (all when the site has
    /// fewer).
    Sample(usize),
}

impl Tokens {
    /// `Sample(n)`, refused at `n = 0` (a gap needs a token).
    pub fn sample(n: usize) -> Result<Tokens, Error> {
        if n == 0 {
            return Err(Error::InvalidOption {
                what: "tokens must be at least 1 (or all)".into(),
            });
        }
        Ok(Tokens::Sample(n))
    }

    /// How many of `total` tokens are visited.
    pub fn count(self, total: usize) -> usize {
        match self {
            Tokens::Sample(n) => n.min(total),
            Tokens::All => total,
        }
    }

    /// The indices (ascending) of the tokens visited out of `total`, from
    /// `seed` (module docs).
    pub fn indices(self, total: usize, seed: u64) -> Vec<usize> {
        let mut chosen = order(total, seed);
        chosen.truncate(self.count(total));
        chosen.sort_unstable();
        chosen
    }
}

/// The tokens `0..total` in a seeded random order (by the keys of the
/// module docs): any prefix is a uniform sample without replacement, so a
/// time budget may stop after any batch and still have audited one.
pub fn order(total: usize, seed: u64) -> Vec<usize> {
    let mut keyed: Vec<(u64, usize)> = (0..total)
        .map(|t| (splitmix64(seed ^ t as u64), t))
        .collect();
    keyed.sort_unstable();
    keyed.into_iter().map(|(_, t)| t).collect()
}

impl Default for Tokens {
    fn default() -> Self {
        Tokens::Sample(DEFAULT_TOKENS)
    }
}

/// SplitMix64's output function: a bijection of `u64` whose outputs for
/// consecutive inputs behave as independent uniform draws.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_is_sorted_distinct_and_seeded() {
        let a = Tokens::Sample(10).indices(100, 3);
        assert_eq!(a.len(), 10);
        assert!(a.windows(2).all(|w| w[0] < w[1]) && a[9] < 100);
        assert_eq!(a, Tokens::Sample(10).indices(100, 3));
        assert_ne!(a, Tokens::Sample(10).indices(100, 4));
        assert_eq!(Tokens::Sample(10).indices(7, 3), (0..7).collect::<Vec<_>>());
        assert_eq!(Tokens::All.indices(5, 3), (0..5).collect::<Vec<_>>());
        assert!(Tokens::sample(0).is_err());
    }

    #[test]
    fn every_token_is_drawn_about_equally_often() {
        // Over 4000 seeds, 5 of 20 tokens: each token's count is
        // Binomial(4000, 1/4) (mean 1000, sd 27.4) if the sample is uniform,
        // tested at the suite's critical z (about 6.5 sd).
        let mut counts = [0usize; 20];
        for seed in 0..4000u64 {
            for t in Tokens::Sample(5).indices(20, seed) {
                counts[t] += 1;
            }
        }
        let sd = (4000.0f64 * 0.25 * 0.75).sqrt();
        for c in counts {
            assert!(
                (c as f64 - 1000.0).abs() < crate::stats::critical_z() * sd,
                "{counts:?}"
            );
        }
    }
}
