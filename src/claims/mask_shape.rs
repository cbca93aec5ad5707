//! The mask-shape family: independent versus shared-over-positions masks on
//! a row-major `T × d` block `x` at a rate `p`, built from that input by
//! [`at`] (the registry's list is [`at`] the seed's `4 × 3` block [`X`],
//! `p = 0.3`). Derivations: [`crate::formulas::mask_shape`]. Oracles
//! enumerate all masks (`2^{Td}` independent, `2^d` shared). On the
//! mathematics every claim uses the bit-mask estimators of
//! [`crate::ops::fast::mask_shape`]: one mask per sample, the independent
//! variance as a sample variance (its test declares that estimator's
//! skewness from the exact law), the shared variance as the pair form of
//! one unit carrying the feature's total (a scaled count, tested exactly).
//!
//! The Python binding states the shared claims at the user's input and
//! mask groups: it reorders each sampled row to the block and hands it to
//! [`MaskShapeClaim::draw_statistic`].

use super::dropout::range;
use super::fn_claim::{PassClaim, half_squared_difference, indicator};
use super::{Card, Draw, Estimator, FastPath, Law, Shape};
use super::{Claim, listed};
use crate::engine::{Budget, Stream, stream};
use crate::error::Error;
use crate::exact::{Oracle, enumerate_masks};
use crate::formulas::mask_shape as f;
use crate::ops::fast::mask_shape as fast;
use crate::ops::{BlockPass, DropoutLayer, MaskShape, Rate, Subject, TrainPass};
use crate::stats::{CentralMoments, Estimate, Statistic};

/// Positions `T`.
pub const T: usize = 4;
/// Features `d`.
pub const D: usize = 3;
/// The block, row-major; every entry non-zero so zeros reveal the mask.
pub const X: [f64; 12] = [
    1.0, 0.5, -1.0, //
    2.0, 0.5, 1.0, //
    1.5, -0.5, 2.0, //
    0.5, 1.0, -0.5,
];
/// Drop rate.
pub const P: f64 = 0.3;
/// Draws of each claim at the default budget (more where its statistic's
/// minimum budget on the generic path is higher).
pub const SAMPLES: u64 = 200_000;

fn rate() -> Result<Rate, Error> {
    Rate::new(P)
}

/// The budget of a claim of this family declaring `statistic`: [`SAMPLES`],
/// or the statistic's minimum on the generic path if higher (conclusive on
/// the fallback of a scaled count whose draws do not read back as
/// two-valued).
pub fn samples_for(statistic: Statistic) -> u64 {
    SAMPLES.max(statistic.on_generic_path().min_samples())
}

/// What one mask-shape claim states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantity {
    /// `Var S_k = (p/q) Σ_t x_tk²` under independent masks.
    IndependentVariance,
    /// `Var S_k = (p/q) (Σ_t x_tk)²` under masks shared over positions.
    SharedVariance,
    /// `P(column k all zero) = p^T` under independent masks.
    IndependentZeroColumn,
    /// `P(column k all zero) = p` under masks shared over positions.
    SharedZeroColumn,
}

impl Quantity {
    /// Every quantity, in report order.
    pub const ALL: [Quantity; 4] = [
        Quantity::IndependentVariance,
        Quantity::SharedVariance,
        Quantity::IndependentZeroColumn,
        Quantity::SharedZeroColumn,
    ];

    /// The claim's id.
    pub fn id(self) -> &'static str {
        match self {
            Quantity::IndependentVariance => "mask_shape.independent_variance",
            Quantity::SharedVariance => "mask_shape.shared_variance",
            Quantity::IndependentZeroColumn => "mask_shape.independent_zero_column",
            Quantity::SharedZeroColumn => "mask_shape.shared_zero_column",
        }
    }

    /// The statement, true at every block and rate.
    pub fn formula(self) -> &'static str {
        match self {
            Quantity::IndependentVariance => "independent: Var S_k = (p/q) sum_t x_tk^2",
            Quantity::SharedVariance => "shared over positions: Var S_k = (p/q) (sum_t x_tk)^2",
            Quantity::IndependentZeroColumn => "independent: P(column k all zero) = p^T",
            Quantity::SharedZeroColumn => "shared: P(column k all zero) = p",
        }
    }

    /// Whether the mask it states is shared over positions.
    pub fn shared(self) -> bool {
        matches!(self, Quantity::SharedVariance | Quantity::SharedZeroColumn)
    }

    fn mask_shape(self) -> MaskShape {
        if self.shared() {
            MaskShape::SharedOverPositions
        } else {
            MaskShape::Independent
        }
    }

    fn is_variance(self) -> bool {
        matches!(
            self,
            Quantity::IndependentVariance | Quantity::SharedVariance
        )
    }
}

