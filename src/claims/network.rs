//! The network family: the noise ledger ([`crate::formulas::network`]) on
//! small residual stacks ([`stacks`], [`crate::exact::network`]), each
//! claim checked against the stack's forward on every mask.
//!
//! * `network.residual_variance` (exact): on two residual blocks with
//!   linear branches, the ledger's per-coordinate variance at the third
//!   norm's input, cross term included, is `Var h₂` exactly.
//! * `network.norm_output` (leading order 1): on two pre-LN blocks, the
//!   network-corrected `LN₂` output (rule 6 with the ledger's `s̄`, which
//!   carries `drop₁`'s noise through the residual stream, `LN₁`'s `γ/σ`,
//!   `drop₂` and the cross term) is `E[LN₂(h₂)]` to `O(1/d)`; its order
//!   check sweeps `d = 16 … 4096` on the grouped oracle and requires it to
//!   beat the per-site correction.
//! * `network.mean_shift` (leading order 2): after a wide linear map of a
//!   dropout (noise variance `O(1/d)`), `E φ(y) = φ(v) + φ''(v) s/2 +
//!   O(1/d²)`; it must beat the plain `φ(v)`.
//!
//! Each draw runs the stack once through the subject's own dropout layer;
//! each mean test declares the skewness of its draws from their exact law
//! over every mask.

use std::sync::{LazyLock, OnceLock};

use super::enumerated::EnumeratedClaim;
use super::fn_claim::sample_means;
use super::order::{GapCurve, OrderCheck, OwnGap, Rival, SWEEP_D};
use super::{Card, Claim, Law, Shape, listed};
use crate::engine::{Budget, Stream};
use crate::error::Error;
use crate::exact::network::{Dropouts, masked};
use crate::exact::{Oracle, central_moments_by};
use crate::ops::{Subject, TrainPass};
use crate::stats::Estimate;
use crate::stats::tolerance::gamma_upper;

pub mod stacks;
pub use stacks::{LEDGER, Rules};

/// The family's name.
pub const FAMILY: &str = "network";
/// Draws of each claim at the default budget (more where its statistic's
/// minimum budget is higher).
pub const SAMPLES: u64 = 100_000;

/// Which statement a claim makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantity {
    /// `Var h₂_i` on the linear residual stack (exact).
    ResidualVariance,
    /// `E[LN₂(h₂)]` on the pre-LN stack (leading order 1).
    NormOutput,
    /// `E φ(y)` on the mean-shift stack (leading order 2).
    MeanShift,
}

/// One claim of the family (its quantity fixes its stack).
pub type NetworkClaim = EnumeratedClaim<Quantity>;

/// Roundings of the linear residual forward and of `(h − h̄)²`, charged on
/// the same expression in absolute values: two mat-vecs of width 4 (8
/// each), two adds, two dropout scalings, the subtraction and the square:
/// 24, doubled for the closed form's own evaluation.
const LINEAR_RESIDUAL_ROUNDINGS: f64 = 48.0;

/// The dropouts of one draw through the subject's own layer.
fn subject_drop<'a>(
    s: &'a Subject,
    rng: &'a mut Stream,
) -> impl FnMut(usize, &[f64]) -> Result<Vec<f64>, Error> + 'a {
    move |_, x| {
        let (mut out, mut mask) = (vec![0.0; x.len()], vec![false; x.len()]);
        s.dropout
            .forward_train(TrainPass::new(x, &mut out, &mut mask), stacks::P, rng)?;
        Ok(out)
    }
}

impl NetworkClaim {
    fn dim(&self) -> usize {
        match self.quantity {
            Quantity::ResidualVariance => 4,
            Quantity::NormOutput => stacks::PRE_LN_D,
            Quantity::MeanShift => stacks::MEAN_SHIFT_D,
        }
    }

    /// The per-draw statistic of one draw of the dropouts (`drop`).
    fn draw(&self, drop: &mut Dropouts, out: &mut [f64]) -> Result<(), Error> {
        match self.quantity {
            Quantity::ResidualVariance => {
                let stack = stacks::linear_residual();
                let e = stack.forward(drop)? - stack.mean();
                for (o, e) in out.iter_mut().zip(e.iter()) {
                    *o = e * e;
                }
            }
            Quantity::NormOutput => {
                out.copy_from_slice(&stacks::pre_ln(stacks::PRE_LN_D).forward(drop)?);
            }
            Quantity::MeanShift => {
                out.copy_from_slice(&stacks::mean_shift(stacks::MEAN_SHIFT_D).forward(drop)?);
            }
        }
        Ok(())
    }

    /// Mask bits of one draw: two dropouts of width `d`, or one.
    fn bits(&self) -> usize {
        match self.quantity {
            Quantity::MeanShift => self.dim(),
            _ => 2 * self.dim(),
        }
    }

