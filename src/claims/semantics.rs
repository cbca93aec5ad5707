//! The semantics family: evaluation, keep rule, survivors, backward pass and
//! the rate rules of a dropout layer. Statements and derivations:
//! [`crate::formulas::semantics`].
//!
//! The moment claims of the [`super::dropout`] family cover the rest of the
//! semantics: `dropout.second_moment` (`E[z²] = x²/q` per unit) and
//! `dropout.original_scheme` (train `m x`, eval `q x`, equal in expectation).
//!
//! Each rule that must hold on every draw is a deterministic check
//! ([`RuleClaim`]): the claim's value is the number of violations,
//! its target 0, its standard error 0.

use rand::RngExt;

use super::fn_claim::{FnClaim, RuleClaim, sample_means};
use super::{Card, Shape};
use super::{Claim, listed};
use crate::engine::Stream;
use crate::error::Error;
use crate::formulas::semantics as f;
use crate::ops::{BackwardPass, CountingRng, EvalPass, Rate, Subject, TrainPass};
use crate::stats::Statistic;

/// Drop rate of the semantics claims.
pub const P: f64 = 0.3;
/// Fixed inputs: signs, a signed zero, a subnormal, large and small values.
pub const X: [f64; 8] = [0.5, -1.2, 3.0, -0.0, 2.0, 5e-324, 1e300, -7.25];
/// Units per draw of the keep-fraction claim.
pub const KEEP_D: usize = 64;
/// Step of the finite-difference check.
pub const H: f64 = 1.0;

/// The family name its claims carry.
const FAMILY: &str = "semantics";

/// The family's claim ids, for code that names one claim (the Python
/// binding's rules and diagnosis, the mutant gallery): each is written
/// once, here.
pub mod ids {
    pub const EVAL_IDENTITY: &str = "semantics.eval_identity";
    pub const KEEP_FRACTION: &str = "semantics.keep_fraction";
    pub const SURVIVORS_EXACT: &str = "semantics.survivors_exact";
    pub const BACKWARD_MASK: &str = "semantics.backward_mask";
    pub const BACKWARD_FINITE_DIFFERENCE: &str = "semantics.backward_finite_difference";
    pub const P_ZERO_IDENTITY: &str = "semantics.p_zero_identity";
    pub const RATE_RULE: &str = "semantics.rate_rule";
}

/// `X` followed by three standard-normal-ish values drawn from the stream.
fn inputs(rng: &mut Stream) -> Vec<f64> {
    let mut x = X.to_vec();
    for _ in 0..3 {
        x.push(4.0 * rng.random::<f64>() - 2.0);
    }
    x
}

fn eval_identity(s: &Subject, rng: &mut Stream, out: &mut [f64]) -> Result<(), Error> {
    let x = inputs(rng);
    let mut z = vec![f64::NAN; x.len()];
    let mut counting = CountingRng::new(rng);
    s.dropout
        .forward_eval(EvalPass::new(&x, &mut z), P, &mut counting)?;
    out[0] = x
        .iter()
        .zip(&z)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count() as f64;
    out[1] = counting.draws() as f64;
    Ok(())
}

fn keep_fraction(s: &Subject, rng: &mut Stream, out: &mut [f64]) -> Result<(), Error> {
    let x = [1.0; KEEP_D];
    let (mut z, mut m) = ([0.0; KEEP_D], [false; KEEP_D]);
    s.dropout
        .forward_train(TrainPass::new(&x, &mut z, &mut m), P, rng)?;
    out[0] = m.iter().filter(|k| **k).count() as f64 / KEEP_D as f64;
    Ok(())
}

/// Which accepted rounding a kept output is: 1 for `fl(x/q)` only, 2 for
/// `fl(x · fl(1/q))` only, 3 for both (they coincide), 0 for neither (or
/// the two more than one ulp apart, which [`f::kept_roundings`] rules out).
fn kept_rounding(x: f64, z: f64, rate: Rate) -> u8 {
    let (division, reciprocal) = f::kept_roundings(x, rate);
    if f::ulp_distance(division, reciprocal) > 1 {
        return 0;
    }
    u8::from(z.to_bits() == division.to_bits())
        | (u8::from(z.to_bits() == reciprocal.to_bits()) << 1)
}