/// One mask-shape claim at a row-major `T × d` block `x` and rate `p` (it
/// owns them): its closed form, its per-draw statistic on one or two
/// dropped blocks, its oracle over all masks and its fast estimator.
#[derive(Debug, Clone)]
pub struct MaskShapeClaim {
    /// What it states.
    pub quantity: Quantity,
    /// The block, row-major: entry `(t, k)` at `t·d + k`.
    pub x: Vec<f64>,
    /// Positions `T` (the block's rows).
    pub positions: usize,
    /// The drop rate (validated when the claim is computed).
    pub p: f64,
}

/// The family's claims on the row-major block `x` of `positions` rows at
/// rate `p`, in report order.
pub fn at(x: &[f64], positions: usize, p: f64) -> Vec<MaskShapeClaim> {
    Quantity::ALL
        .into_iter()
        .map(|quantity| MaskShapeClaim {
            quantity,
            x: x.to_vec(),
            positions,
            p,
        })
        .collect()
}

impl MaskShapeClaim {
    fn rate(&self) -> Result<Rate, Error> {
        Rate::new(self.p)
    }

    /// Features `d` (the block's columns).
    pub fn features(&self) -> usize {
        self.x.len() / self.positions.max(1)
    }

    /// Column `k` of the block (feature `k` at every position).
    fn column(&self, k: usize) -> Vec<f64> {
        let d = self.features();
        self.x.iter().skip(k).step_by(d).copied().collect()
    }

    /// The statistic its test declares. The independent variance: each
    /// column sum is the inverted-dropout sum of its `T` entries
    /// ([`CentralMoments::of_dropped_sum`]), and the fast path runs its
    /// single-draw sample variance, an implementation the pair form of two
    /// passes; the larger skewness of the two over the columns
    /// ([`CentralMoments::variance_skewness_on_either_path`]). The shared
    /// variance: `S_k` is one unit carrying the feature's total, so its
    /// pair form is a scaled count, on both paths. The zero columns: an
    /// indicator.
    pub fn statistic(&self) -> Statistic {
        let d = self.features();
        match self.quantity {
            Quantity::IndependentVariance => {
                let skewness = (0..d)
                    .map(|k| {
                        let column = self.column(k);
                        CentralMoments::of_dropped_sum(&column, 1.0 - self.p)
                            .variance_skewness_on_either_path()
                    })
                    .fold(0.0, f64::max);
                Statistic::Mean { skewness }
            }
            Quantity::SharedVariance => Statistic::unit_pair_form(self.p),
            Quantity::IndependentZeroColumn | Quantity::SharedZeroColumn => {
                Statistic::Indicator { trials: 1 }
            }
        }
    }

    /// The closed form at the claim's input, one component per feature.
    pub fn closed_form(&self) -> Result<Vec<f64>, Error> {
        let (rate, d) = (self.rate()?, self.features());
        Ok(match self.quantity {
            Quantity::IndependentVariance => f::independent_variance(&self.x, d, rate),
            Quantity::SharedVariance => f::shared_variance(&self.x, d, rate),
            Quantity::IndependentZeroColumn | Quantity::SharedZeroColumn => {
                f::zero_column_probability(self.positions, d, self.quantity.shared(), rate)
            }
        })
    }

