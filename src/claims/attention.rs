//! The attention family: dropout on one row of attention probabilities `a`
//! with values `v` at a rate `p`, built from that input by [`at`] (the
//! registry's list is [`at`] the seed's case `a = (0.2, 0.3, 0.5)`,
//! `v = (1, −2, 3)`, `p = 0.5`, plus the law of the row sum there,
//! [`seed_row_sum_pmf`]). Derivations: [`crate::formulas::attention`].
//! Every claim has an oracle that enumerates the `2^T` masks.
//!
//! On an implementation under test each draw runs the subject's
//! [`forward_attention`] once, or twice independently (`b`, `b'`) for the
//! variance statistics `(R − R')²/2` ([`AttentionClaim::reads_pair`]). On
//! the mathematics every claim uses the bit-mask estimators of
//! [`crate::ops::fast::attention_row`] (one mask per sample; variances as sample
//! variances, `crate::ops::fast::PowerSums`). Each claim's mean test declares
//! the skewness of the estimator it runs, from its statistic's exact law.
//!
//! The Python binding states the same claims at the user's row, values and
//! rate: it samples the user's dropout and hands each draw's rows to
//! [`AttentionClaim::draw_statistic`].
//!
//! [`forward_attention`]: crate::ops::DropoutLayer::forward_attention

use super::dropout::range;
use super::fn_claim::{FnClaim, PassClaim, half_squared_difference, indicator, sample_means};
use super::{Card, Draw, Estimator, FastPath, Law, Shape};
use super::{Claim, listed};
use crate::engine::{Budget, Stream};
use crate::error::Error;
use crate::exact::{Oracle, enumerate_masks};
use crate::formulas::attention as f;
use crate::ops::fast::attention_row as fast;
use crate::ops::{Rate, Subject, TrainPass};
use crate::stats::{CentralMoments, Estimate, Statistic, two_point_skewness};

/// The seed's attention row.
pub const A: [f64; 3] = [0.2, 0.3, 0.5];
/// The values the row averages.
pub const V: [f64; 3] = [1.0, -2.0, 3.0];
/// The seed's drop rate.
pub const P: f64 = 0.5;
/// Draws of each claim at the default budget (more where its statistic's
/// minimum budget is higher, [`Statistic::min_samples`]).
pub const SAMPLES: u64 = 400_000;

/// What one attention claim states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantity {
    /// `E[b_i] = a_i`, per key.
    EntryMean,
    /// `E[R] = Σ a_i`.
    RowSumMean,
    /// `Var R = (p/q) Σ a_i²`.
    RowSumVariance,
    /// `E[o] = Σ a_i v_i`.
    OutputMean,
    /// `Var o = (p/q) Σ a_i² v_i²`.
    OutputVariance,
}

impl Quantity {
    /// Every quantity, in report order.
    pub const ALL: [Quantity; 5] = [
        Quantity::EntryMean,
        Quantity::RowSumMean,
        Quantity::RowSumVariance,
        Quantity::OutputMean,
        Quantity::OutputVariance,
    ];

    /// The claim's id.
    pub fn id(self) -> &'static str {
        match self {
            Quantity::EntryMean => "attention.entry_mean",
            Quantity::RowSumMean => "attention.row_sum_mean",
            Quantity::RowSumVariance => "attention.row_sum_variance",
            Quantity::OutputMean => "attention.output_mean",
            Quantity::OutputVariance => "attention.output_variance",
        }
    }

    /// The statement, true at every row `a`, values `v` and rate `p`.
    pub fn formula(self) -> &'static str {
        match self {
            Quantity::EntryMean => "E[b_i] = a_i",
            Quantity::RowSumMean => "E[R] = sum_i a_i",
            Quantity::RowSumVariance => "Var R = (p/q) sum_i a_i^2",
            Quantity::OutputMean => "o = sum_i b_i v_i: E[o] = sum_i a_i v_i",
            Quantity::OutputVariance => "Var o = (p/q) sum_i a_i^2 v_i^2",
        }
    }

    /// The scalar of a row a claim on sums averages, and which moment of it:
    /// `None` for the entries themselves.
    fn row_scalar(self) -> Option<(RowScalar, Moment)> {
        match self {
            Quantity::EntryMean => None,
            Quantity::RowSumMean => Some((RowScalar::Sum, Moment::Mean)),
            Quantity::RowSumVariance => Some((RowScalar::Sum, Moment::Variance)),
            Quantity::OutputMean => Some((RowScalar::Output, Moment::Mean)),
            Quantity::OutputVariance => Some((RowScalar::Output, Moment::Variance)),
        }
    }
}

