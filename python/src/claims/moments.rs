//! The moment and kept-count claims on a Python dropout: two training
//! passes per draw through the suite's [`PairSampler`], at the user's rate.
//!
//! # One pass for the claims on the moment input
//!
//! The seven claims on the moment input (four raw moments, the pair-form
//! variance, the sum's mean and variance) read the same two rows per draw,
//! so they share one run of [`PairSampler`] ([`SharedPass`]): its statistic
//! writes every claim's components side by side and each claim takes its
//! slice of the means. Before issue 33 each claim drew its own `2n` rows,
//! so a model width spent seven times the forward calls and Rust work (273 s
//! for `nn.Dropout` at d = 768). Each claim's test is the same (same
//! statistic, same law per draw, same budget); the claims now read the same
//! draws, so their verdicts are dependent, which the Bonferroni split of the
//! family rate does not need to exclude. The Python forward's rows come
//! from the user's generator, not from the claim's stream, so the numbers
//! differ from before only in which of the user's rows each claim reads.

use std::sync::{Arc, Mutex};

use dropmc::Error;
use dropmc::claims::dropout::{self, Draw, DropoutClaim, PairSampler, ids};
use dropmc::claims::{Card, Claim};
use dropmc::engine::{Budget, estimate};
use dropmc::formulas::dropout as f;
use dropmc::ops::{DropoutLayer, Rate};
use dropmc::stats::{Estimate, Statistic};

use super::composite::CompositeNull;
use super::rules::{ONCE, accepted_survivors};
use super::{COUNT_X, MOMENT_SAMPLES, PyClaim, Setup};
use crate::forward::{Dtype, lock};

/// The input whose moments a correct dropout's outputs follow, in the
/// units of [`unit_scale`]: `a = q·s·scale`, with `s = fl(x/q)` the kept
/// output `semantics.survivors_exact` accepts (in the dtype's rounding;
/// its first accepted rounding).
///
/// A correct dropout outputs `s` with probability `q` and `0` otherwise, so
/// `E[z^r] = q s^r`, which is the textbook `a^r / q^(r−1)` at `a = q s`, and
/// `Var z = s² p q = a² p/q`; the sums follow. For a normal `x`, `s` is
/// `x/q` to a relative `ε/2` and `q s = x` to the same, far below any
/// moment claim's resolution, so the target is the textbook one at `x`
/// itself (and the scale is 1). For a subnormal `x` the rounding is the
/// value: in float32, `x = 2⁻¹⁴⁹` and `q = 0.9` give `fl(x/q) = x`, so
/// `E[z] = 0.9 x`, not `x` (before issue 23 the mean failed there at
/// `z = −333` on a correct dropout).
pub(super) fn effective_input(x: f64, rate: Rate, dtype: Dtype) -> f64 {
    let x = dtype.round(x);
    let scale = unit_scale(x, rate, dtype);
    if scale == 1.0 {
        x
    } else {
        rate.q() * (accepted_survivors(x, rate, dtype)[ONCE] * scale)
    }
}

/// Largest scale exponent: `2¹⁰⁰⁰` is finite in float64, and lifts the
/// smallest float64 subnormal `2⁻¹⁰⁷⁴` to `2⁻⁷⁴`, whose eighth power (the
/// fourth moment's square, in its standard error) is still normal.
const MAX_SCALE_EXPONENT: i32 = 1000;

/// The power of two a unit's outputs are multiplied by before the moment
/// statistics: 1 for a zero or normal input, and for a subnormal one the
/// power that lifts its survivor to about 1. The moments of `s` are tiny
/// (`(2⁻¹⁴⁹)⁴ ≈ 4·10⁻¹⁸⁰`) and the square in a standard error underflows
/// to 0, which would make any deviation infinitely significant; a power of
/// two multiplies exactly, so the scaled test is the same test.
pub(super) fn unit_scale(x: f64, rate: Rate, dtype: Dtype) -> f64 {
    let x = dtype.round(x);
    if x == 0.0 || x.abs() >= dtype.smallest_normal() {
        return 1.0;
    }
    let s = accepted_survivors(x, rate, dtype)[ONCE].abs();
    let exponent = (-s.log2().floor() as i32).min(MAX_SCALE_EXPONENT);
    2f64.powi(exponent)
}

