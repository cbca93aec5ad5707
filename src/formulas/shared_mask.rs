//! A dropout mask shared over groups of the normalized channels: the
//! row- and column-wise dropout of the pair representation (one draw per
//! row, shared along a residue axis), a mask made as `dropout(ones(shape))`
//! and multiplied in, and the token-level mask (one draw per token, shared
//! over every channel).
//!
//! # Setting
//!
//! Fixed `h, v ∈ R^d`, `x = h + v` (what evaluation feeds the norm). The
//! channels fall into `G` groups, channel `k` in group `g(k)`; each group
//! draws one keep bit `m_g ~ Bernoulli(q)`, independent across groups, and
//! training feeds the norm
//!
//! ```text
//! y_k = h_k + m_{g(k)} v_k / q.
//! ```
//!
//! `G = d` with one channel per group is ordinary elementwise dropout;
//! `G = 1` is the token-level mask. `S_g = Σ_{k ∈ g} v_k` is group `g`'s sum.
//!
//! # Derivation: the token-level mask (`G = 1`, exact)
//!
//! The single bit takes two values, so any function of `y` has a two-point
//! law:
//!
//! ```text
//! m = 1 (probability q):  y = h + v/q
//! m = 0 (probability p):  y = h
//! E[f(y)] = q f(h + v/q) + p f(h)                (exact, any f)
//! ```
//!
//! With `f` the norm this is the expectation the elementwise closed forms
//! approximate; here it costs two norm evaluations and has no error term.
//!
//! # Derivation: the variance `V` the LayerNorm computes (exact, any grouping)
//!
//! Write `y = x + w` with the noise `w_k = (m_{g(k)}/q − 1) v_k`. From
//! `E[m/q] = 1` and `E[(m/q)²] = 1/q`: `E[w_k] = 0` and
//! `Cov(w_k, w_l) = (p/q) v_k v_l` when `g(k) = g(l)`, 0 otherwise. `V` is a
//! quadratic form, `V(y) = V(x) + 2 cov_k(x, w) + V(w)`, the middle term has
//! mean 0, and
//!
//! ```text
//! E[V(w)] = mean_k E[w_k²] − E[(mean_k w_k)²]
//!         = (p/q) mean_k v_k² − (1/d²) Σ_{k,l} Cov(w_k, w_l)
//!         = (p/q) (mean_k v_k² − Σ_g S_g² / d²)
//! E[V]    = V(x) + (p/q) (mean_k v_k² − Σ_g S_g² / d²)
//! ```
//!
//! One channel per group gives `Σ_g S_g² = Σ_k v_k²`, the elementwise
//! `V(x) + (p/q) v̄² (1 − 1/d)` of the bypass family; one group gives
//! `V(x) + (p/q) V(v)` (`V(v)` the spread of `v` over the channels), so the
//! mean of `v` no longer adds noise: the elementwise form overstates the
//! noise by `(p/q) mean(v)²` there.
//!
//! # Derivation: the mean square `R²` the RMSNorm computes (exact, any grouping)
//!
//! `R² = mean_k y_k²`, `E[y_k²] = x_k² + Var w_k = x_k² + (p/q) v_k²`: the
//! grouping does not enter, `E[R²] = mean_k x_k² + (p/q) mean_k v_k²`.
//!
//! # Derivation: the first-order LayerNorm correction (leading order)
//!
//! Replacing `sqrt(V + ε)` by `sqrt(E[V] + ε)` and using `E[y] = x` (the
//! step of [`super::layernorm`]) gives
//! `E[LN(y)]_k ≈ β_k + c (LN(x)_k − β_k)`, `c = sqrt((V(x) + ε)/(E[V] + ε))`.
//! It ignores the spread of `V` and its covariance with `y_k − M`; with
//! few groups the spread of `V` is not small (with one group `V` takes two
//! values), so the order of its error is `O(1/G)`, not `O(1/d)`: for a
//! token-level mask use the exact two-point expectation instead.
//!
//! # Assumptions
//!
//! Independent bits across groups, one bit shared by the channels of a
//! group, `0 ≤ p < 1`; `h` and `v` fixed (the bypass does not depend on the
//! mask).

use super::{Rate, mean_and_variance, representable, representable_value};
use crate::error::Error;

/// Which group each channel's mask bit belongs to, validated: ids are
/// `0 … G−1` and every group has a channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaskGroups {
    of_channel: Vec<usize>,
    count: usize,
}