/// The scalar of a row the claims on sums average: the row sum `R` or
/// the output `o`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RowScalar {
    Sum,
    Output,
}

/// What a claim on `R` or `o` estimates: its mean, or its variance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Moment {
    Mean,
    Variance,
}

/// One attention claim at a row `a`, values `v` and rate `p` (it owns
/// them): its closed form, its per-draw statistic on one or two dropped
/// rows, its oracle over the `2^T` masks and its fast estimator.
#[derive(Debug, Clone)]
pub struct AttentionClaim {
    /// What it states.
    pub quantity: Quantity,
    /// The row of attention probabilities.
    pub a: Vec<f64>,
    /// The values the row averages.
    pub v: Vec<f64>,
    /// The drop rate (validated when the claim is computed).
    pub p: f64,
}

/// The family's claims at the row `a`, values `v` (one per key) and rate
/// `p`, in report order.
pub fn at(a: &[f64], v: &[f64], p: f64) -> Vec<AttentionClaim> {
    Quantity::ALL
        .into_iter()
        .map(|quantity| AttentionClaim {
            quantity,
            a: a.to_vec(),
            v: v.to_vec(),
            p,
        })
        .collect()
}

impl AttentionClaim {
    fn rate(&self) -> Result<Rate, Error> {
        Rate::new(self.p)
    }

    /// The terms whose inverted-dropout sum the claim's scalar is: `a_i`
    /// for `R`, `a_i v_i` for `o`.
    fn terms(&self, scalar: RowScalar) -> Vec<f64> {
        match scalar {
            RowScalar::Sum => self.a.clone(),
            RowScalar::Output => self.a.iter().zip(&self.v).map(|(a, v)| a * v).collect(),
        }
    }

    /// The statistic of a sampler that draws the pair form `(R − R')²/2`
    /// for a variance (an implementation's path: two passes per draw),
    /// from the scalar's exact law ([`CentralMoments::of_dropped_sum`]);
    /// `b_i` takes two values, `a_i / q` with probability `q` and 0, so the
    /// entries' skewness is [`two_point_skewness`]`(q)`.
    pub fn statistic_on_pairs(&self) -> Statistic {
        self.statistic_with(CentralMoments::pair_form_skewness)
    }

    /// The statistic the card declares: for a variance the larger skewness
    /// of the single-draw sample variance's (the fast path) and the pair
    /// form's (an implementation's two passes),
    /// [`CentralMoments::variance_skewness_on_either_path`]; for a mean as
    /// [`AttentionClaim::statistic_on_pairs`].
    pub fn statistic(&self) -> Statistic {
        self.statistic_with(CentralMoments::variance_skewness_on_either_path)
    }

    fn statistic_with(&self, variance_skewness: fn(&CentralMoments) -> f64) -> Statistic {
        let q = 1.0 - self.p;
        let skewness = match self.quantity.row_scalar() {
            None => two_point_skewness(q),
            Some((scalar, moment)) => {
                let moments = CentralMoments::of_dropped_sum(&self.terms(scalar), q);
                match moment {
                    Moment::Mean => moments.skewness().abs(),
                    Moment::Variance => variance_skewness(&moments).abs(),
                }
            }
        };
        Statistic::Mean { skewness }
    }

    /// The card for a sampler whose draws have `statistic`: the budget is
    /// [`SAMPLES`], or the statistic's minimum if higher.
    pub fn card_with(&self, statistic: Statistic) -> Card {
        let shape = match self.quantity {
            Quantity::EntryMean => Shape::Vector,
            _ => Shape::Scalar,
        };
        let samples = SAMPLES.max(statistic.min_samples());
        Card::new(
            self.quantity.id(),
            "attention",
            self.quantity.formula(),
            shape,
            samples,
        )
        .with_statistic(statistic)
    }

    /// The closed form at the claim's input.
    pub fn closed_form(&self) -> Result<Vec<f64>, Error> {
        let (a, v) = (&self.a, &self.v);
        Ok(match self.quantity {
            Quantity::EntryMean => f::entry_mean(a),
            Quantity::RowSumMean => vec![f::row_sum_mean(a)],
            Quantity::RowSumVariance => vec![f::row_sum_variance(a, self.rate()?)],
            Quantity::OutputMean => vec![f::output_mean(a, v)],
            Quantity::OutputVariance => vec![f::output_variance(a, v, self.rate()?)],
        })
    }

