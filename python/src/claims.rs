//! The conformance claims on a Python dropout, at the user's drop rate.
//!
//! The Rust suite's claims ([`dropmc::conformance`]) fix their own drop
//! rates (`p = 0.3` for the moments and the semantics rules) and call a
//! layer's forward with that `p`. A Python `forward(x, training)` has its
//! rate built in, so this module states the same claims at the user's `p`
//! and judges them with the suite's own machinery: each is a
//! [`dropmc::claims::Claim`] checked by [`dropmc::claims::check`], so the
//! test of each component (Student-t for a mean, exact binomial for counts,
//! exact for violations), the per-assertion level
//! ([`dropmc::stats::critical_z`], from the suite's family α) and the
//! minimum budget below which a verdict is inconclusive are the suite's.
//! The moment claims draw through the suite's own
//! [`PairSampler`] (two independent
//! training passes per draw) over the layer [`PyDropout`].
//!
//! What the Python subject cannot express is reported as skipped, with the
//! reason (the second list [`claims`] returns): a claim that replays the layer's random numbers
//! (dropmc does not own the user's generator), one that calls the forward
//! at another rate, and the attention, mask-shape and ensemble families
//! (other code paths than one elementwise forward).
//!
//! The claims carry no exact oracle: the oracle checks a closed form
//! against enumeration, a statement about the mathematics that
//! `dropmc report` verifies; here the question is the implementation.

use dropmc::Error;
use dropmc::claims::dropout::{Draw, PairSampler};
use dropmc::claims::{Card, Claim, Shape};
use dropmc::engine::{Budget, estimate};
use dropmc::formulas::dropout as f;
use dropmc::formulas::semantics::{backward_bound, kept_roundings};
use dropmc::ops::{BackwardPass, DropoutLayer, EvalPass, Rate, Subject, TrainPass};
use dropmc::stats::{Estimate, Statistic, per_draw_dof, two_point_skewness};
use rand::Rng;

use crate::forward::{Dtype, PyForward};

/// Units of the kept-count claim: all ones, so no unit reads as dropped
/// for being zero ([`dropmc::claims::dropout::COUNT_X`]).
pub use dropmc::claims::dropout::COUNT_X;
/// The moment claims' default input: the Rust suite's per-unit
/// configuration ([`dropmc::claims::dropout::UNIT_X`]).
pub use dropmc::claims::dropout::UNIT_X as MOMENT_X;

/// The semantics claims' default input in float64: the Rust suite's fixed
/// inputs ([`dropmc::claims::semantics::X`]): signs, a signed zero, the
/// smallest subnormal, a huge and a fractional value.
pub use dropmc::claims::semantics::X as SEMANTICS_X64;
/// The same in float32: the subnormal and the huge value replaced by
/// float32's (the smallest subnormal `2⁻¹⁴⁹` and `10³⁸`), which the cast
/// to float32 would otherwise round to 0 and to infinity.
pub const SEMANTICS_X32: [f64; 8] = [
    0.5,
    -1.2,
    3.0,
    -0.0,
    2.0,
    1.401298464324817e-45,
    1e38,
    -7.25,
];

/// Draws of the moment claims (the Rust suite's default for them).
pub const MOMENT_SAMPLES: u64 = 1_000_000;
/// Draws (rows) of the semantics rules (the Rust suite's default).
pub const RULE_SAMPLES: u64 = 20_000;

/// The drop rate the claims run at, and the inputs.
pub struct Setup<'a> {
    pub forward: &'a PyForward,
    pub rate: Rate,
    /// Input of the moment claims.
    pub moment_x: Vec<f64>,
    /// Input of the semantics rules.
    pub semantics_x: Vec<f64>,
    /// Whether `rng_state` was given.
    pub has_rng_state: bool,
}

/// The Python forward as a [`DropoutLayer`], at the user's rate only.
pub struct PyDropout<'a> {
    pub forward: &'a PyForward,
    pub p: f64,
}

impl PyDropout<'_> {
    fn at_own_rate(&self, p: f64) -> Result<(), Error> {
        if p.to_bits() == self.p.to_bits() {
            Ok(())
        } else {
            Err(Error::InvalidOption {
                what: format!(
                    "the Python forward runs at its own p = {}, not p = {p}",
                    self.p
                ),
            })
        }
    }
}