    /// The width of each feature's interval under the null, from `x` and
    /// `q` alone (the dropout family's steps, `claims::dropout::range`): the
    /// column sum `S_k = Σ_t m_tk x_tk / q` lies in an interval of width
    /// `W_k = Σ_t |x_tk| / q` (step 4; a shared mask reaches only its two
    /// ends, inside it), so the pair form `(S_k − S'_k)²/2 ∈ [0, W_k²/2]`
    /// (step 5); a zero-column indicator lies in `[0, 1]` (tested exactly,
    /// never read). `None` at an invalid rate.
    pub fn widths(&self) -> Option<Vec<f64>> {
        let rate = self.rate().ok()?;
        let d = self.features();
        Some(
            (0..d)
                .map(|k| {
                    let column = self.column(k);
                    if self.quantity.is_variance() {
                        range::sum_pair_form(&column, rate)[0]
                    } else {
                        1.0
                    }
                })
                .collect(),
        )
    }

    /// The mask bits of its shape: one per entry (independent), one per
    /// feature broadcast to every row (shared).
    fn mask_bits(&self) -> usize {
        if self.quantity.shared() {
            self.features()
        } else {
            self.x.len()
        }
    }
}

/// The `d` column sums of a row-major block.
fn column_sums(z: &[f64], d: usize) -> Vec<f64> {
    let mut s = vec![0.0; d];
    for (i, v) in z.iter().enumerate() {
        s[i % d] += v;
    }
    s
}

impl PassClaim for MaskShapeClaim {
    fn statistic_dim(&self) -> usize {
        self.features()
    }
    /// Whether the per-draw statistic reads a second, independent block
    /// (the variances' pair form).
    fn reads_pair(&self) -> bool {
        self.quantity.is_variance()
    }
    /// The per-draw statistic on the dropped block `z` (and `z_alt`, an
    /// independent second block, read only by the variances): per feature
    /// `(S_k − S'_k)²/2`, or whether column `k` is all zero (an entry
    /// whose `x` is 0 counts as zero whatever its mask).
    fn draw_statistic(&self, z: &[f64], z_alt: &[f64], out: &mut [f64]) {
        let d = self.features();
        if self.reads_pair() {
            let (a, b) = (column_sums(z, d), column_sums(z_alt, d));
            for ((o, a), b) in out.iter_mut().zip(a).zip(b) {
                *o = half_squared_difference(a, b);
            }
        } else {
            for (k, o) in out.iter_mut().enumerate() {
                *o = indicator(
                    z.iter()
                        .zip(&self.x)
                        .skip(k)
                        .step_by(d)
                        .all(|(&z, &x)| z == 0.0 || x == 0.0),
                );
            }
        }
    }
    /// One pass of the subject's dropout on the block, with the claim's
    /// mask shape.
    fn pass(&self, s: &Subject, rng: &mut Stream) -> Result<Vec<f64>, Error> {
        let n = self.x.len();
        let (mut z, mut m) = (vec![0.0; n], vec![false; n]);
        s.dropout.forward_positions(
            BlockPass::new(
                TrainPass::new(&self.x, &mut z, &mut m),
                self.positions,
                self.quantity.mask_shape(),
            ),
            self.p,
            rng,
        )?;
        Ok(z)
    }
}