impl MaskGroups {
    /// The grouping from each channel's group id (ids are renumbered in
    /// order of first appearance, so any distinct labels will do).
    pub fn new(ids: &[usize]) -> Result<Self, Error> {
        if ids.is_empty() {
            return Err(Error::Empty {
                what: "mask groups",
            });
        }
        let mut seen: Vec<usize> = Vec::new();
        let of_channel = ids
            .iter()
            .map(|id| match seen.iter().position(|s| s == id) {
                Some(g) => g,
                None => {
                    seen.push(*id);
                    seen.len() - 1
                }
            })
            .collect();
        Ok(MaskGroups {
            of_channel,
            count: seen.len(),
        })
    }

    /// One group for all `d` channels: the token-level mask.
    pub fn token(d: usize) -> Result<Self, Error> {
        Self::new(&vec![0; d])
    }

    /// Every channel its own group: elementwise dropout.
    pub fn elementwise(d: usize) -> Result<Self, Error> {
        Self::new(&(0..d).collect::<Vec<_>>())
    }

    /// Number of channels.
    pub fn dim(&self) -> usize {
        self.of_channel.len()
    }

    /// Number of groups `G` (of independent bits).
    pub fn count(&self) -> usize {
        self.count
    }

    /// The group of channel `k`.
    pub fn of(&self, k: usize) -> usize {
        self.of_channel[k]
    }

    /// Whether one bit serves every channel.
    pub fn is_token(&self) -> bool {
        self.count == 1
    }

    /// `y_k = h_k + (m_{g(k)}/q) v_k` for the group bits `keep`.
    pub fn dropped_into(&self, h: &[f64], v: &[f64], keep: &[bool], rate: Rate, y: &mut [f64]) {
        let q = rate.q();
        for (k, out) in y.iter_mut().enumerate() {
            *out = if keep[self.of(k)] {
                h[k] + v[k] / q
            } else {
                h[k]
            };
        }
    }

    /// `Σ_g S_g²`, `S_g` the sum of `v` over group `g`.
    fn sum_of_squared_group_sums(&self, v: &[f64]) -> f64 {
        let mut sums = vec![0.0; self.count];
        for (k, a) in v.iter().enumerate() {
            sums[self.of(k)] += a;
        }
        sums.iter().map(|s| s * s).sum()
    }
}

fn check_widths(h: &[f64], v: &[f64], groups: &MaskGroups) -> Result<(), Error> {
    crate::error::check_len("h", h, groups.dim())?;
    crate::error::check_len("v", v, groups.dim())
}

fn clean(h: &[f64], v: &[f64]) -> Vec<f64> {
    h.iter().zip(v).map(|(a, b)| a + b).collect()
}

/// The added noise `E[V] − V(x) = (p/q)(mean_k v_k² − Σ_g S_g²/d²)`
/// (exact; module docs).
pub fn variance_noise(v: &[f64], groups: &MaskGroups, rate: Rate) -> Result<f64, Error> {
    crate::error::check_len("v", v, groups.dim())?;
    let d = v.len() as f64;
    let mean_square = v.iter().map(|a| a * a).sum::<f64>() / d;
    let noise = rate.odds() * (mean_square - groups.sum_of_squared_group_sums(v) / (d * d));
    representable_value(
        "the added variance (p/q)(mean v² − Σ S_g²/d²)",
        noise.max(0.0),
    )
}

/// `E[V] = V(x) + (p/q)(mean_k v_k² − Σ_g S_g²/d²)` (exact; module docs).
pub fn variance_mean(h: &[f64], v: &[f64], groups: &MaskGroups, rate: Rate) -> Result<f64, Error> {
    check_widths(h, v, groups)?;
    let (_, s2) = mean_and_variance(&clean(h, v));
    representable_value("E[V]", s2 + variance_noise(v, groups, rate)?)
}

/// `E[R²] = mean_k x_k² + (p/q) mean_k v_k²` (exact, any grouping).
pub fn mean_square_mean(h: &[f64], v: &[f64], rate: Rate) -> Result<f64, Error> {
    crate::error::check_len("h", h, v.len())?;
    let d = v.len() as f64;
    let x2 = h.iter().zip(v).map(|(a, b)| (a + b) * (a + b)).sum::<f64>() / d;
    let v2 = v.iter().map(|a| a * a).sum::<f64>() / d;
    representable_value("E[R²]", x2 + rate.odds() * v2)
}