impl DropoutLayer for PyDropout<'_> {
    fn name(&self) -> &str {
        "python"
    }

    fn forward_train(&self, pass: TrainPass<'_>, p: f64, _rng: &mut dyn Rng) -> Result<(), Error> {
        let TrainPass { x, out, mask } = pass;
        self.at_own_rate(p)?;
        self.forward
            .train_row(x, |row| out.copy_from_slice(row.out))?;
        for (m, z) in mask.iter_mut().zip(out.iter()) {
            *m = *z != 0.0;
        }
        Ok(())
    }

    fn forward_eval(&self, pass: EvalPass<'_>, p: f64, _rng: &mut dyn Rng) -> Result<(), Error> {
        let EvalPass { x, out } = pass;
        self.at_own_rate(p)?;
        self.forward
            .eval_row(x, |row| out.copy_from_slice(row.out))?;
        Ok(())
    }

    fn backward(&self, _: BackwardPass<'_>, _: f64) -> Result<(), Error> {
        // A Python backward takes no mask: `semantics.backward_mask` pairs
        // each gradient with the forward output of the same call instead.
        Err(Error::InvalidOption {
            what: "the Python subject's backward is checked by semantics.backward_mask".into(),
        })
    }
}

/// A claim's estimator on a subject and budget.
pub type EstimateFn<'a> = Box<dyn Fn(&Subject, Budget) -> Result<Vec<Estimate>, Error> + Sync + 'a>;

/// One claim on the Python subject.
pub struct PyClaim<'a> {
    /// What it states (its family is its id's prefix, [`family_of`]).
    pub card: Card,
    pub analytic: Vec<f64>,
    pub note: Option<String>,
    pub estimate: EstimateFn<'a>,
}

impl Claim for PyClaim<'_> {
    fn card(&self) -> Card {
        self.card
    }
    fn analytic(&self) -> Result<Vec<f64>, Error> {
        Ok(self.analytic.clone())
    }
    fn estimate(&self, subject: &Subject, budget: Budget) -> Result<Vec<Estimate>, Error> {
        (self.estimate)(subject, budget)
    }
    fn note(&self) -> Option<String> {
        self.note.clone()
    }
}

/// The family of a claim id (`family.name`).
pub fn family_of(id: &'static str) -> &'static str {
    id.split_once('.').map_or(id, |(family, _)| family)
}

/// A per-unit statistic `g(z_k)` with `g(0) = 0` takes two values, with
/// probabilities `q` and `p` (the Rust suite's `unit_statistic`, at `p`).
fn unit_statistic(rate: Rate) -> Statistic {
    Statistic::Mean {
        skewness: two_point_skewness(rate.q()),
    }
}

/// A moment claim: two training passes per draw through [`PairSampler`].
#[allow(clippy::too_many_arguments)]
fn pair_claim<'a>(
    id: &'static str,
    formula: &'static str,
    shape: Shape,
    x: Vec<f64>,
    rate: Rate,
    statistic_kind: Statistic,
    analytic: Vec<f64>,
    statistic: fn(&Draw, &mut [f64]),
) -> PyClaim<'a> {
    let dim = analytic.len();
    let p = rate.p();
    // The suite's budget, raised to the test's minimum where an extreme
    // rate makes the statistic skewed enough to need more (p or q below
    // about 0.005), so no claim is inconclusive by construction.
    let samples = MOMENT_SAMPLES.max(statistic_kind.min_samples());
    PyClaim {
        card: Card::new(id, family_of(id), formula, shape, samples).with_statistic(statistic_kind),
        analytic,
        note: None,
        estimate: Box::new(move |subject, budget| {
            let sampler = PairSampler {
                subject,
                x: &x,
                p,
                dim,
                statistic,
            };
            Ok(estimate(&sampler, budget)?.estimates())
        }),
    }
}

fn per_unit(x: &[f64], g: impl Fn(f64) -> f64) -> Vec<f64> {
    x.iter().map(|&a| g(a)).collect()
}

fn powers(z: &[f64], r: u32, out: &mut [f64]) {
    for (o, v) in out.iter_mut().zip(z) {
        *o = dropmc::formulas::ipow(*v, r);
    }
}

fn half_squared_difference(a: f64, b: f64) -> f64 {
    0.5 * (a - b) * (a - b)
}