impl Claim for MaskShapeClaim {
    /// The card, with the budget [`samples_for`] its statistic.
    fn card(&self) -> Card {
        let statistic = self.statistic();
        Card::new(
            self.quantity.id(),
            "mask_shape",
            self.quantity.formula(),
            Shape::Vector,
            samples_for(statistic),
        )
        .with_statistic(statistic)
    }
    fn analytic(&self) -> Result<Vec<f64>, Error> {
        self.closed_form()
    }
    /// Var S_k by enumeration (the independent case over all `T·d` masks,
    /// the shared case over `d` feature masks broadcast to every row), or
    /// the all-zero indicators over the same masks.
    fn oracle(&self) -> Result<Option<Oracle>, Error> {
        let (rate, d, shared) = (self.rate()?, self.features(), self.quantity.shared());
        let q = rate.q();
        let bit = |mask: &[bool], i: usize| if shared { mask[i % d] } else { mask[i] };
        if self.reads_pair() {
            let raw = enumerate_masks(self.mask_bits(), rate, 2 * d, |mask, out| {
                let mut s = vec![0.0; d];
                for (i, x) in self.x.iter().enumerate() {
                    if bit(mask, i) {
                        s[i % d] += x / q;
                    }
                }
                for k in 0..d {
                    out[k] = s[k];
                    out[d + k] = s[k] * s[k];
                }
            })?;
            return Ok(Some(raw.variances()));
        }
        let positions = self.positions;
        Ok(Some(enumerate_masks(
            self.mask_bits(),
            rate,
            d,
            |mask, out| {
                for (k, o) in out.iter_mut().enumerate() {
                    *o = indicator((0..positions).all(|t| !bit(mask, t * d + k)));
                }
            },
        )?))
    }
    fn estimate(&self, subject: &Subject, budget: Budget) -> Result<Vec<Estimate>, Error> {
        self.pass_means(subject, budget)
    }
    fn null_range(&self) -> Option<Vec<f64>> {
        self.widths()
    }
    fn fast_path(&self) -> Option<FastPath> {
        match self.quantity {
            Quantity::IndependentVariance | Quantity::SharedVariance if self.features() != D => {
                None
            }
            _ => Some(FastPath::Masks),
        }
    }
    /// The independent variance: column `k`'s sum `S_k = Σ_t m_tk x_tk / q`
    /// is a masked sum over its `T` independent bits, reduced to its
    /// variance. The shared variance's pair form is a scaled count and the
    /// zero columns are indicators: their statistics fix their laws.
    fn law(&self) -> Law {
        match self.quantity {
            Quantity::IndependentVariance => {
                let d = self.features();
                let components = (0..d)
                    .map(|k| Draw::MaskedSum {
                        weights: self.x.iter().skip(k).step_by(d).copied().collect(),
                        p: self.p,
                    })
                    .collect();
                Law::Draws {
                    components,
                    estimator: Estimator::Variance,
                }
            }
            _ => Law::implied_by(self.statistic()),
        }
    }
    /// The bit-mask estimators; the variances' are compiled for the seed's
    /// width `d = 3` and are not offered at another.
    fn fast_estimate(&self, budget: Budget) -> Option<Result<Vec<Estimate>, Error>> {
        let (x, t, p, d) = (&self.x, self.positions, self.p, self.features());
        match self.quantity {
            Quantity::IndependentVariance if d == D => {
                Some(fast::column_sum_variances::<D>(x, t, false, p, budget))
            }
            Quantity::SharedVariance if d == D => {
                Some(fast::shared_column_pair_variances::<D>(x, t, p, budget))
            }
            Quantity::IndependentVariance | Quantity::SharedVariance => None,
            Quantity::IndependentZeroColumn | Quantity::SharedZeroColumn => Some(
                fast::zero_column_probabilities(t, d, self.quantity.shared(), p, budget),
            ),
        }
    }
}

/// The shape a layer actually uses when asked for `requested`, judged from
/// its outputs alone over `draws` draws of [`X`] (see
/// [`crate::formulas::mask_shape`]): any column with some entries zero and
/// some not means independent masks; none means shared.
pub fn observed_shape(
    layer: &dyn DropoutLayer,
    requested: MaskShape,
    draws: u64,
    seed: u64,
) -> Result<MaskShape, Error> {
    let mut rng = stream(seed, 0);
    let (mut z, mut m) = ([0.0; 12], [false; 12]);
    for _ in 0..draws {
        layer.forward_positions(
            BlockPass::new(TrainPass::new(&X, &mut z, &mut m), T, requested),
            P,
            &mut rng,
        )?;
        let mixed = (0..D).any(|k| {
            let zeros = (0..T).filter(|t| z[t * D + k] == 0.0).count();
            zeros > 0 && zeros < T
        });
        if mixed {
            return Ok(MaskShape::Independent);
        }
    }
    Ok(MaskShape::SharedOverPositions)
}

/// Draws [`observed_shape`] uses by default, and the chance that an
/// independent layer looks shared after them.
pub fn default_shape_draws() -> (u64, f64) {
    let draws = 100;
    let miss = rate().map_or(1.0, |r| f::independent_never_mixed(T, D, draws, r));
    (draws, miss)
}

static AT_SEED: std::sync::LazyLock<Vec<MaskShapeClaim>> =
    std::sync::LazyLock::new(|| at(&X, T, P));

/// The family's claims in report order (named and described in
/// [`super::families`]): [`at`] the seed's block and rate.
pub fn claims() -> Vec<&'static dyn Claim> {
    listed(&AT_SEED)
}
