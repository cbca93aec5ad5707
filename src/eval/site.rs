//! The machinery behind `eval ln | rms | bypass | compound` ([`super::ln`],
//! [`super::rms`], [`super::bypass`], [`super::compound`]): what one draw
//! computes, the exact value (full enumeration of the masks when the site has
//! at most [`EXACT_LIMIT`] mask bits, else `null` for a leading-order form)
//! and the Monte Carlo estimate.
//!
//! # What `exact` and `mc` mean for a shrink factor
//!
//! `c`, `c_damped`, `c1` and `c2` are leading-order factors; the exact
//! quantity they approximate is the least-squares factor that best maps the
//! uncorrected centred output onto the true one:
//!
//! ```text
//! c_true = Σ_k (E[out_k] − β_k) u_k / Σ_k u_k²,    u = uncorrected − β
//! ```
//!
//! (for `c2`, `u = LN2(ĉ1) − β2`, the c1-only estimate). It is linear in the
//! output, so it is the expectation of the per-draw statistic
//! `Σ_k (out_k − β_k) u_k / Σ u_k²`: the enumeration computes it exactly and
//! the sampler estimates it with a plain standard error.
//!
//! `mc` comes from the fast bit-mask kernel ([`FastSite`]) where it applies,
//! else from the per-element sampler; each result's `sampler` says which.
//!
//! With `ε = 0` the all-dropped mask feeds a constant vector to the norm; the
//! crate's norms return `β` (LayerNorm) or 0 (RMSNorm) there, the `ε → 0⁺`
//! limit (see [`crate::ops::LayerNorm`]).
//!
//! Where the uncorrected output equals `β` (a constant `x` with `ε > 0`:
//! `LN(x) = β`), the least-squares factor is `0/0`: its weights are zero, and
//! the quantity says it has no exact or Monte Carlo value (`undefined`).

use super::second_order::attach;
use super::{EvalOutput, EvalResult, monte_carlo};
use crate::claims::SamplerKind;
use crate::claims::norm::SiteBuffers;
use crate::engine::{Budget, Sampler, Stream, estimate};
use crate::error::Error;
use crate::exact::{MAX_ENUMERATION_D, Oracle, site_expectation, variance_from_moments};
use crate::formulas::mean_and_variance;
use crate::formulas::second_order::NoisyUnits;
use crate::ops::fast::{FastCompound, FastSite, SiteEstimates};
use crate::ops::{AnyNorm, LayerNorm, RmsNorm, Site, Subject};
use crate::stats::Estimate;

/// The largest number of mask bits for which `exact` is computed.
pub const EXACT_LIMIT: usize = 20;

/// What one draw computes, for each quantity.
pub(super) enum Plan {
    /// `[M, M², V, t_c, LN(y)…]`.
    Ln { ln: LayerNorm, u: Vec<f64> },
    /// `[R², RMS(y)…]`.
    Rms { rms: RmsNorm },
    /// `[V, t_c, LN(y)…]`.
    Bypass { ln: LayerNorm, u: Vec<f64> },
    /// `[t_c1, t_c2, LN2(LN1(y))…]`.
    Compound {
        ln1: LayerNorm,
        ln2: LayerNorm,
        u1: Vec<f64>,
        u2: Vec<f64>,
    },
}

/// `u / Σ u²` with `u = uncorrected − β`, so that `Σ (out − β) · w` is the
/// least-squares factor; `None` when `u = 0` (the factor is `0/0`).
pub(super) fn weights(uncorrected: &[f64], beta: &[f64]) -> Option<Vec<f64>> {
    let u: Vec<f64> = uncorrected.iter().zip(beta).map(|(a, b)| a - b).collect();
    let norm: f64 = u.iter().map(|v| v * v).sum();
    (norm > 0.0).then(|| u.iter().map(|v| v / norm).collect())
}

/// The weights, or zeros when the factor is undefined (the statistic is
/// then 0 and the result is marked [`undefined`]).
pub(super) fn weights_or_zeros(uncorrected: &[f64], beta: &[f64]) -> Vec<f64> {
    weights(uncorrected, beta).unwrap_or_else(|| vec![0.0; uncorrected.len()])
}