    /// `E f(statistic)` over every mask of the claim's stack.
    fn enumerate(
        &self,
        dim: usize,
        f: &mut dyn FnMut(&[f64], &mut [f64]),
    ) -> Result<Oracle, Error> {
        let (rate, mut value) = (stacks::rate(), vec![0.0; self.dim()]);
        crate::exact::enumerate_masks(self.bits(), rate, dim, |mask, out| {
            self.draw(&mut masked(mask, rate.q()), &mut value)
                .expect("the stacks' literal configurations are valid");
            f(&value, out);
        })
    }

    /// The exact values with their rounding bounds (for the residual
    /// variance, the forward's and the closed form's rounding added:
    /// [`LINEAR_RESIDUAL_ROUNDINGS`] on the expression in absolute values).
    fn exact(&self) -> Result<Oracle, Error> {
        let dim = self.dim();
        let mut oracle = self.enumerate(dim, &mut |v, out| out.copy_from_slice(v))?;
        if self.quantity == Quantity::ResidualVariance {
            let stack = stacks::linear_residual();
            let abs = crate::exact::network::LinearResidual {
                x: stack.x.abs(),
                a: stack.a.abs(),
                b: stack.b.abs(),
                rate: stack.rate,
            };
            let (mean_abs, ledger_abs) = (
                abs.mean(),
                stacks::linear_residual_ledger(&abs, &stacks::LEDGER),
            );
            let second = abs.expectation(dim, |h, out| {
                for (k, o) in out.iter_mut().enumerate() {
                    *o = (h[k] + mean_abs[k]).powi(2);
                }
            })?;
            let g = gamma_upper(LINEAR_RESIDUAL_ROUNDINGS);
            for k in 0..dim {
                oracle.rounding[k] += g * (second.values[k] + ledger_abs.var[k]);
            }
        }
        Ok(oracle)
    }

    fn skewness_by_enumeration(&self) -> Result<Vec<f64>, Error> {
        let moments = central_moments_by(
            self.dim(),
            |v: &[f64], out: &mut [f64]| out.copy_from_slice(v),
            |dim, g| self.enumerate(dim, g),
        )?;
        Ok(moments.iter().map(|c| c.skewness().abs()).collect())
    }

    /// The closed form with `rules` at the claim's own configuration, and
    /// its rival's.
    pub fn closed_and_rival(&self, rules: &Rules) -> Result<(Vec<f64>, Option<Vec<f64>>), Error> {
        Ok(match self.quantity {
            Quantity::ResidualVariance => (
                stacks::linear_residual_ledger(&stacks::linear_residual(), rules).var,
                None,
            ),
            Quantity::NormOutput => {
                let stack = stacks::pre_ln(stacks::PRE_LN_D);
                (
                    stacks::pre_ln_network(&stack, rules)?,
                    Some(stacks::pre_ln_per_site(&stack)?),
                )
            }
            Quantity::MeanShift => {
                let stack = stacks::mean_shift(stacks::MEAN_SHIFT_D);
                (
                    stacks::mean_shift_second_order(&stack, rules),
                    Some(stacks::mean_shift_plain(&stack)),
                )
            }
        })
    }

    /// `mean_k |closed_k − exact_k|` of the closed form and of its rival at
    /// the claim's own configuration, and the oracle's mean rounding.
    pub fn own_gaps(&self, rules: &Rules) -> Result<(f64, f64, f64), Error> {
        let oracle = self.exact()?;
        let (closed, rival) = self.closed_and_rival(rules)?;
        let rival = rival.unwrap_or_else(|| closed.clone());
        let rounding = mean(&oracle.rounding);
        Ok((
            mean_gap(&closed, &oracle.values),
            mean_gap(&rival, &oracle.values),
            rounding,
        ))
    }

