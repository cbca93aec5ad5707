//! The audit's wall-time estimate, read before any sampling (issue 52): a
//! request whose estimate exceeds its `time_budget` (or, without one,
//! [`UNBUDGETED_SECONDS`]) is refused up front with the estimate, instead
//! of running for hours.
//!
//! # The model
//!
//! A site's work is linear in each of its factors (module docs of
//! [`super::progress`]), so its time is a sum of rates times counts:
//!
//! ```text
//! sampled norm site   tokens · samples · (PER_MASK + d · PER_UNIT[kind])
//! grouped masks       tokens · samples · d · SECONDS_PER_GROUPED_UNIT
//! enumerated site     tokens · 2^g · d       · SECONDS_PER_ENUMERATED_UNIT
//! attention site      closed forms + sampled check · SECONDS_PER_ATTENTION_UNIT
//! ```
//!
//! with `g` the number of independent mask bits (`d`, or the mask groups'
//! count) and `kind` the fast sampler (plain/bypass, or compound). An
//! enumerated site's time does not depend on `samples`: no mask is drawn
//! there.
//!
//! # The rates
//!
//! Wall seconds on the project's 2-core machine at load average 8 (seven
//! sessions building and testing), from `audit_captures(..., tokens="all")`
//! on random sites (the script is in the docstring of
//! `python/tests/test_robustness_budget.py`):
//!
//! ```text
//! bypass   d = 768, 128 tokens × 4096 masks     0.36 s   6.8e-7 s per token-mask
//! bypass   d = 32,  128 tokens × 65536 masks    0.66 s   7.9e-8 s per token-mask
//! compound d = 64,  64 tokens × 16384 masks     0.23 s   2.2e-7 s per token-mask
//! grouped  d = 256 in 64 groups, 32 × 4096      0.94 s   2.8e-8 s per mask-unit
//! enumerated d = 16, 128 tokens × 2^16 masks    5.31 s   4.0e-8 s per mask-unit
//! attention 64 rows, 4 heads, 64 keys, E = 64   0.26 s   9.5e-10 s per unit
//! ```
//!
//! The two bypass lines give the affine rate `PER_MASK + d · PER_UNIT`
//! (`PER_UNIT = (6.8e-7 − 7.9e-8)/736 = 8.2e-10`, `PER_MASK = 7.9e-8 −
//! 32 · 8.2e-10 = 5.3e-8`); the compound line is taken with the same
//! per-mask part. An idle machine is faster, so the estimate errs long. It
//! is a guide: the bound on wall time is the supervisor's deadline
//! (`python/src/supervise.rs`), not this.

use super::attention::{AttentionCapture, site_work as attention_work};
use super::capture::{Form, SiteCapture};
use super::{TOKEN_BATCH, Tokens};

/// Wall seconds per token-mask of the fast samplers, whatever `d`.
pub const SECONDS_PER_MASK: f64 = 5.3e-8;
/// Wall seconds per mask-unit of the plain/bypass fast site sampler.
pub const SECONDS_PER_SAMPLED_UNIT: f64 = 8.2e-10;
/// Wall seconds per mask-unit of the compound sampler.
pub const SECONDS_PER_COMPOUND_UNIT: f64 = 2.6e-9;
/// Wall seconds per mask-unit of the grouped-mask sampler (the engine's
/// generic loop: one draw per mask).
pub const SECONDS_PER_GROUPED_UNIT: f64 = 2.8e-8;
/// Wall seconds per enumerated mask-unit.
pub const SECONDS_PER_ENUMERATED_UNIT: f64 = 4.0e-8;
/// Wall seconds per work unit of an attention site (the attention audit's `site_work`).
pub const SECONDS_PER_ATTENTION_UNIT: f64 = 9.5e-10;

/// The longest estimate a request without a `time_budget` may have: an
/// hour.
pub const UNBUDGETED_SECONDS: f64 = 3600.0;

/// Estimated wall seconds of `tokens` tokens of `capture` at `samples`
/// masks each (module docs).
pub fn site_seconds(capture: &SiteCapture, samples: u64, tokens: usize) -> f64 {
    let units = (tokens * capture.d) as f64;
    if capture.truth_enumerated() {
        return units * (capture.mask_bits() as f64).exp2() * SECONDS_PER_ENUMERATED_UNIT;
    }
    let masks = tokens as f64 * samples as f64;
    if capture.mask_groups.is_some() {
        return masks * capture.d as f64 * SECONDS_PER_GROUPED_UNIT;
    }
    let per_unit = if capture.form == Form::Compound {
        SECONDS_PER_COMPOUND_UNIT
    } else {
        SECONDS_PER_SAMPLED_UNIT
    };
    masks * (SECONDS_PER_MASK + capture.d as f64 * per_unit)
}

/// `(all, least)`: the estimated wall seconds of the audit of `sites` on
/// the tokens `tokens` picks, and of the least a time budget lets it do
/// (one batch of [`TOKEN_BATCH`] tokens per site).
pub fn sites_seconds(sites: &[SiteCapture], samples: u64, tokens: Tokens) -> (f64, f64) {
    sites.iter().fold((0.0, 0.0), |(all, least), c| {
        let n = tokens.count(c.tokens());
        (
            all + site_seconds(c, samples, n),
            least + site_seconds(c, samples, n.min(TOKEN_BATCH)),
        )
    })
}

/// The estimated wall seconds of the attention audit of `sites`.
pub fn attention_seconds(sites: &[AttentionCapture], samples: u64, rows: Tokens) -> f64 {
    sites
        .iter()
        .map(|c| attention_work(c, samples, rows) * SECONDS_PER_ATTENTION_UNIT)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::super::tests::capture as site;
    use super::*;

    /// An enumerated site's estimate does not grow with `samples` (nothing
    /// is drawn), a sampled site's grows in proportion, and a budget's
    /// least is one batch of tokens.
    #[test]
    fn the_estimate_follows_the_work_that_is_done() {
        let small = site(8, 40);
        assert_eq!(
            site_seconds(&small, 1 << 12, 40),
            site_seconds(&small, 1 << 40, 40)
        );
        let wide = site(32, 40);
        let ratio = site_seconds(&wide, 1 << 20, 40) / site_seconds(&wide, 1 << 10, 40);
        assert_eq!(ratio, 1024.0);
        let (all, least) = sites_seconds(std::slice::from_ref(&wide), 1 << 12, Tokens::All);
        assert_eq!(all / least, 40.0 / TOKEN_BATCH as f64);
    }
}
