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
//! [`PairSampler`](dropmc::claims::dropout::PairSampler) (two independent
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
use dropmc::claims::dropout::ids as dropout_ids;
use dropmc::claims::semantics::ids as semantics_ids;
use dropmc::claims::{Card, Claim, Shape};
use dropmc::engine::Budget;
use dropmc::ops::{BackwardPass, DropoutLayer, EvalPass, Rate, Subject, TrainPass};
use dropmc::stats::Estimate;
use dropmc::stats::{Statistic, per_draw_dof};
use rand::Rng;

use crate::forward::{Dtype, PyForward};

mod composite;
mod diagnosis;
mod moments;
pub(crate) mod repeats;
pub(crate) mod rules;

pub use composite::{CompositeNull, judge_composite};
pub use diagnosis::{Rounding, failed_in, failed_low, likely_causes, rule_causes};
pub use moments::{moment_nulls, sum_mean_target};
pub use rules::SurvivorRounding;

use moments::moment_claims;
use rules::rule_claims;

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
/// The semantics claims' default input in `dtype`: float64's
/// [`SEMANTICS_X64`]; in a narrower dtype the same values with the
/// subnormal and the huge one replaced by the dtype's smallest subnormal
/// and a huge value of its range (`10³⁸` in float32 and bfloat16, `3·10⁴`
/// in float16, whose largest number is 65504), which the cast to the
/// dtype would otherwise round to 0 and to infinity. In float16 and
/// bfloat16 the [`ROUNDING_PROBES`] follow.
pub fn semantics_x(dtype: Dtype) -> Vec<f64> {
    let huge = match dtype {
        Dtype::F64 => return SEMANTICS_X64.to_vec(),
        Dtype::F32 | Dtype::BF16 => 1e38,
        Dtype::F16 => 3e4,
    };
    let mut x = vec![
        0.5,
        -1.2,
        3.0,
        -0.0,
        2.0,
        dtype.smallest_subnormal(),
        huge,
        -7.25,
    ];
    if matches!(dtype, Dtype::F16 | Dtype::BF16) {
        x.extend((0..ROUNDING_PROBES).map(|k| dtype.round(rounding_probe(k))));
    }
    x
}

/// Extra inputs of the semantics rules in float16 and bfloat16: one per
/// slot of the significand in `[1, 2)`, where the dtype's roundings of
/// `x/q` part: PyTorch's `x·fl(1/q)` and the once-rounded `x/q` agree on
/// every value of [`SEMANTICS_X64`] in bfloat16 at `p = 0.1`, and differ on
/// 19 of these 64 (20 in float16; 8 and 9 at `p = 0.3`, none at `p = 0.2`,
/// where `1/q = 1.25` is exact), so `rounding="once"` can tell them apart.
pub const ROUNDING_PROBES: usize = 64;

/// The `k`-th rounding probe before the cast: `1 + (k + 0.37)/64`, off the
/// binary grid so that each falls in its own slot of the significand, with
/// alternating signs.
fn rounding_probe(k: usize) -> f64 {
    let v = 1.0 + (k as f64 + 0.37) / ROUNDING_PROBES as f64;
    if k.is_multiple_of(2) { v } else { -v }
}

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
    /// The user's cap on every claim's draws (`samples=`).
    pub samples: Option<u64>,
    /// Which roundings of `x/q` the survivors and the moments admit.
    pub rounding: SurvivorRounding,
}

/// The Python forward as a [`DropoutLayer`], at the user's rate only.
pub struct PyDropout<'a> {
    forward: &'a PyForward,
    p: f64,
    /// The moment input and its per-unit output scales
    /// ([`moments::unit_scale`]: exact powers of two, 1 but at subnormal
    /// inputs).
    moment_x: Vec<f64>,
    scale: Vec<f64>,
}

impl<'a> PyDropout<'a> {
    /// The layer the moment claims of `setup` draw from.
    pub fn new(setup: &Setup<'a>) -> Self {
        let dtype = setup.forward.dtype();
        let scale = setup
            .moment_x
            .iter()
            .map(|&v| moments::unit_scale(v, setup.rate, dtype))
            .collect();
        PyDropout {
            forward: setup.forward,
            p: setup.rate.p(),
            moment_x: setup.moment_x.clone(),
            scale,
        }
    }

    /// The layer at rate `p` with no moment input to rescale: for claims
    /// that read the outputs as they are (the mask-shape claims).
    pub fn at_rate(forward: &'a PyForward, p: f64) -> Self {
        PyDropout {
            forward,
            p,
            moment_x: Vec::new(),
            scale: Vec::new(),
        }
    }

    /// Multiplies the outputs for the moment input by their unit scales.
    fn rescale(&self, x: &[f64], out: &mut [f64]) {
        let is_moment_x = x.len() == self.moment_x.len()
            && x.iter()
                .zip(&self.moment_x)
                .all(|(a, b)| a.to_bits() == b.to_bits());
        if is_moment_x {
            for (z, s) in out.iter_mut().zip(&self.scale) {
                *z *= s;
            }
        }
    }

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
        self.rescale(x, out);
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
    /// The width of each component's interval under the null, where one
    /// is known ([`Claim::null_range`]: the moment claims' from `x` and
    /// `q`); `None` elsewhere.
    pub null_range: Option<Vec<f64>>,
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
    fn null_range(&self) -> Option<Vec<f64>> {
        self.null_range.clone()
    }
}

/// The family of a claim id (`family.name`).
pub fn family_of(id: &str) -> &str {
    id.split_once('.').map_or(id, |(family, _)| family)
}

/// Why each conformance claim not stated here is skipped.
fn skip_reason(id: &str) -> String {
    let reason = match id {
        semantics_ids::KEEP_FRACTION => {
            "the kept count's Binomial(d, q) law at your p is dropout.kept_count"
        }
        semantics_ids::BACKWARD_FINITE_DIFFERENCE => {
            "replays the forward with the same random numbers: dropmc does not own your generator"
        }
        semantics_ids::RATE_RULE => {
            "calls the forward at invalid rates: your forward has no p argument"
        }
        dropout_ids::WORKED_512_MEAN | dropout_ids::WORKED_512_VARIANCE => {
            "the worked case d = 512, x = 1, p = 0.5: pass x=np.ones(512), samples=200_000 with a p = 0.5 forward (dropout.sum_mean, dropout.sum_variance)"
        }
        dropout_ids::ORIGINAL_SCHEME => {
            "a statement about the original (non-inverted) scheme's mathematics"
        }
        _ => match family_of(id) {
            "attention" => {
                "attention dropout is a separate code path (rows of softmax probabilities): check it with dropmc.check_attention_dropout"
            }
            "mask_shape" => "needs the layer's mask-shape option (shared over positions)",
            "ensemble" => "a statement about the mathematics of averaging masks",
            _ => "not expressible with forward(x, training) alone",
        },
    };
    reason.to_string()
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

/// A deterministic rule: `rule` returns its total violations over
/// `budget.samples` rows.
pub(crate) fn rule_claim<'a>(
    id: &'static str,
    formula: &'static str,
    note: Option<String>,
    rule: impl Fn(Budget) -> Result<f64, Error> + Sync + 'a,
) -> PyClaim<'a> {
    PyClaim {
        null_range: None,
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
