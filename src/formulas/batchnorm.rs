//! BatchNorm after dropout: what the running buffers converge to, the
//! variance shift `Δ = c²` at evaluation, reading `σ²` and `c` back from the
//! buffers, and the one-off fold that removes the shift.
//!
//! # Setting
//!
//! One BatchNorm channel `k`. Its dropout-free input `x` has, over the data,
//! mean `μ_k` and variance `σ_k² > 0`. In training the channel sees
//! `z = m x / q` with `m ~ Bernoulli(q)` drawn afresh for every example and
//! channel, independently of `x`. Examples are independent, batches of `B`
//! examples are independent, and the buffers follow PyTorch's update
//! (see [`crate::ops::BatchNorm`]) with momentum `m_e` (`0.1` by default):
//!
//! ```text
//! rm_t = (1 − m_e) rm_{t−1} + m_e b̄_t        b̄_t  = batch mean of z
//! rv_t = (1 − m_e) rv_{t−1} + m_e u_t        u_t  = unbiased batch variance of z
//! ```
//!
//! # Derivation 1: the moments of the training input (exact)
//!
//! ```text
//! E[z]   = E[m] E[x] / q            = μ_k          (m and x independent)
//! E[z²]  = E[m²] E[x²] / q²         = (σ_k² + μ_k²)/q   (m² = m)
//! Var z  = E[z²] − E[z]²            = (σ_k² + μ_k²)/q − μ_k²
//!        = (σ_k² + p μ_k²)/q
//! ```
//!
//! Call `v_k = (σ_k² + p μ_k²)/q`. It exceeds `σ_k²` by
//! `(p/q)(σ_k² + μ_k²)`: the mask adds spread, and it adds more the larger
//! the channel's mean (a ReLU output has a large one).
//!
//! # Derivation 2: the buffers (exact at every step, not only in the limit)
//!
//! The examples of a batch are iid, so the batch mean is unbiased and, by
//! Bessel's correction, so is the unbiased batch variance:
//! `E[b̄_t] = μ_k`, `E[u_t] = v_k` exactly, for every batch size `B ≥ 2`.
//! (The biased variance that train mode normalises with has
//! `E = (B − 1)/B · v_k`; the buffers do not use it, so the finite batch
//! leaves no trace in their expectation.) Taking expectations of the update
//! and unrolling it `t` times from the initial buffers `(rm_0, rv_0)`,
//! PyTorch's `(0, 1)`:
//!
//! ```text
//! E[rm_t] = (1 − m_e)^t rm_0 + (1 − (1 − m_e)^t) μ_k
//! E[rv_t] = (1 − m_e)^t rv_0 + (1 − (1 − m_e)^t) v_k
//! ```
//!
//! These are exact for every `t`. The only departure from the stationary
//! values `E[rm] = μ_k`, `E[rv] = v_k` is the initialisation term
//! `(1 − m_e)^t (rv_0 − v_k)`, which decays geometrically (`0.9^50 ≈ 0.005`,
//! `0.9^200 ≈ 7·10⁻¹⁰`). What is *not* exact is any single realised buffer:
//! the EMA keeps fluctuating around its expectation. Writing
//! `rm_t = (1−m_e)^t rm_0 + m_e Σ_{j<t} (1−m_e)^j b̄_{t−j}` with independent
//! batch means of variance `v_k / B`:
//!
//! ```text
//! Var rm_t = m_e² (v_k/B) Σ_{j<t} (1 − m_e)^{2j}
//!          = m_e (1 − (1 − m_e)^{2t}) / (2 − m_e) · v_k / B
//! ```
//!
//! (`≈ 0.053 v_k / B` at stationarity for `m_e = 0.1`); `rv_t` fluctuates
//! likewise, with `Var u_t` in place of `v_k/B`.
//!
//! # Derivation 3: the variance shift at evaluation (exact at `E[rv]`)
//!
//! In eval mode dropout is the identity, so the channel receives `x` itself,
//! and BatchNorm (γ = 1, β = 0) outputs `(x − rm)/sqrt(rv + ε)`. At the
//! stationary buffers its variance over the data is
//!
//! ```text
//! Δ_k = σ_k² / (v_k + ε)                     (ε = 0: Δ_k = σ_k² / v_k)
//!     = q σ_k² / (σ_k² + p μ_k²)
//!     = q / (1 + p (μ_k/σ_k)²)  = c(μ_k, σ_k)²
//! ```
//!
//! with `c` the same factor as LayerNorm's leading-order shrinkage; the eval
//! output's spread is `c_k < 1` times the train output's (which batch
//! statistics keep at 1). Li et al. (2018)'s headline case: `x ~ N(0, 1)`,
//! keep probability `0.5`: train-mode input variance `v = 1/q = 2`, eval-mode
//! input variance `1`, `Δ = 1/2`. With a realised buffer, `σ²/rv` differs from
//! `σ²/E[rv]` by the buffer's fluctuation (relative spread
//! `sqrt(0.053 · Var u_t) / v_k` at stationarity, which would be
//! `sqrt(0.053 · 2/(B − 1))` if `z` were Gaussian; dropout makes its tails
//! heavier). Averaged over that fluctuation, `E[σ²/rv] > σ²/E[rv]` (Jensen):
//! the realised shift is exact only at the expected buffer.
//!
//! # Derivation 4: inversion from the buffers alone (exact at `E[buffers]`)
//!
//! Substituting `rm = μ_k`, `rv = v_k` into `q v_k = σ_k² + p μ_k²`:
//!
//! ```text
//! σ_k² = q · rv − p · rm²
//! c_k² = σ_k² / rv = q − p · rm² / rv
//! ```
//!
//! # Derivation 5: the fold
//!
//! Replacing, once after training, `rv ← q · rv − p · rm²` makes the eval
//! denominator `sqrt(σ_k² + ε)`: the eval output of the *first* BatchNorm
//! after dropout then has variance `σ_k² / (σ_k² + ε)`, its dropout-free
//! value, at zero inference cost. On realised buffers it is exact up to
//! their fluctuation, and in expectation
//!
//! ```text
//! E[q rv_t − p rm_t²] = q E[rv_t] − p (E[rm_t]² + Var rm_t)
//! ```
//!
//! (exact; at stationarity `σ_k² − p · Var rm`, a bias of order
//! `p m_e v_k / B`). A fold `q rv − p rm² ≤ 0` has no folded value; on
//! realised buffers finite-batch noise can produce it when `p rm²/(q rv)` is
//! close to 1 ([`NoFold`]), so `eval bn` reports it per channel, and only
//! [`fold_running_var`], which must fold a whole layer, refuses it. Deeper BatchNorms see
//! inputs whose whole distribution (not only the mask) differs between train
//! and eval, so the fold is exact for the first one only; the deep-stack
//! experiment ([`crate::eval::stack`]) measures how much it leaves at depth.
//!
//! # Assumptions
//!
//! Masks independent of the data and across examples and channels;
//! examples and batches independent; `σ_k² > 0`; `0 <= p < 1`.