/// The moment and kept-count claims (none at `p = 0`, where every moment
/// is the input's and `semantics.p_zero_identity` judges the layer).
fn moment_claims<'a>(setup: &Setup) -> Vec<PyClaim<'a>> {
    let rate = setup.rate;
    if rate.p() == 0.0 {
        return Vec::new();
    }
    let x = setup.moment_x.clone();
    let unit = unit_statistic(rate);
    let moment = |id, formula, r: i32, statistic: fn(&Draw, &mut [f64])| {
        pair_claim(
            id,
            formula,
            Shape::Vector,
            x.clone(),
            rate,
            unit,
            per_unit(&x, |a| f::unit_raw_moment(a, rate, r)),
            statistic,
        )
    };
    vec![
        moment("dropout.mean", "E[z_k] = x_k", 1, |d, out| {
            out.copy_from_slice(d.z)
        }),
        moment(
            "dropout.second_moment",
            "E[z_k^2] = x_k^2 / q",
            2,
            |d, out| powers(d.z, 2, out),
        ),
        moment(
            "dropout.third_moment",
            "E[z_k^3] = x_k^3 / q^2",
            3,
            |d, out| powers(d.z, 3, out),
        ),
        moment(
            "dropout.fourth_moment",
            "E[z_k^4] = x_k^4 / q^3",
            4,
            |d, out| powers(d.z, 4, out),
        ),
        pair_claim(
            "dropout.variance",
            "Var z_k = x_k^2 p / q",
            Shape::Vector,
            x.clone(),
            rate,
            // (z_k − z'_k)²/2 is nonzero with probability 2pq.
            Statistic::Mean {
                skewness: two_point_skewness(2.0 * rate.p() * rate.q()),
            },
            per_unit(&x, |a| f::unit_variance(a, rate)),
            |d, out| {
                for ((o, a), b) in out.iter_mut().zip(d.z).zip(d.z_alt) {
                    *o = half_squared_difference(*a, *b);
                }
            },
        ),
        pair_claim(
            "dropout.sum_mean",
            "E[S] = sum_k x_k",
            Shape::Scalar,
            x.clone(),
            rate,
            Statistic::default(),
            vec![f::sum_mean(&x)],
            |d, out| out[0] = d.z.iter().sum(),
        ),
        pair_claim(
            "dropout.sum_variance",
            "Var S = (p/q) sum_k x_k^2",
            Shape::Scalar,
            x.clone(),
            rate,
            Statistic::default(),
            vec![f::sum_variance(&x, rate)],
            |d, out| {
                let (s, t): (f64, f64) = (d.z.iter().sum(), d.z_alt.iter().sum());
                out[0] = half_squared_difference(s, t);
            },
        ),
        pair_claim(
            "dropout.kept_count",
            "K = #kept ~ Binomial(d, q): P(K=k) = C(d,k) q^k p^(d-k)",
            Shape::Vector,
            COUNT_X.to_vec(),
            rate,
            Statistic::Indicator { trials: 1 },
            f::kept_count_pmf(COUNT_X.len() as u64, rate).unwrap_or_default(),
            |d, out| {
                out.fill(0.0);
                out[d.mask.iter().filter(|m| **m).count()] = 1.0;
            },
        ),
    ]
}

/// A deterministic rule: `rule` returns its total violations over
/// `budget.samples` rows.
fn rule_claim<'a>(
    id: &'static str,
    formula: &'static str,
    note: Option<String>,
    rule: impl Fn(Budget) -> Result<f64, Error> + Sync + 'a,
) -> PyClaim<'a> {
    PyClaim {
        card: Card::new(id, family_of(id), formula, Shape::Scalar, RULE_SAMPLES)
            .with_statistic(Statistic::Violations),
        analytic: vec![0.0],
        note,
        estimate: Box::new(move |_, budget| {
            let violations = rule(budget)?;
            Ok(vec![Estimate {
                value: violations,
                stderr: 0.0,
                n: budget.samples,
                dof: per_draw_dof(budget.samples),
            }])
        }),
    }
}

/// Sums `per_row` over `budget.samples` rows.
fn count_rows(
    budget: Budget,
    mut per_row: impl FnMut() -> Result<usize, Error>,
) -> Result<f64, Error> {
    let mut total = 0usize;
    for _ in 0..budget.samples {
        total += per_row()?;
    }
    Ok(total as f64)
}