/// Elements (rows times units, both passes) the moment pass asks of the
/// forward at most: the suite's [`MOMENT_SAMPLES`] pairs up to `d = 250`
/// units, fewer pairs above (module docs).
pub const MOMENT_ELEMENTS: u64 = 500_000_000;

/// Draws of the moment pass on an input of `d` units: [`MOMENT_SAMPLES`],
/// or `MOMENT_ELEMENTS / (2d)` when that is fewer (each draw is two rows).
///
/// A model width reads `2d` elements per draw: at `d = 768`, 10⁶ pairs are
/// 1.5·10⁹ elements, 46 s of CPU in torch's `nn.Dropout` alone. The cap
/// keeps the whole call within seconds: 325 520 pairs at `d = 768`, 61 035
/// at `d = 4096`, above the per-unit claims' minimum budget at `p = 0.1`
/// (3.4·10⁴); a rate whose skewness needs more gets its minimum, so no
/// claim is inconclusive by construction. The size of every test is unchanged; the per-unit
/// claims' minimum detectable effect grows as `√(10⁶ / n)` (1.75× at
/// `d = 768`), while the sum claims, which average over all `d` units,
/// resolve a layer-wide error (a wrong scale or rate) `√d` times finer
/// than one unit does. The MDE is reported with every claim.
pub fn moment_budget(d: usize) -> u64 {
    MOMENT_SAMPLES.min(MOMENT_ELEMENTS / (2 * d.max(1) as u64))
}

/// A per-draw statistic of the two passes, writing one claim's components.
type PairStatistic = fn(&Draw, &mut [f64]);

/// One run of [`PairSampler`] on an input whose statistics are those of
/// several claims, side by side (module docs): the first claim to ask runs
/// it at its budget, the others take their slice when their budget is the
/// same (a claim at another budget, as an extreme rate's minimum may give,
/// runs its own pass).
struct SharedPass {
    x: Vec<f64>,
    p: f64,
    /// Each claim's statistic and number of components, in order.
    statistics: Vec<(PairStatistic, usize)>,
    /// The budget of the pass run, and each claim's estimates from it.
    done: Mutex<Option<(u64, Vec<Vec<Estimate>>)>>,
}

impl SharedPass {
    /// Claim `index`'s estimates at `budget` on `layer`.
    fn estimates(
        &self,
        layer: &dyn DropoutLayer,
        budget: Budget,
        index: usize,
    ) -> Result<Vec<Estimate>, Error> {
        let mut done = lock(&self.done);
        if let Some((samples, all)) = done.as_ref()
            && *samples == budget.samples
        {
            return Ok(all[index].clone());
        }
        let statistics = &self.statistics;
        let side_by_side = |draw: &Draw, out: &mut [f64]| {
            let mut at = 0;
            for (statistic, dim) in statistics {
                statistic(draw, &mut out[at..at + dim]);
                at += dim;
            }
        };
        let sampler = PairSampler {
            layer,
            x: &self.x,
            p: self.p,
            dim: statistics.iter().map(|(_, dim)| dim).sum(),
            pairs: true,
            statistic: &side_by_side,
        };
        let mut all = estimate(&sampler, budget)?.estimates();
        let mut split = Vec::with_capacity(statistics.len());
        for (_, dim) in statistics {
            let rest = all.split_off(*dim);
            split.push(std::mem::replace(&mut all, rest));
        }
        let mine = split[index].clone();
        *done = Some((budget.samples, split));
        Ok(mine)
    }
}