use super::Rate;
use crate::error::{Error, check_finite_vec, check_len};

/// `Var z = (σ² + p μ²)/q`: the training input's variance, which is also
/// the stationary `E[running_var]`.
pub fn train_variance(mu: f64, sigma2: f64, rate: Rate) -> f64 {
    (sigma2 + rate.p() * mu * mu) / rate.q()
}

/// `E[b_t]` of an EMA `b_t = (1 − m) b_{t−1} + m u_t` with `E[u_t] = target`,
/// after `t` updates from `init`: `(1 − m)^t init + (1 − (1 − m)^t) target`.
pub fn ema_expectation(t: u32, momentum: f64, init: f64, target: f64) -> f64 {
    let decay = super::ipow(1.0 - momentum, t);
    decay * init + (1.0 - decay) * target
}

/// `Var rm_t = m (1 − (1 − m)^{2t}) / (2 − m) · v / B` for batch means of
/// variance `v / B`.
pub fn running_mean_variance(t: u32, momentum: f64, v: f64, batch: usize) -> f64 {
    let decay2 = super::ipow(1.0 - momentum, 2 * t);
    momentum * (1.0 - decay2) / (2.0 - momentum) * v / batch as f64
}

/// `E[q rv_t − p rm_t²]` after `t` batches of `B` from buffers `(rm0, rv0)`.
pub fn expected_folded_var(
    t: u32,
    momentum: f64,
    mu: f64,
    sigma2: f64,
    rate: Rate,
    batch: usize,
    init: (f64, f64),
) -> f64 {
    let v = train_variance(mu, sigma2, rate);
    let rm = ema_expectation(t, momentum, init.0, mu);
    let rv = ema_expectation(t, momentum, init.1, v);
    rate.q() * rv - rate.p() * (rm * rm + running_mean_variance(t, momentum, v, batch))
}