/// The kept outputs a dtype's arithmetic may give for `x / q`: `fl(x/q)`
/// and `fl(x · fl(1/q))` (the Rust suite's two roundings,
/// [`kept_roundings`]); in float32 the same with every operation rounded
/// to float32, `q` and `1/q` rounded from their float64 values or `1/q`
/// from the rounded `q` (numpy, JAX and PyTorch cast a Python float scale
/// to the array's dtype).
fn accepted_survivors(x: f64, rate: Rate, dtype: Dtype) -> [f64; 3] {
    match dtype {
        Dtype::F64 => {
            let (division, reciprocal) = kept_roundings(x, rate);
            [division, reciprocal, reciprocal]
        }
        Dtype::F32 => {
            let (x, q) = (x as f32, rate.q() as f32);
            let inverse = (1.0 / rate.q()) as f32;
            [(x / q) as f64, (x * inverse) as f64, (x * (1.0 / q)) as f64]
        }
    }
}

/// The unit roundoff `ε` of the dtype (the spacing of its numbers at 1).
fn epsilon(dtype: Dtype) -> f64 {
    match dtype {
        Dtype::F64 => f64::EPSILON,
        Dtype::F32 => f32::EPSILON as f64,
    }
}

/// The smallest positive normal number of the dtype.
fn smallest_normal(dtype: Dtype) -> f64 {
    match dtype {
        Dtype::F64 => f64::MIN_POSITIVE,
        Dtype::F32 => f32::MIN_POSITIVE as f64,
    }
}

fn same_bits(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits()
}

/// The components of `a` and `b` whose bits differ.
fn differing_bits(a: &[f64], b: &[f64]) -> usize {
    a.iter()
        .zip(b)
        .filter(|(u, v)| !same_bits(**u, **v))
        .count()
}

/// The semantics rules: eval identity, eval draws nothing, survivors,
/// backward mask, `p = 0` identity (each where the subject can express it;
/// the rest are returned as skipped, with the reason).
fn rule_claims<'a>(setup: &Setup<'a>) -> (Vec<PyClaim<'a>>, Vec<(&'static str, String)>) {
    let forward = setup.forward;
    let dtype = forward.dtype();
    let rate = setup.rate;
    let x: Vec<f64> = setup.semantics_x.iter().map(|&v| dtype.round(v)).collect();
    let mut claims = Vec::new();
    let mut skipped = Vec::new();
    let xe = x.clone();
    claims.push(rule_claim(
        "semantics.eval_identity",
        "eval: bits of z differing from x = 0",
        None,
        move |budget| {
            count_rows(budget, || {
                forward.eval_row(&xe, |row| differing_bits(&xe, row.out))
            })
        },
    ));
    if setup.has_rng_state {
        let xd = x.clone();
        claims.push(rule_claim(
            "semantics.eval_draws_nothing",
            "eval: rows from forward(X, False) calls that changed rng_state() = 0",
            None,
            move |budget| {
                count_rows(budget, || {
                    forward.eval_row(&xd, |row| usize::from(row.drew == Some(true)))
                })
            },
        ));
    } else {
        skipped.push((
            "semantics.eval_draws_nothing",
            "no rng_state given: pass rng_state=lambda: <your generator's state> to check \
             that eval mode draws no random numbers"
                .to_string(),
        ));
    }
    let xs = x.clone();
    claims.push(rule_claim(
        "semantics.survivors_exact",
        "kept z_k = fl(x_k / q) or fl(x_k * fl(1/q)) bit for bit in the input's dtype, dropped z_k = 0: 0 violations",
        None,
        move |budget| {
            let accepted: Vec<[f64; 3]> =
                xs.iter().map(|&a| accepted_survivors(a, rate, dtype)).collect();
            count_rows(budget, || {
                forward.train_row(&xs, |row| {
                    row.out
                        .iter()
                        .zip(&accepted)
                        .filter(|(z, ok)| **z != 0.0 && !ok.iter().any(|a| same_bits(*a, **z)))
                        .count()
                })
            })
        },
    ));
    // The mask is read off the output, so the backward rule runs on the
    // units whose kept output cannot be zero: inputs of normal magnitude
    // (a zero input reads as dropped, and so does a subnormal one under a
    // flush-to-zero float mode, as XLA uses on the CPU).
    let xb: Vec<f64> = x
        .iter()
        .copied()
        .filter(|v| v.abs() >= smallest_normal(dtype))
        .collect();
    if !forward.has_backward() {
        skipped.push((
            "semantics.backward_mask",
            "no backward given: pass backward=lambda x, grad, training: ... (the gradient of \
             the most recent forward call) to check that it uses the forward's mask"
                .to_string(),
        ));
    } else if rate.p() == 0.0 {
        skipped.push((
            "semantics.backward_mask",
            "p = 0: semantics.p_zero_identity checks backward = g bit for bit".to_string(),
        ));
    } else if !xb.is_empty() {
        let eps = epsilon(dtype);
        claims.push(rule_claim(
            "semantics.backward_mask",
            "backward = g m / q with the forward's mask (2 roundings of the dtype): 0 violations",
            None,
            move |budget| {
                count_rows(budget, || {
                    forward.backward_row(&xb, |row| {
                        (0..xb.len())
                            .filter(|&k| {
                                let (g, kept) = (row.grad_out[k], row.out[k] != 0.0);
                                let want = if kept { g / rate.q() } else { 0.0 };
                                // backward_bound's two roundings, at the dtype's ε.
                                let bound = backward_bound(g, rate) * eps / f64::EPSILON;
                                let err = (row.grad_in[k] - want).abs();
                                err.is_nan() || err > bound
                            })
                            .count()
                    })
                })
            },
        ));
    }
    if rate.p() == 0.0 {
        let x0 = x.clone();
        let backward = forward.has_backward();
        claims.push(rule_claim(
            "semantics.p_zero_identity",
            "p = 0: z = x (and backward = g when given), bit for bit: 0 violations",
            None,
            move |budget| {
                count_rows(budget, || {
                    let mut bad = forward.train_row(&x0, |row| differing_bits(&x0, row.out))?;
                    if backward {
                        bad += forward
                            .backward_row(&x0, |row| differing_bits(row.grad_out, row.grad_in))?;
                    }
                    Ok(bad)
                })
            },
        ));
    } else {
        skipped.push((
            "semantics.p_zero_identity",
            "runs at p = 0 only (your forward's rate is fixed): check a forward built \
             with p = 0 as check_dropout(forward0, 0.0)"
                .to_string(),
        ));
    }
    (claims, skipped)
}