/// The row sum's mean at `setup`'s input (`E[S] = Σ_k q s_k`, at the
/// effective input), its statistic and its width under the null
/// ([`dropout::sum_null_range`]): what `dropout.sum_mean` tests, for the
/// same mean at other call sizes ([`crate::small_calls`]).
pub fn sum_mean_target(setup: &Setup) -> (Vec<f64>, Statistic, Vec<f64>) {
    let (rate, dtype) = (setup.rate, setup.forward.dtype());
    let a: Vec<f64> = setup
        .moment_x
        .iter()
        .map(|&v| effective_input(v, rate, dtype))
        .collect();
    (
        vec![f::sum_mean(&a)],
        Statistic::masked_sum(&a, rate.q(), false),
        dropout::sum_null_range(&a, rate),
    )
}

/// A moment claim: two training passes per draw through [`PairSampler`],
/// the `index`-th statistic of `pass`, stated by the Rust claim `claim`
/// (its card, its closed form at the effective input, its statistic as a
/// mean: [`DropoutClaim::mean_statistic`]).
fn pair_claim<'a>(claim: &DropoutClaim, pass: Arc<SharedPass>, index: usize) -> PyClaim<'a> {
    let statistic = claim.mean_statistic;
    // The suite's budget for the input's width, raised to the test's
    // minimum where an extreme rate makes the statistic skewed enough to
    // need more (p or q below about 0.005), so no claim is inconclusive by
    // construction.
    let samples = moment_budget(pass.x.len()).max(statistic.min_samples());
    PyClaim {
        null_range: claim.null_range(),
        card: Card {
            samples,
            statistic,
            ..claim.card
        },
        analytic: claim.analytic_values().unwrap_or_default(),
        note: None,
        estimate: Box::new(move |subject, budget| pass.estimates(subject.dropout, budget, index)),
    }
}

/// The Rust claims `claims` (stated at the effective input) run on the
/// layer's input `x`, sharing one pass.
fn shared_claims<'a>(x: &[f64], rate: Rate, claims: &[DropoutClaim]) -> Vec<PyClaim<'a>> {
    let pass = Arc::new(SharedPass {
        x: x.to_vec(),
        p: rate.p(),
        statistics: claims
            .iter()
            .map(|c| {
                let dim = c.analytic_values().map_or(0, |v| v.len());
                (c.draw_statistic, dim)
            })
            .collect(),
        done: Mutex::new(None),
    });
    claims
        .iter()
        .enumerate()
        .map(|(index, claim)| pair_claim(claim, Arc::clone(&pass), index))
        .collect()
}

/// The moment and kept-count claims (none at `p = 0`, where every moment
/// is the input's and `semantics.p_zero_identity` judges the layer): the
/// Rust suite's claims at the user's rate, their targets at the effective
/// input ([`effective_input`]), the layer called on the input itself.
pub(super) fn moment_claims<'a>(setup: &Setup) -> Vec<PyClaim<'a>> {
    let rate = setup.rate;
    if rate.p() == 0.0 {
        return Vec::new();
    }
    let x = setup.moment_x.clone();
    let dtype = setup.forward.dtype();
    // The targets at the effective input; the layer is called on `x`.
    let a: Vec<f64> = x.iter().map(|&v| effective_input(v, rate, dtype)).collect();
    let scaled: Vec<String> = x
        .iter()
        .enumerate()
        .filter_map(|(k, &v)| {
            let scale = unit_scale(v, rate, dtype);
            (scale != 1.0).then(|| format!("unit {k} times 2^{}", scale.log2()))
        })
        .collect();
    let note = (!scaled.is_empty()).then(|| {
        format!(
            "subnormal input: outputs and targets of {} (exact, so that their squares do not underflow)",
            scaled.join(", ")
        )
    });
    let mut claims = shared_claims(&x, rate, &dropout::at(&a, rate));
    claims.extend(shared_claims(
        &COUNT_X,
        rate,
        &[dropout::kept_count_at(COUNT_X.len(), rate)],
    ));
    for claim in &mut claims {
        claim.note = note.clone();
    }
    claims
}