/// `c(μ, σ)² = q / (1 + p (μ/σ)²)`; `σ > 0` required.
pub fn c_squared(mu: f64, sigma: f64, rate: Rate) -> Result<f64, Error> {
    if !(sigma > 0.0 && sigma.is_finite() && mu.is_finite()) {
        return Err(Error::Degenerate {
            what: format!(
                "c(mu, sigma) needs finite mu and sigma > 0 (mu = {mu}, sigma = {sigma})"
            ),
        });
    }
    Ok(rate.q() / (1.0 + super::layernorm::p_r2(mu, sigma, rate)))
}

/// Eval-mode output variance `σ² / (rv + ε)` of a channel with data
/// variance `σ²` (γ = 1).
pub fn eval_output_variance(sigma2: f64, running_var: f64, eps: f64) -> f64 {
    sigma2 / (running_var + eps)
}

/// `σ² = q · rv − p · rm²` from the buffers.
pub fn sigma2_from_buffers(running_mean: f64, running_var: f64, rate: Rate) -> f64 {
    rate.q() * running_var - rate.p() * running_mean * running_mean
}

/// `c² = q − p · rm² / rv` from the buffers (`rv > 0`).
pub fn c_squared_from_buffers(running_mean: f64, running_var: f64, rate: Rate) -> f64 {
    rate.q() - rate.p() * running_mean * running_mean / running_var
}

/// A channel whose buffers give a fold `q · rv − p · rm² ≤ 0`: no folded
/// value exists for it.
///
/// This is not an input error. The buffers are EMAs of finite-batch
/// statistics (Derivation 2), so a realised `rv` can fall below, and a
/// realised `rm²` rise above, their stationary values. The fold is `q · rv`
/// times `1 − ratio` with `ratio = p · rm² / (q · rv)`, and `ratio` is
/// `p μ²/(σ² + p μ²) < 1` at the expected buffers: when it is near 1 (a
/// channel with `μ ≫ σ`), a fluctuation of the size Derivation 2 gives
/// pushes it past 1. A `ratio` far above 1 is beyond that noise (the rate
/// or the placement of the layer is wrong); the ratio is reported so the
/// reader can tell which.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NoFold {
    /// The channel's index.
    pub channel: usize,
    /// `q · rv − p · rm²` (finite, `≤ 0`).
    pub fold: f64,
    /// `p · rm² / (q · rv)` (`≥ 1`).
    pub ratio: f64,
}

impl std::fmt::Display for NoFold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "channel {}: fold q*running_var - p*running_mean^2 = {} <= 0 \
             (p*running_mean^2/(q*running_var) = {:.6}); running buffers estimated from finite \
             batches can do this when that ratio is close to 1 — no folded value",
            self.channel, self.fold, self.ratio
        )
    }
}