/// Per kept or dropped unit of one draw: violations and the roundings seen.
fn survivors_draw(s: &Subject, rng: &mut Stream) -> Result<[usize; 3], Error> {
    let x = inputs(rng);
    let rate = Rate::new(P)?;
    let mut z = vec![f64::NAN; x.len()];
    let mut m = vec![false; x.len()];
    s.dropout
        .forward_train(TrainPass::new(&x, &mut z, &mut m), P, rng)?;
    let mut seen = [0; 3];
    for ((a, b), kept) in x.iter().zip(&z).zip(&m) {
        let kind = if *kept {
            kept_rounding(*a, *b, rate)
        } else {
            3 * u8::from(*b == 0.0)
        };
        match (*kept, kind) {
            (_, 0) => seen[0] += 1,
            (true, 1) => seen[1] += 1,
            (true, 2) => seen[2] += 1,
            _ => {}
        }
    }
    Ok(seen)
}

fn survivors(s: &Subject, rng: &mut Stream, out: &mut [f64]) -> Result<(), Error> {
    out[0] = survivors_draw(s, rng)?[0] as f64;
    Ok(())
}

/// The rounding a subject's kept outputs use, from a few draws of the
/// claim's inputs (the inputs where the two roundings differ tell them
/// apart): the line `semantics.survivors_exact` prints.
pub fn survivors_rounding(s: &Subject) -> Result<String, Error> {
    let mut rng = crate::engine::stream(crate::engine::derive_seed(0, "survivors/rounding"), 0);
    let mut totals = [0; 3];
    for _ in 0..64 {
        let seen = survivors_draw(s, &mut rng)?;
        for (t, v) in totals.iter_mut().zip(seen) {
            *t += v;
        }
    }
    Ok(match (totals[1] > 0, totals[2] > 0) {
        (true, false) => "kept outputs rounded as fl(x/q) (one division)".into(),
        (false, true) => {
            "kept outputs rounded as fl(x * fl(1/q)) (reciprocal, within 1 ulp)".into()
        }
        (true, true) => "kept outputs mix fl(x/q) and fl(x * fl(1/q))".into(),
        (false, false) => "the two roundings agree on every kept output drawn".into(),
    })
}

fn backward_mask(s: &Subject, rng: &mut Stream, out: &mut [f64]) -> Result<(), Error> {
    let x = inputs(rng);
    let rate = Rate::new(P)?;
    let n = x.len();
    let (mut z, mut m, mut gi) = (vec![0.0; n], vec![false; n], vec![f64::NAN; n]);
    s.dropout
        .forward_train(TrainPass::new(&x, &mut z, &mut m), P, rng)?;
    let g: Vec<f64> = (0..n).map(|_| 4.0 * rng.random::<f64>() - 2.0).collect();
    s.dropout.backward(BackwardPass::new(&g, &m, &mut gi), P)?;
    out[0] = (0..n)
        .filter(|&k| {
            let want = if m[k] { g[k] / rate.q() } else { 0.0 };
            {
                let err = (gi[k] - want).abs();
                err.is_nan() || err > f::backward_bound(g[k], rate)
            }
        })
        .count() as f64;
    Ok(())
}

fn finite_difference(s: &Subject, rng: &mut Stream, out: &mut [f64]) -> Result<(), Error> {
    // Finite inputs of moderate size, so that x ± h is meaningful.
    let x: Vec<f64> = X[..5].to_vec();
    let rate = Rate::new(P)?;
    let n = x.len();
    let g: Vec<f64> = (0..n).map(|_| 4.0 * rng.random::<f64>() - 2.0).collect();
    let start = rng.clone();
    let (mut z, mut m, mut gi) = (vec![0.0; n], vec![false; n], vec![0.0; n]);
    s.dropout
        .forward_train(TrainPass::new(&x, &mut z, &mut m), P, rng)?;
    s.dropout.backward(BackwardPass::new(&g, &m, &mut gi), P)?;
    let (mut zp, mut zm, mut mp, mut mm) =
        (vec![0.0; n], vec![0.0; n], vec![false; n], vec![false; n]);
    let mut violations = 0;
    for k in 0..n {
        let (mut xp, mut xm) = (x.clone(), x.clone());
        xp[k] += H;
        xm[k] -= H;
        s.dropout
            .forward_train(TrainPass::new(&xp, &mut zp, &mut mp), P, &mut start.clone())?;
        s.dropout
            .forward_train(TrainPass::new(&xm, &mut zm, &mut mm), P, &mut start.clone())?;
        // The replay must reproduce the mask: a layer draws only from `rng`.
        let replayed = mp == m && mm == m;
        let fd: f64 = (0..n).map(|j| g[j] * (zp[j] - zm[j])).sum::<f64>() / (2.0 * H);
        let ok = (fd - gi[k]).abs() <= f::finite_difference_bound(x[k], g[k], H, rate);
        violations += usize::from(!(replayed && ok));
    }
    out[0] = violations as f64;
    Ok(())
}