/// `E[norm(h + m v / q)] = q norm(h + v/q) + p norm(h)` for one bit `m`
/// shared by every channel (exact; module docs). `norm` writes the layer's
/// output for an input.
pub fn token_expectation(
    h: &[f64],
    v: &[f64],
    rate: Rate,
    norm: impl Fn(&[f64], &mut [f64]) -> Result<(), Error>,
) -> Result<Vec<f64>, Error> {
    crate::error::check_len("h", h, v.len())?;
    let d = v.len();
    let kept: Vec<f64> = h.iter().zip(v).map(|(a, b)| a + b / rate.q()).collect();
    let (mut on, mut off) = (vec![0.0; d], vec![0.0; d]);
    norm(&kept, &mut on)?;
    norm(h, &mut off)?;
    representable(
        "the two-point expectation q norm(h + v/q) + p norm(h)",
        on.iter()
            .zip(&off)
            .map(|(a, b)| rate.q() * a + rate.p() * b)
            .collect(),
    )
}

/// The first-order LayerNorm estimate `β + c (LN(x) − β)` with
/// `c = sqrt((V(x) + ε)/(E[V] + ε))` and the grouped `E[V]` (leading
/// order; module docs). `ln_x` is `LN(x)`.
pub fn layer_norm_first_order(
    h: &[f64],
    v: &[f64],
    groups: &MaskGroups,
    rate: Rate,
    ln_x: &[f64],
    beta: &[f64],
    eps: f64,
) -> Result<Vec<f64>, Error> {
    check_widths(h, v, groups)?;
    let (_, s2) = mean_and_variance(&clean(h, v));
    let c = ((s2 + eps) / (s2 + variance_noise(v, groups, rate)? + eps)).sqrt();
    representable(
        "the grouped first-order LayerNorm estimate",
        ln_x.iter()
            .zip(beta)
            .map(|(l, b)| b + c * (l - b))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exact::enumerate_masks;
    use crate::stats::tolerance;

    const H: [f64; 6] = [0.3, -1.2, 0.8, 2.0, -0.4, 0.1];
    const V: [f64; 6] = [1.1, 0.4, -0.7, 0.9, 1.6, -0.2];

    fn variance_by_enumeration(groups: &MaskGroups, rate: Rate) -> crate::exact::Oracle {
        let mut y = [0.0; 6];
        enumerate_masks(groups.count(), rate, 1, |keep, out| {
            groups.dropped_into(&H, &V, keep, rate, &mut y);
            out[0] = mean_and_variance(&y).1;
        })
        .unwrap()
    }

    #[test]
    fn the_grouped_variance_is_the_enumerated_one_for_every_grouping() {
        let rate = Rate::new(0.3).unwrap();
        for ids in [
            vec![0, 1, 2, 3, 4, 5],
            vec![0, 0, 0, 0, 0, 0],
            vec![0, 0, 1, 1, 2, 2],
            vec![7, 3, 7, 3, 7, 3],
        ] {
            let groups = MaskGroups::new(&ids).unwrap();
            let closed = variance_mean(&H, &V, &groups, rate).unwrap();
            let exact = variance_by_enumeration(&groups, rate);
            assert!(
                exact.agrees_with(&[closed]),
                "{ids:?}: {closed} vs {exact:?}"
            );
        }
    }

    #[test]
    fn one_channel_per_group_is_the_bypass_form_and_one_group_is_not() {
        let rate = Rate::new(0.2).unwrap();
        let d = V.len() as f64;
        let v2 = V.iter().map(|a| a * a).sum::<f64>() / d;
        let elementwise = variance_noise(&V, &MaskGroups::elementwise(6).unwrap(), rate).unwrap();
        // Both sides are sums of d squares and a few products: the
        // statistic's rounding count at d bounds either's error.
        let slack = tolerance::bound(
            tolerance::norm_statistic_roundings(V.len()),
            rate.odds() * v2,
        );
        assert!((elementwise - rate.odds() * v2 * (1.0 - 1.0 / d)).abs() <= slack);
        let token = variance_noise(&V, &MaskGroups::token(6).unwrap(), rate).unwrap();
        let (_, spread) = mean_and_variance(&V);
        assert!((token - rate.odds() * spread).abs() <= slack);
        assert!(elementwise > token);
    }

    #[test]
    fn labels_are_renumbered_and_bad_widths_are_errors() {
        let g = MaskGroups::new(&[9, 4, 9]).unwrap();
        assert_eq!((g.count(), g.of(0), g.of(1), g.of(2)), (2, 0, 1, 0));
        assert!(MaskGroups::new(&[]).is_err());
        assert!(
            variance_mean(
                &H,
                &V[..5],
                &MaskGroups::token(6).unwrap(),
                Rate::new(0.1).unwrap()
            )
            .is_err()
        );
    }
}