/// Marks the factor `name` as having no exact or Monte Carlo value: the
/// uncorrected output equals `β`, so no factor maps it onto anything.
pub(super) fn undefined(output: &mut EvalOutput, name: &str, why: &str) {
    if let Some(r) = output.result_mut(name) {
        r.exact = None;
        r.mc = None;
        r.stderr = None;
        r.sampler = None;
        r.add_warning(format!(
            "{why}: the least-squares factor (Σ (E[out] − β)(u − β) / Σ (u − β)²) is 0/0, so \
             only the closed form is shown"
        ));
    }
}

/// The last steps of every normalization quantity: the second order of the
/// result `name` (where there is one), the useful-range warnings, the ε.
pub(super) fn finish(
    mut out: EvalOutput,
    second_order: Option<(&str, &NoisyUnits, AnyNorm)>,
    eps: f64,
) -> Result<EvalOutput, Error> {
    if let Some((name, units, norm)) = second_order {
        attach(&mut out, name, units, &norm)?;
    }
    super::range::annotate(&mut out);
    Ok(out.with_eps(eps))
}

fn factor(out: &[f64], beta: &[f64], w: &[f64]) -> f64 {
    out.iter()
        .zip(beta)
        .zip(w)
        .map(|((o, b), w)| (o - b) * w)
        .sum()
}

impl Plan {
    fn dim(&self, d: usize) -> usize {
        d + match self {
            Plan::Ln { .. } => 4,
            Plan::Rms { .. } => 1,
            Plan::Bypass { .. } | Plan::Compound { .. } => 2,
        }
    }

    /// Writes the statistics of one `y` (`tmp` is scratch of length `d`).
    fn stats(&self, y: &[f64], tmp: &mut [f64], out: &mut [f64]) {
        let d = y.len();
        match self {
            Plan::Ln { ln, u } => {
                let (m, v) = mean_and_variance(y);
                ln.forward_unchecked(y, &mut out[4..]);
                out[0] = m;
                out[1] = m * m;
                out[2] = v;
                out[3] = factor(&out[4..4 + d], ln.beta(), u);
            }
            Plan::Rms { rms } => {
                out[0] = y.iter().map(|v| v * v).sum::<f64>() / d as f64;
                rms.forward_unchecked(y, &mut out[1..]);
            }
            Plan::Bypass { ln, u } => {
                ln.forward_unchecked(y, &mut out[2..]);
                out[0] = mean_and_variance(y).1;
                out[1] = factor(&out[2..2 + d], ln.beta(), u);
            }
            Plan::Compound { ln1, ln2, u1, u2 } => {
                ln1.forward_unchecked(y, tmp);
                ln2.forward_unchecked(tmp, &mut out[2..]);
                out[0] = factor(tmp, ln1.beta(), u1);
                out[1] = factor(&out[2..2 + d], ln2.beta(), u2);
            }
        }
    }
}

struct PlanSampler<'a> {
    subject: Subject<'a>,
    site: &'a Site,
    plan: &'a Plan,
}

/// Working buffers: the site's draw, the norm's, and the second draw's
/// statistics.
struct Scratch {
    site: SiteBuffers,
    tmp: Vec<f64>,
    alt: Vec<f64>,
}

impl Sampler for PlanSampler<'_> {
    type Scratch = Scratch;
    fn dim(&self) -> usize {
        self.plan.dim(self.site.dim())
    }
    fn scratch(&self) -> Scratch {
        Scratch {
            site: SiteBuffers::new(self.site.dim()),
            tmp: vec![0.0; self.site.dim()],
            alt: vec![0.0; self.dim()],
        }
    }
    fn draw(&self, rng: &mut Stream, s: &mut Scratch, out: &mut [f64]) -> Result<(), Error> {
        let layer = self.subject.dropout;
        let y = s.site.draw(self.site, layer, rng)?;
        self.plan.stats(y, &mut s.tmp, out);
        if matches!(self.plan, Plan::Ln { .. }) {
            // Var M from two independent draws: (M − M')²/2.
            let y = s.site.draw(self.site, layer, rng)?;
            self.plan.stats(y, &mut s.tmp, &mut s.alt);
            out[1] = 0.5 * (out[0] - s.alt[0]) * (out[0] - s.alt[0]);
        }
        Ok(())
    }
}