fn p_zero(s: &Subject, rng: &mut Stream, out: &mut [f64]) -> Result<(), Error> {
    let x = inputs(rng);
    let n = x.len();
    let (mut z, mut m, mut gi) = (vec![f64::NAN; n], vec![false; n], vec![f64::NAN; n]);
    s.dropout
        .forward_train(TrainPass::new(&x, &mut z, &mut m), 0.0, rng)?;
    let g: Vec<f64> = (0..n).map(|_| 4.0 * rng.random::<f64>() - 2.0).collect();
    s.dropout
        .backward(BackwardPass::new(&g, &m, &mut gi), 0.0)?;
    out[0] = (0..n)
        .filter(|&k| !m[k] || z[k].to_bits() != x[k].to_bits() || gi[k].to_bits() != g[k].to_bits())
        .count() as f64;
    Ok(())
}

fn rate_rule(s: &Subject, rng: &mut Stream, out: &mut [f64]) -> Result<(), Error> {
    let x = [1.0, -2.0, 0.5];
    let (mut z, mut m) = ([0.0; 3], [true; 3]);
    let mut accepted = 0;
    for p in f::INVALID_RATES {
        let rejected = |r: Result<(), Error>| matches!(r, Err(Error::InvalidRate { .. }));
        let layer = s.dropout;
        let train = layer.forward_train(TrainPass::new(&x, &mut z, &mut m), p, rng);
        accepted += usize::from(!rejected(train));
        let eval = layer.forward_eval(EvalPass::new(&x, &mut z), p, rng);
        accepted += usize::from(!rejected(eval));
        let back = layer.backward(BackwardPass::new(&x, &[true; 3], &mut z), p);
        accepted += usize::from(!rejected(back));
    }
    out[0] = accepted as f64;
    Ok(())
}

/// The rules that hold on every draw, in report order (the keep fraction,
/// a statistical claim, stands after the first).
static RULES: [RuleClaim; 6] = [
    RuleClaim::new(
        ids::EVAL_IDENTITY,
        FAMILY,
        "eval: [bits of z differing from x, generator draws] = [0, 0]",
        20_000,
        2,
        eval_identity,
    ),
    RuleClaim::new(
        ids::SURVIVORS_EXACT,
        FAMILY,
        "kept z_k = fl(x_k / q) or fl(x_k * fl(1/q)) bit for bit in the input's dtype, dropped z_k = 0: 0 violations",
        20_000,
        1,
        survivors,
    )
    .describing(survivors_rounding),
    RuleClaim::new(
        ids::BACKWARD_MASK,
        FAMILY,
        "backward = g m / q with the forward's mask (to the dtype's roundings): 0 violations",
        20_000,
        1,
        backward_mask,
    ),
    RuleClaim::new(
        ids::BACKWARD_FINITE_DIFFERENCE,
        FAMILY,
        "backward = central difference of the replayed masked forward: 0 violations",
        5_000,
        1,
        finite_difference,
    ),
    RuleClaim::new(
        ids::P_ZERO_IDENTITY,
        FAMILY,
        "p = 0: z = x, mask all kept, backward = g, bit for bit: 0 violations",
        20_000,
        1,
        p_zero,
    ),
    RuleClaim::new(
        ids::RATE_RULE,
        FAMILY,
        "p in {1, -0.1, 1.5, NaN, +inf, -inf}: every op returns InvalidRate (0 accepted)",
        64,
        1,
        rate_rule,
    ),
];

/// `semantics.keep_fraction`, the family's one statistical claim.
static KEEP_FRACTION: FnClaim = FnClaim {
    card: Card::new(
        ids::KEEP_FRACTION,
        FAMILY,
        "d=64, p=0.3: #kept / d = q (binomial test)",
        Shape::Scalar,
        100_000,
    )
    .with_statistic(Statistic::Indicator {
        trials: KEEP_D as u64,
    }),
    analytic: || Ok(vec![Rate::new(P)?.q()]),
    oracle: None,
    estimate: |s, b| sample_means(s, b, 1, keep_fraction),
    fast: None,
    law: None,
};

/// The card of the family's claim `id` (what it states: id, formula text,
/// shape, statistic), for a caller that runs the same statement its own
/// way (the Python binding, on the user's layer).
pub fn card(id: &str) -> Option<Card> {
    RULES
        .iter()
        .map(|r| r.card)
        .chain([KEEP_FRACTION.card])
        .find(|c| c.id == id)
}

/// The family's claims in report order: the first rule, the keep fraction,
/// then the other rules (named and described in [`super::families`]).
pub fn claims() -> Vec<&'static dyn Claim> {
    let first: [&'static dyn Claim; 2] = [&RULES[0], &KEEP_FRACTION];
    first.into_iter().chain(listed(&RULES[1..])).collect()
}