    /// The grouped oracle at the sweep's `i`-th width, computed once per
    /// process (a planted closed form is checked against the same values).
    fn sweep_oracle(&self, i: usize) -> Result<&'static Oracle, Error> {
        static PRE_LN: [OnceLock<Option<Oracle>>; SWEEP_D.len()] =
            [const { OnceLock::new() }; SWEEP_D.len()];
        static MEAN_SHIFT: [OnceLock<Option<Oracle>>; SWEEP_D.len()] =
            [const { OnceLock::new() }; SWEEP_D.len()];
        let d = SWEEP_D[i];
        let cached = match self.quantity {
            Quantity::MeanShift => MEAN_SHIFT[i].get_or_init(|| {
                let stack = stacks::mean_shift(d);
                stack.grouped(stacks::mean_shift_sup(&stack)).ok()
            }),
            _ => PRE_LN[i].get_or_init(|| stacks::pre_ln(d).grouped().ok()),
        };
        cached.as_ref().ok_or_else(|| Error::Degenerate {
            what: format!("the grouped oracle of {} at d = {d} failed", self.id),
        })
    }

    /// The order check of the closed form with `rules`: its gap on the
    /// sweep `d = 16 … 4096` against the grouped oracle, and the rival's.
    pub fn order_check_with(&self, rules: &Rules) -> Result<OrderCheck, Error> {
        let (gap, rival_gap, rounding) = self.own_gaps(rules)?;
        let (mut gaps, mut roundings, mut rivals) = (vec![], vec![], vec![]);
        for (i, &d) in SWEEP_D.iter().enumerate() {
            let (closed, rival) = match self.quantity {
                Quantity::NormOutput => {
                    let stack = stacks::pre_ln(d);
                    (
                        stacks::pre_ln_network(&stack, rules)?,
                        stacks::pre_ln_per_site(&stack)?,
                    )
                }
                Quantity::MeanShift => {
                    let stack = stacks::mean_shift(d);
                    (
                        stacks::mean_shift_second_order(&stack, rules),
                        stacks::mean_shift_plain(&stack),
                    )
                }
                Quantity::ResidualVariance => {
                    return Err(Error::Degenerate {
                        what: "an exact claim has no order check".into(),
                    });
                }
            };
            let oracle = self.sweep_oracle(i)?;
            let exact: Vec<f64> = (0..d)
                .map(|k| oracle.values[usize::from(k >= d / 2)])
                .collect();
            gaps.push(mean_gap(&closed, &exact));
            rivals.push(mean_gap(&rival, &exact));
            roundings.push(mean(&oracle.rounding));
        }
        let (order, name) = match self.quantity {
            Quantity::MeanShift => (2, "the plain phi(v)"),
            _ => (1, "the per-site correction"),
        };
        let curve = GapCurve::fit(&SWEEP_D, gaps, roundings, order);
        let own = OwnGap {
            d: self.dim(),
            gap,
            rounding,
        };
        let rival = Rival {
            name,
            gap_at_d: rival_gap,
            gap: rivals,
        };
        Ok(OrderCheck::judge(&curve, own, Some(&rival)))
    }
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

fn mean_gap(a: &[f64], b: &[f64]) -> f64 {
    mean(
        &a.iter()
            .zip(b)
            .map(|(a, b)| (a - b).abs())
            .collect::<Vec<_>>(),
    )
}

impl Claim for NetworkClaim {
    fn card(&self) -> Card {
        let card = self.enumerated_card(FAMILY, Shape::Vector, SAMPLES, || {
            self.skewness_by_enumeration()
        });
        match self.quantity {
            Quantity::ResidualVariance => card,
            Quantity::NormOutput => card.leading_order(1),
            Quantity::MeanShift => card.leading_order(2),
        }
    }
    fn analytic(&self) -> Result<Vec<f64>, Error> {
        Ok(self.closed_and_rival(&stacks::LEDGER)?.0)
    }
    fn oracle(&self) -> Result<Option<Oracle>, Error> {
        self.exact().map(Some)
    }
    fn estimate(&self, subject: &Subject, budget: Budget) -> Result<Vec<Estimate>, Error> {
        sample_means(subject, budget, self.dim(), |s, rng, out| {
            self.draw(&mut subject_drop(s, rng), out)
        })
    }
    /// Per component, the skewness of the draw's exact law over every mask.
    fn law(&self) -> Law {
        self.enumerated_law(
            || self.skewness_by_enumeration(),
            "the stack's enumeration over masks failed",
        )
    }
    fn order_check(&self) -> Option<Result<OrderCheck, String>> {
        (self.quantity != Quantity::ResidualVariance).then(|| {
            self.order_check_with(&stacks::LEDGER)
                .map_err(|e| e.to_string())
        })
    }
    fn note(&self) -> Option<String> {
        if self.quantity == Quantity::ResidualVariance {
            return None;
        }
        let (gap, rival, _) = self.own_gaps(&stacks::LEDGER).ok()?;
        let name = match self.quantity {
            Quantity::MeanShift => "plain phi(v)'s",
            _ => "per-site correction's",
        };
        Some(format!(
            "closed-form gap {gap:.3e} vs {name} {rival:.3e} (mean |.| to the enumerated value, d = {})",
            self.dim()
        ))
    }
}

static CLAIMS: LazyLock<Vec<NetworkClaim>> = LazyLock::new(|| {
    use Quantity::*;
    vec![
        NetworkClaim::new(
            "network.residual_variance",
            "h1 = x + drop(Ax), h2 = h1 + drop(B h1): Var h2 = s1 + (p/q)(B h1_bar)^2 + B^2 s1/q + 2 B_ii s1, s1 = (p/q)(Ax)^2",
            ResidualVariance,
            (),
        ),
        NetworkClaim::new(
            "network.norm_output",
            "pre-LN x2: E[LN2(h2)] ~ beta + c (LN2(v) - beta), c^2 = (V(v) + eps)/(V(v) + s_bar + eps), s from every dropout upstream",
            NormOutput,
            (),
        ),
        NetworkClaim::new(
            "network.mean_shift",
            "y = h + W drop(u), s = O(1/d): E phi(y) ~ phi(v) + phi''(v) s/2",
            MeanShift,
            (),
        ),
    ]
});

/// The family's claims in report order (named and described in
/// [`super::families`]).
pub fn claims() -> Vec<&'static dyn Claim> {
    listed(&CLAIMS)
}

/// This family's claims with their concrete type.
pub fn network_claims() -> &'static [NetworkClaim] {
    &CLAIMS
}