/// Exact expectations of the plan's statistics (with `Var M` in place of
/// `E[M²]`) and their rounding bounds, or `None` above [`EXACT_LIMIT`] mask
/// bits.
fn exact(site: &Site, plan: &Plan) -> Result<Option<Oracle>, Error> {
    let bits = site.dim() * site.terms().len();
    if bits > EXACT_LIMIT.min(MAX_ENUMERATION_D) {
        return Ok(None);
    }
    let mut tmp = vec![0.0; site.dim()];
    let mut oracle = site_expectation(site, plan.dim(site.dim()), |y, out| {
        plan.stats(y, &mut tmp, out)
    })?;
    if matches!(plan, Plan::Ln { .. }) {
        let (v, r) = (&oracle.values, &oracle.rounding);
        (oracle.values[1], oracle.rounding[1]) = variance_from_moments(v[0], r[0], v[1], r[1]);
    }
    Ok(Some(oracle))
}

/// The plan's statistics from the fast kernels, in the generic sampler's
/// order, or `None` where they do not apply (see [`FastSite::estimate`]).
fn fast(site: &Site, plan: &Plan, budget: Budget) -> Result<Option<Vec<Estimate>>, Error> {
    let run = |norm: AnyNorm, u: Option<&[f64]>| -> Result<Option<SiteEstimates>, Error> {
        let mut kernel = FastSite::new(site, &norm, true)?;
        if let Some(u) = u {
            kernel = kernel.with_functional(u)?;
        }
        kernel.estimate(budget)
    };
    Ok(match plan {
        Plan::Ln { ln, u } => run(ln.clone().into(), Some(u))?
            .map(|e| [vec![e.mean, e.var_of_mean, e.var, e.functionals[0]], e.out].concat()),
        Plan::Rms { rms } => run(rms.clone().into(), None)?.map(|e| [vec![e.r2], e.out].concat()),
        Plan::Bypass { ln, u } => run(ln.clone().into(), Some(u))?
            .map(|e| [vec![e.var, e.functionals[0]], e.out].concat()),
        Plan::Compound { ln1, ln2, u1, u2 } => {
            let x = &site.terms()[0].0;
            let p = site.terms()[0].1.p();
            FastCompound::new(x, p, ln1, ln2, u1, u2)?
                .estimate(budget)?
                .map(|e| [e.factors.to_vec(), e.out].concat())
        }
    })
}

/// Fills `results` (closed forms in the plan's order, one component per
/// statistic) with the exact values and Monte Carlo estimates of `plan` on
/// `site`, and returns the output.
pub(super) fn measure(
    quantity: &'static str,
    site: &Site,
    plan: &Plan,
    budget: Budget,
    mut results: Vec<EvalResult>,
) -> Result<EvalOutput, Error> {
    let est = match monte_carlo(budget)? {
        None => None,
        Some(budget) => Some(match fast(site, plan, budget)? {
            Some(est) => (est, SamplerKind::Fast),
            None => {
                let sampler = PlanSampler {
                    subject: Subject::reference(),
                    site,
                    plan,
                };
                (
                    estimate(&sampler, budget)?.estimates(),
                    SamplerKind::Generic,
                )
            }
        }),
    };
    let exact = exact(site, plan)?;
    let mut at = 0;
    for result in &mut results {
        let n = result.formula.as_slice().len();
        if let Some(e) = &exact {
            // An independent value for an exact form, the only one for a
            // leading-order form.
            result.exact = Some(result.formula.like(e.values[at..at + n].to_vec()));
            result.exact_rounding = Some(e.rounding[at..at + n].to_vec());
        }
        if let Some((est, sampler)) = &est {
            *result = result.clone().with_estimates(&est[at..at + n], *sampler);
        }
        at += n;
    }
    let p = site.terms()[0].1.p();
    EvalOutput::new(quantity, p, site.dim(), budget, results).checked()
}