/// Why each conformance claim not stated here is skipped.
fn skip_reason(id: &str) -> String {
    let reason = match id {
        "semantics.keep_fraction" => {
            "the kept count's Binomial(d, q) law at your p is dropout.kept_count"
        }
        "semantics.backward_finite_difference" => {
            "replays the forward with the same random numbers: dropmc does not own your generator"
        }
        "semantics.rate_rule" => {
            "calls the forward at invalid rates: your forward has no p argument"
        }
        "dropout.worked_512_mean" | "dropout.worked_512_variance" => {
            "the worked case d = 512, x = 1, p = 0.5: pass x=np.ones(512), samples=200_000 with a p = 0.5 forward (dropout.sum_mean, dropout.sum_variance)"
        }
        "dropout.original_scheme" => {
            "a statement about the original (non-inverted) scheme's mathematics"
        }
        _ => match family_of_str(id) {
            "attention" => {
                "attention dropout is a separate code path (rows of softmax probabilities); check it with your attention layer as forward"
            }
            "mask_shape" => "needs the layer's mask-shape option (shared over positions)",
            "ensemble" => "a statement about the mathematics of averaging masks",
            _ => "not expressible with forward(x, training) alone",
        },
    };
    reason.to_string()
}

fn family_of_str(id: &str) -> &str {
    id.split_once('.').map_or(id, |(family, _)| family)
}

/// The claims to run and the conformance claims skipped (id, reason).
pub fn claims<'a>(setup: &Setup<'a>) -> (Vec<PyClaim<'a>>, Vec<(&'static str, String)>) {
    let mut run = moment_claims(setup);
    let (rules, mut skipped) = rule_claims(setup);
    run.extend(rules);
    let stated: Vec<&str> = run
        .iter()
        .map(|c| c.card.id)
        .chain(skipped.iter().map(|(id, _)| *id))
        .collect();
    for claim in dropmc::conformance::claims(&dropmc::conformance::Options::default()) {
        let id = claim.id();
        if stated.contains(&id) {
            continue;
        }
        let reason = if setup.rate.p() == 0.0 && claim.family() == "dropout" {
            "p = 0: every moment is the input's; semantics.p_zero_identity judges the layer".into()
        } else {
            skip_reason(id)
        };
        skipped.push((id, reason));
    }
    (run, skipped)
}
