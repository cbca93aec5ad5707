//! One token of a site whose dropout mask is shared over groups of the
//! normalized channels ([`MaskGroups`]): row- or column-wise dropout,
//! `x * dropout(ones(shape))`, a mask made from `torch.rand` and compared
//! with `p`, the token-level mask (one draw for every channel).
//!
//! # What is computed
//!
//! With `x = h + v` the evaluation input and `G` groups of one bit each
//! (closed forms in [`crate::formulas::shared_mask`]):
//!
//! ```text
//! truth      E[norm(h + m_g(k) v / q)]   every one of the 2^G group masks
//!                                         weighted, when G ≤ EXACT_AUDIT_D;
//!                                         else G bits drawn per mask (with SE)
//! eval       norm(x)
//! first      LayerNorm: β + c (LN(x) − β), c from the grouped E[V]
//!            RMSNorm:   γ x / sqrt(E[R²] + ε) (the grouping does not enter E[R²])
//! two-point  G = 1 only: q norm(h + v/q) + p norm(h), exact — what a
//!            correction applies to a token-level mask
//! ```
//!
//! No second order: [`crate::formulas::second_order`] assumes one bit per
//! channel. The elementwise closed forms would overstate the noise of a
//! grouped mask (the mean of `v` over a group adds none), which is why a
//! grouped site never takes the elementwise path.

use crate::engine::{Budget, Sampler, Stream, estimate, keep};
use crate::error::Error;
use crate::exact::enumerate_masks;
use crate::formulas::shared_mask::{self as sm, MaskGroups};
use crate::ops::{AnyNorm, Rate};

use super::token::{EXACT_AUDIT_D, TokenValues, sampled_truth};

/// The token `y = h + m_{g(k)} v / q` through `norm` (module docs).
pub fn token_values(
    h: &[f64],
    v: &[f64],
    groups: &MaskGroups,
    rate: Rate,
    norm: &AnyNorm,
    budget: Budget,
) -> Result<TokenValues, Error> {
    let d = v.len();
    let x: Vec<f64> = h.iter().zip(v).map(|(a, b)| a + b).collect();
    let mut eval = vec![0.0; d];
    norm.forward(&x, &mut eval)?;
    let first = match norm {
        AnyNorm::Layer(ln) => {
            sm::layer_norm_first_order(h, v, groups, rate, &eval, ln.beta(), ln.eps())?
        }
        AnyNorm::Rms(rms) => {
            let scale = (sm::mean_square_mean(h, v, rate)? + rms.eps()).sqrt();
            x.iter()
                .zip(rms.gamma())
                .map(|(a, g)| g * a / scale)
                .collect()
        }
    };
    let two_point = if groups.is_token() {
        Some(sm::token_expectation(h, v, rate, |y, out| {
            norm.forward(y, out)
        })?)
    } else {
        None
    };
    let token = GroupMaskSampler {
        h,
        v,
        groups,
        rate,
        norm,
    };
    let truth = truth(&token, budget)?;
    let (_, s2) = crate::ops::mean_and_variance(&x);
    let noise = sm::variance_noise(v, groups, rate)?;
    let rho2 = if s2 > 0.0 {
        noise / (rate.odds() * s2)
    } else {
        f64::INFINITY
    };
    Ok(TokenValues {
        two_point,
        ..TokenValues::first_order(truth, eval, first, rho2)
    })
}

/// `E[norm(y)]` per channel and its standard error: every group mask
/// weighted when `G ≤ EXACT_AUDIT_D`, else sampled.
fn truth(token: &GroupMaskSampler<'_>, budget: Budget) -> Result<(Vec<f64>, Vec<f64>), Error> {
    let GroupMaskSampler {
        h,
        v,
        groups,
        rate,
        norm,
    } = *token;
    let d = v.len();
    if groups.count() <= EXACT_AUDIT_D {
        let mut y = vec![0.0; d];
        let oracle = enumerate_masks(groups.count(), rate, d, |bits, out| {
            groups.dropped_into(h, v, bits, rate, &mut y);
            // The inputs were validated: the norm of a finite vector is defined.
            let _ = norm.forward(&y, out);
        })?;
        return Ok((oracle.values, vec![0.0; d]));
    }
    Ok(sampled_truth(&estimate(token, budget)?.estimates()))
}