    /// Components of the closed form and of the per-draw statistic.
    pub fn dim(&self) -> usize {
        match self.quantity {
            Quantity::EntryMean => self.a.len(),
            _ => 1,
        }
    }

    /// The scalar `R` or `o` of one dropped row `b`.
    fn scalar(&self, scalar: RowScalar, b: &[f64]) -> f64 {
        match scalar {
            RowScalar::Sum => b.iter().sum(),
            RowScalar::Output => f::output_mean(b, &self.v),
        }
    }

    /// The width of each component's interval under the null, from `a`,
    /// `v` and `q` alone (the dropout family's steps,
    /// `claims::dropout::range`): an entry `b_i ∈ {0, a_i/q}` has width
    /// `|a_i|/q` (step 1); `R` and `o` are the inverted-dropout sums of the
    /// terms `a_i` and `a_i v_i`, width `W = Σ|term|/q` (step 4), and their
    /// pair forms `(R − R')²/2` lie in `[0, W²/2]` (step 5). `None` at an
    /// invalid rate.
    pub fn widths(&self) -> Option<Vec<f64>> {
        let rate = self.rate().ok()?;
        Some(match self.quantity.row_scalar() {
            None => range::unit_power(&self.a, rate, 1),
            Some((scalar, Moment::Mean)) => range::sum_mean(&self.terms(scalar), rate),
            Some((scalar, Moment::Variance)) => range::sum_pair_form(&self.terms(scalar), rate),
        })
    }
}

impl PassClaim for AttentionClaim {
    fn statistic_dim(&self) -> usize {
        self.dim()
    }
    /// Whether the per-draw statistic reads a second, independent row (the
    /// variances' pair form).
    fn reads_pair(&self) -> bool {
        matches!(self.quantity.row_scalar(), Some((_, Moment::Variance)))
    }
    /// The per-draw statistic on the dropped row `b` (and `b_alt`, an
    /// independent second row, read only when [`PassClaim::reads_pair`]):
    /// the row itself, `R`, `o`, or their pair forms `(R − R')²/2`.
    fn draw_statistic(&self, b: &[f64], b_alt: &[f64], out: &mut [f64]) {
        match self.quantity.row_scalar() {
            None => out.copy_from_slice(b),
            Some((scalar, Moment::Mean)) => out[0] = self.scalar(scalar, b),
            Some((scalar, Moment::Variance)) => {
                out[0] = half_squared_difference(self.scalar(scalar, b), self.scalar(scalar, b_alt))
            }
        }
    }
    /// One pass of the subject's attention dropout on the row.
    fn pass(&self, s: &Subject, rng: &mut Stream) -> Result<Vec<f64>, Error> {
        let n = self.a.len();
        let (mut b, mut m) = (vec![0.0; n], vec![false; n]);
        s.dropout
            .forward_attention(TrainPass::new(&self.a, &mut b, &mut m), self.p, rng)?;
        Ok(b)
    }
}

impl Claim for AttentionClaim {
    fn card(&self) -> Card {
        self.card_with(self.statistic())
    }
    fn analytic(&self) -> Result<Vec<f64>, Error> {
        self.closed_form()
    }
    fn oracle(&self) -> Result<Option<Oracle>, Error> {
        let rate = self.rate()?;
        let q = rate.q();
        let dim = self.dim();
        let raw_dim = if self.reads_pair() { 2 } else { dim };
        let raw = enumerate_masks(self.a.len(), rate, raw_dim, |mask, out| {
            let b = masked_row(&self.a, mask, q);
            match self.quantity.row_scalar() {
                None => out.copy_from_slice(&b),
                Some((scalar, Moment::Mean)) => out[0] = self.scalar(scalar, &b),
                Some((scalar, Moment::Variance)) => {
                    let r = self.scalar(scalar, &b);
                    out[0] = r;
                    out[1] = r * r;
                }
            }
        })?;
        Ok(Some(if self.reads_pair() {
            raw.variances()
        } else {
            raw
        }))
    }
    fn estimate(&self, subject: &Subject, budget: Budget) -> Result<Vec<Estimate>, Error> {
        self.pass_means(subject, budget)
    }
    fn fast_path(&self) -> Option<FastPath> {
        Some(FastPath::Masks)
    }
    fn null_range(&self) -> Option<Vec<f64>> {
        self.widths()
    }
    /// Each entry `b_i` is two-point (`a_i / q` with probability `q`); `R`
    /// and `o` are the masked sums of `a_i` and of `a_i v_i`, reduced to
    /// their mean or their variance.
    fn law(&self) -> Law {
        match self.quantity.row_scalar() {
            None => Law::repeated(
                Draw::TwoPoint { keep: 1.0 - self.p },
                self.a.len(),
                Estimator::Mean,
            ),
            Some((scalar, moment)) => Law::repeated(
                Draw::MaskedSum {
                    weights: self.terms(scalar),
                    p: self.p,
                },
                1,
                match moment {
                    Moment::Mean => Estimator::Mean,
                    Moment::Variance => Estimator::Variance,
                },
            ),
        }
    }
    fn fast_estimate(&self, budget: Budget) -> Option<Result<Vec<Estimate>, Error>> {
        let (a, v, p) = (&self.a, &self.v, self.p);
        Some(match self.quantity {
            Quantity::EntryMean => fast::row(a, v, p, budget).map(|r| r.entry_mean),
            quantity => fast::row_sums(a, v, p, budget).map(|r| {
                vec![match quantity {
                    Quantity::RowSumMean => r.row_sum_mean,
                    Quantity::RowSumVariance => r.row_sum_variance,
                    Quantity::OutputMean => r.output_mean,
                    _ => r.output_variance,
                }]
            }),
        })
    }
}