/// A moment claim's target as a function of one unit's kept value `s` (in
/// the unit's scaled units, [`unit_scale`]): `E[z^r] = q s^r`, `Var z = p q
/// s²`; the sum claims add the units' targets. At `s = x/q` these are the
/// textbook targets of [`moment_claims`] (`q (x/q)^r = x^r/q^(r−1)`).
struct MomentTarget {
    id: &'static str,
    of_survivor: fn(f64, Rate) -> f64,
    summed: bool,
}

const MOMENT_TARGETS: [MomentTarget; 7] = [
    MomentTarget {
        id: ids::MEAN,
        of_survivor: |s, r| r.q() * s,
        summed: false,
    },
    MomentTarget {
        id: ids::SECOND_MOMENT,
        of_survivor: |s, r| r.q() * s * s,
        summed: false,
    },
    MomentTarget {
        id: ids::THIRD_MOMENT,
        of_survivor: |s, r| r.q() * s * s * s,
        summed: false,
    },
    MomentTarget {
        id: ids::FOURTH_MOMENT,
        of_survivor: |s, r| r.q() * (s * s) * (s * s),
        summed: false,
    },
    MomentTarget {
        id: ids::VARIANCE,
        of_survivor: |s, r| r.p() * r.q() * s * s,
        summed: false,
    },
    MomentTarget {
        id: ids::SUM_MEAN,
        of_survivor: |s, r| r.q() * s,
        summed: true,
    },
    MomentTarget {
        id: ids::SUM_VARIANCE,
        of_survivor: |s, r| r.p() * r.q() * s * s,
        summed: true,
    },
];

/// The composite nulls of the moment claims in float16 and bfloat16 (none
/// in float32 and float64, whose roundings are far below any moment's
/// resolution, nor at `p = 0`).
///
/// The null: each unit's kept value is one value `s_k` of the set the
/// survivor rule admits (`setup.rounding`: any of the dtype's roundings of
/// `x_k/q`, or `x_k/q` rounded once), the same on every draw. A per-unit
/// target `g(s_k)` then lies in `[min g, max g]` over that set (exactly:
/// the set is finite), a sum's `Σ_k g(s_k)` in `[Σ_k min g, Σ_k max g]`
/// (each unit's value chosen on its own). With one admissible value the
/// interval is a point, the simple null.
pub fn moment_nulls(setup: &Setup) -> Vec<CompositeNull> {
    let (rate, dtype) = (setup.rate, setup.forward.dtype());
    if rate.p() == 0.0 || !matches!(dtype, Dtype::F16 | Dtype::BF16) {
        return Vec::new();
    }
    // Per unit, the admissible kept values in the unit's scaled units.
    let survivors: Vec<Vec<f64>> = setup
        .moment_x
        .iter()
        .map(|&v| {
            let x = dtype.round(v);
            let scale = unit_scale(x, rate, dtype);
            setup
                .rounding
                .admitted(x, rate, dtype)
                .into_iter()
                .map(|s| s * scale)
                .collect()
        })
        .collect();
    MOMENT_TARGETS
        .iter()
        .map(|t| {
            let per_unit: Vec<(f64, f64)> = survivors
                .iter()
                .map(|set| {
                    let values = set.iter().map(|&s| (t.of_survivor)(s, rate));
                    values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
                        (lo.min(v), hi.max(v))
                    })
                })
                .collect();
            let intervals = if t.summed {
                vec![
                    per_unit
                        .iter()
                        .fold((0.0, 0.0), |(lo, hi), (a, b)| (lo + a, hi + b)),
                ]
            } else {
                per_unit
            };
            CompositeNull {
                id: t.id,
                dtype,
                intervals,
            }
        })
        .collect()
}