/// One token of a grouped site: as a [`Sampler`], draws one keep bit per
/// group and writes `norm(h + m_g v / q)`.
#[derive(Clone, Copy)]
struct GroupMaskSampler<'a> {
    h: &'a [f64],
    v: &'a [f64],
    groups: &'a MaskGroups,
    rate: Rate,
    norm: &'a AnyNorm,
}

impl Sampler for GroupMaskSampler<'_> {
    /// The group bits and the norm's input.
    type Scratch = (Vec<bool>, Vec<f64>);
    fn dim(&self) -> usize {
        self.v.len()
    }
    fn scratch(&self) -> Self::Scratch {
        (vec![false; self.groups.count()], vec![0.0; self.v.len()])
    }
    fn draw(
        &self,
        rng: &mut Stream,
        (bits, y): &mut Self::Scratch,
        out: &mut [f64],
    ) -> Result<(), Error> {
        for b in bits.iter_mut() {
            *b = keep(rng, self.rate.p());
        }
        self.groups.dropped_into(self.h, self.v, bits, self.rate, y);
        self.norm.forward(y, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::LayerNorm;

    fn layer(d: usize) -> AnyNorm {
        AnyNorm::Layer(
            LayerNorm::new(
                (0..d).map(|k| 0.8 + k as f64 / d as f64).collect(),
                (0..d).map(|k| k as f64 / (2 * d) as f64).collect(),
                1e-5,
            )
            .unwrap(),
        )
    }

    fn token(d: usize) -> (Vec<f64>, Vec<f64>) {
        let h = (0..d).map(|k| ((k * 7 % 5) as f64 - 2.0) / 2.0).collect();
        let v = (0..d).map(|k| ((k * 3 % 7) as f64 - 2.5) / 3.0).collect();
        (h, v)
    }

    #[test]
    fn a_token_mask_truth_is_the_two_point_expectation() {
        let (h, v) = token(24);
        let rate = Rate::new(0.25).unwrap();
        let groups = MaskGroups::token(24).unwrap();
        let t = token_values(
            &h,
            &v,
            &groups,
            rate,
            &layer(24),
            Budget::new(256, 1).unwrap(),
        )
        .unwrap();
        let two = t.two_point.as_ref().unwrap();
        // Two norm evaluations weighted q and p, against the enumeration
        // over the one bit: the same two terms summed by the oracle.
        let oracle = enumerate_masks(1, rate, 24, |bits, out| {
            let mut y = vec![0.0; 24];
            groups.dropped_into(&h, &v, bits, rate, &mut y);
            layer(24).forward(&y, out).unwrap();
        })
        .unwrap();
        assert!(oracle.agrees_with(two));
        assert!(oracle.agrees_with(&t.truth));
        assert!(t.truth_se.iter().all(|s| *s == 0.0));
    }

    #[test]
    fn many_groups_are_sampled_within_their_standard_errors_on_any_thread_count() {
        let d = 40;
        let (h, v) = token(d);
        let rate = Rate::new(0.2).unwrap();
        // 20 groups of two channels: above the enumeration limit.
        let ids: Vec<usize> = (0..d).map(|k| k / 2).collect();
        let groups = MaskGroups::new(&ids).unwrap();
        let run = |threads: usize| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| {
                    token_values(
                        &h,
                        &v,
                        &groups,
                        rate,
                        &layer(d),
                        Budget::new(4096, 3).unwrap(),
                    )
                    .unwrap()
                })
        };
        let (one, two) = (run(1), run(2));
        assert_eq!(one.truth, two.truth);
        assert!(one.two_point.is_none() && one.truth_se.iter().all(|s| *s > 0.0));
        // Against every one of the 2^20 group masks, each channel within the
        // suite's critical z of its standard error.
        let exact = enumerate_masks(groups.count(), rate, d, |bits, out| {
            let mut y = vec![0.0; d];
            groups.dropped_into(&h, &v, bits, rate, &mut y);
            layer(d).forward(&y, out).unwrap();
        })
        .unwrap();
        let z = crate::stats::critical_z();
        for ((t, s), e) in one.truth.iter().zip(&one.truth_se).zip(&exact.values) {
            assert!((t - e).abs() <= z * s, "{t} vs {e} (se {s})");
        }
    }
}