/// Index of the seed support value `r` equals, up to the rounding of three
/// divisions and two additions on values at most 2 (bound `8 ε · 2`).
pub fn support_index(r: f64) -> Option<usize> {
    f::SEED_ROW_SUMS
        .iter()
        .position(|s| (r - s).abs() <= 16.0 * f64::EPSILON)
}

/// The dropped-out row of one mask: `b_i = m_i a_i / q`.
fn masked_row(a: &[f64], mask: &[bool], q: f64) -> Vec<f64> {
    a.iter()
        .zip(mask)
        .map(|(a, &m)| if m { a / q } else { 0.0 })
        .collect()
}

/// One pass of the subject's attention dropout on the seed's row: its row
/// sum.
fn seed_row_sum(s: &Subject, rng: &mut Stream) -> Result<f64, Error> {
    let (mut b, mut m) = ([0.0; 3], [false; 3]);
    s.dropout
        .forward_attention(TrainPass::new(&A, &mut b, &mut m), P, rng)?;
    Ok(b.iter().sum())
}

/// `attention.row_sum_pmf`: the law of `R` at the seed's row only (its
/// support is the seed's seven subset sums).
pub fn seed_row_sum_pmf() -> FnClaim {
    FnClaim {
        card: Card::new(
            "attention.row_sum_pmf",
            "attention",
            "P(R = 0, .4, .6, 1, 1.4, 1.6, 2) = (1,1,1,2,1,1,1)/8; P(R=1) = 1/4",
            Shape::Vector,
            SAMPLES,
        )
        .with_statistic(Statistic::Indicator { trials: 1 }),
        analytic: || Ok(f::seed_row_sum_pmf()),
        oracle: Some(|| {
            let q = Rate::new(P)?.q();
            enumerate_masks(A.len(), Rate::new(P)?, 7, |mask, out| {
                out.fill(0.0);
                if let Some(i) = support_index(masked_row(&A, mask, q).iter().sum()) {
                    out[i] = 1.0;
                }
            })
        }),
        estimate: |s, b| {
            sample_means(s, b, 7, |s, rng, out| {
                let r = seed_row_sum(s, rng)?;
                for (i, o) in out.iter_mut().enumerate() {
                    *o = indicator(support_index(r) == Some(i));
                }
                Ok(())
            })
        },
        fast: Some(|b| fast::row_sum_distribution(&A, P, f::SEED_ROW_SUMS.len(), support_index, b)),
        law: None,
    }
}

static AT_SEED: std::sync::LazyLock<Vec<AttentionClaim>> =
    std::sync::LazyLock::new(|| at(&A, &V, P));
static SEED_PMF: std::sync::LazyLock<FnClaim> = std::sync::LazyLock::new(seed_row_sum_pmf);

/// The family's claims in report order (named and described in
/// [`super::families`]): [`at`] the seed's case, the law of `R` after the
/// row sum's variance.
pub fn claims() -> Vec<&'static dyn Claim> {
    let mut claims = listed(&AT_SEED);
    let after_row_sum_variance = 3;
    claims.insert(after_row_sum_variance, &*SEED_PMF);
    claims
}