/// The fold of each channel on its own: `Ok(q · rv − p · rm²)` where it is
/// `> 0`, [`NoFold`] where it is not. Rejects (as input errors) mismatched
/// or non-finite buffers, `rv ≤ 0`, and a fold that overflows, naming the
/// channel.
pub fn fold_channels(
    running_mean: &[f64],
    running_var: &[f64],
    rate: Rate,
) -> Result<Vec<Result<f64, NoFold>>, Error> {
    check_finite_vec("running_mean", running_mean)?;
    check_finite_vec("running_var", running_var)?;
    check_len("running_var", running_var, running_mean.len())?;
    running_mean
        .iter()
        .zip(running_var)
        .enumerate()
        .map(|(channel, (&rm, &rv))| {
            if rv <= 0.0 {
                return Err(Error::InvalidOption {
                    what: format!("channel {channel}: running_var = {rv} must be > 0"),
                });
            }
            let fold = sigma2_from_buffers(rm, rv, rate);
            if !fold.is_finite() {
                return Err(Error::Overflow {
                    what: format!("channel {channel}: q*running_var - p*running_mean^2"),
                });
            }
            if fold > 0.0 {
                Ok(Ok(fold))
            } else {
                let ratio = rate.p() * rm * rm / (rate.q() * rv);
                if !ratio.is_finite() {
                    return Err(Error::Degenerate {
                        what: format!(
                            "channel {channel}: running_var = {rv} is too small to fold at this \
                             rate (q*running_var underflows to 0)"
                        ),
                    });
                }
                Ok(Err(NoFold {
                    channel,
                    fold,
                    ratio,
                }))
            }
        })
        .collect()
}

/// The fold `rv ← q · rv − p · rm²` of every channel ([`fold_channels`]);
/// a channel without one ([`NoFold`]) is an error naming it, since a layer
/// cannot be folded in part.
pub fn fold_running_var(
    running_mean: &[f64],
    running_var: &[f64],
    rate: Rate,
) -> Result<Vec<f64>, Error> {
    fold_channels(running_mean, running_var, rate)?
        .into_iter()
        .map(|r| {
            r.map_err(|no_fold| Error::Degenerate {
                what: no_fold.to_string(),
            })
        })
        .collect()
}

/// `c_k = sqrt(q − p · rm_k² / rv_k)` per channel, through the fold (so the
/// same channels are rejected).
pub fn c_from_buffers(
    running_mean: &[f64],
    running_var: &[f64],
    rate: Rate,
) -> Result<Vec<f64>, Error> {
    fold_running_var(running_mean, running_var, rate)?;
    Ok(running_mean
        .iter()
        .zip(running_var)
        .map(|(&rm, &rv)| c_squared_from_buffers(rm, rv, rate).sqrt())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn li_et_al_case_is_two_one_half() {
        let rate = Rate::new(0.5).unwrap();
        assert_eq!(train_variance(0.0, 1.0, rate), 2.0);
        assert_eq!(c_squared(0.0, 1.0, rate).unwrap(), 0.5);
        assert_eq!(eval_output_variance(1.0, 2.0, 0.0), 0.5);
    }

    #[test]
    fn inversion_recovers_sigma_and_c() {
        // μ = 1, σ² = 4, p = 0.5: v = (4 + 0.5)/0.5 = 9; σ² = 0.5·9 − 0.5·1 = 4;
        // c² = 0.5 − 0.5/9 = 4/9 = q/(1 + p/4) = 0.5/1.125.
        let rate = Rate::new(0.5).unwrap();
        assert_eq!(train_variance(1.0, 4.0, rate), 9.0);
        assert_eq!(sigma2_from_buffers(1.0, 9.0, rate), 4.0);
        let c2 = c_squared_from_buffers(1.0, 9.0, rate);
        // Two roundings each side: 4 ε of relative error.
        assert!((c2 - 4.0 / 9.0).abs() <= 4.0 * f64::EPSILON);
        assert!((c_squared(1.0, 2.0, rate).unwrap() - 4.0 / 9.0).abs() <= 4.0 * f64::EPSILON);
    }

    #[test]
    fn ema_finite_time_and_fold_error_names_the_channel() {
        assert_eq!(ema_expectation(0, 0.1, 1.0, 5.0), 1.0);
        assert_eq!(ema_expectation(1, 1.0, 1.0, 5.0), 5.0);
        // t = 1, m = 1: Var rm_1 = 1·(1 − 0)/1 · v/B.
        assert_eq!(running_mean_variance(1, 1.0, 3.0, 6), 0.5);
        let rate = Rate::new(0.5).unwrap();
        let err = fold_running_var(&[1.0, 2.0], &[9.0, 1.0], rate).unwrap_err();
        assert!(err.to_string().contains("channel 1"), "{err}");
        assert!(fold_running_var(&[1.0], &[9.0, 1.0], rate).is_err());
        assert!(fold_running_var(&[1.0], &[0.0], rate).is_err());
    }
}
