//! `eval ln | rms | bypass | compound`: the normalization formulas on the
//! user's numbers, beside the exact value (full enumeration of the masks when
//! the site has at most 20 mask bits, else `null`) and a Monte Carlo estimate.
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

use super::second_order::{Norm, attach};
use super::{EvalOutput, EvalResult, Values};
use crate::claims::SamplerKind;
use crate::engine::{Budget, Sampler, Stream, estimate};
use crate::error::{Error, check_len};
use crate::exact::{MAX_ENUMERATION_D, site_expectation};
use crate::fast::{FastCompound, FastSite, SiteEstimates, SiteNorm};
use crate::formulas::second_order::NoisyUnits;
use crate::formulas::{bypass as fb, compound as fc, layernorm as fl, rmsnorm as fr};
use crate::ops::{LayerNorm, Rate, RmsNorm, Site, Subject, mean_and_variance};
use crate::stats::Estimate;

/// The largest number of mask bits for which `exact` is computed.
pub const EXACT_LIMIT: usize = 20;

/// What one draw computes, for each quantity.
enum Plan {
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

/// `u / Σ u²`, so that `Σ (out − β) · w` is the least-squares factor.
fn weights(uncorrected: &[f64], beta: &[f64]) -> Result<Vec<f64>, Error> {
    let u: Vec<f64> = uncorrected.iter().zip(beta).map(|(a, b)| a - b).collect();
    let norm: f64 = u.iter().map(|v| v * v).sum();
    if norm == 0.0 {
        return Err(Error::Degenerate {
            what: "the uncorrected output equals β: no shrink factor is defined".into(),
        });
    }
    Ok(u.iter().map(|v| v / norm).collect())
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

struct Scratch {
    y: Vec<f64>,
    buf: Vec<f64>,
    tmp: Vec<f64>,
    mask: Vec<bool>,
    alt: Vec<f64>,
}

impl Sampler for PlanSampler<'_> {
    type Scratch = Scratch;
    fn dim(&self) -> usize {
        self.plan.dim(self.site.dim())
    }
    fn scratch(&self) -> Scratch {
        let d = self.site.dim();
        Scratch {
            y: vec![0.0; d],
            buf: vec![0.0; d],
            tmp: vec![0.0; d],
            mask: vec![false; d],
            alt: vec![0.0; self.dim()],
        }
    }
    fn draw(&self, rng: &mut Stream, s: &mut Scratch, out: &mut [f64]) -> Result<(), Error> {
        let layer = self.subject.dropout;
        self.site
            .draw(layer, rng, &mut s.y, &mut s.buf, &mut s.mask)?;
        self.plan.stats(&s.y, &mut s.tmp, out);
        if matches!(self.plan, Plan::Ln { .. }) {
            // Var M from two independent draws: (M − M')²/2.
            self.site
                .draw(layer, rng, &mut s.y, &mut s.buf, &mut s.mask)?;
            self.plan.stats(&s.y, &mut s.tmp, &mut s.alt);
            out[1] = 0.5 * (out[0] - s.alt[0]) * (out[0] - s.alt[0]);
        }
        Ok(())
    }
}

/// Exact expectations of the plan's statistics (with `Var M` in place of
/// `E[M²]`), or `None` above [`EXACT_LIMIT`] mask bits.
fn exact(site: &Site, plan: &Plan) -> Result<Option<Vec<f64>>, Error> {
    let bits = site.dim() * site.terms().len();
    if bits > EXACT_LIMIT.min(MAX_ENUMERATION_D) {
        return Ok(None);
    }
    let mut tmp = vec![0.0; site.dim()];
    let mut values = site_expectation(site, plan.dim(site.dim()), |y, out| {
        plan.stats(y, &mut tmp, out)
    })?
    .values;
    if matches!(plan, Plan::Ln { .. }) {
        values[1] -= values[0] * values[0];
    }
    Ok(Some(values))
}

/// The plan's statistics from the fast kernels, in the generic sampler's
/// order, or `None` where they do not apply (see [`FastSite::estimate`]).
fn fast(site: &Site, plan: &Plan, budget: Budget) -> Result<Option<Vec<Estimate>>, Error> {
    let run = |norm: SiteNorm, u: Option<&[f64]>| -> Result<Option<SiteEstimates>, Error> {
        let mut kernel = FastSite::new(site, norm, true)?;
        if let Some(u) = u {
            kernel = kernel.with_functional(u)?;
        }
        kernel.estimate(budget)
    };
    Ok(match plan {
        Plan::Ln { ln, u } => run(SiteNorm::Ln(ln), Some(u))?
            .map(|e| [vec![e.mean, e.var_of_mean, e.var, e.functionals[0]], e.out].concat()),
        Plan::Rms { rms } => run(SiteNorm::Rms(rms), None)?.map(|e| [vec![e.r2], e.out].concat()),
        Plan::Bypass { ln, u } => {
            run(SiteNorm::Ln(ln), Some(u))?.map(|e| [vec![e.var, e.functionals[0]], e.out].concat())
        }
        Plan::Compound { ln1, ln2, u1, u2 } => {
            let x = &site.terms()[0].0;
            let p = site.terms()[0].1.p();
            FastCompound::new(x, p, ln1, ln2, u1, u2)?
                .estimate(budget)?
                .map(|e| [e.factors.to_vec(), e.out].concat())
        }
    })
}

fn run(
    quantity: &'static str,
    site: &Site,
    plan: &Plan,
    budget: Budget,
    formulas: Vec<(&str, Values)>,
) -> Result<EvalOutput, Error> {
    let budget = Budget::new(budget.samples, budget.seed)?;
    let (est, sampler) = match fast(site, plan, budget)? {
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
    };
    let exact = exact(site, plan)?;
    let mut results = Vec::with_capacity(formulas.len());
    let mut at = 0;
    for (name, formula) in formulas {
        let n = formula.as_slice().len();
        let ex = exact.as_ref().map(|e| e[at..at + n].to_vec());
        let mut result = EvalResult::new(name, formula, ex, &est[at..at + n]);
        result.sampler = sampler;
        results.push(result);
        at += n;
    }
    let p = site.terms()[0].1.p();
    EvalOutput {
        quantity,
        p,
        d: site.dim(),
        samples: budget.samples,
        seed: budget.seed,
        results,
    }
    .checked()
}

/// `eval ln`: `E[M]`, `Var[M]`, `E[V]`, `c` (`c_ε`), `E[LN(z)]`.
pub fn ln(
    x: &[f64],
    p: f64,
    gamma: Option<Vec<f64>>,
    beta: Option<Vec<f64>>,
    eps: f64,
    budget: Budget,
) -> Result<EvalOutput, Error> {
    let (mu, s2) = fl::input_moments(x)?;
    let rate = Rate::new(p)?;
    let ln = LayerNorm::with_defaults(x.len(), gamma, beta, eps)?;
    let site = Site::plain(x, p)?;
    let u = weights(&fl::uncorrected(x, &ln)?, ln.beta())?;
    let formulas = vec![
        ("E[M]", Values::Scalar(fl::mean_of_m(x)?)),
        ("Var[M]", Values::Scalar(fl::variance_of_m(x, rate)?)),
        ("E[V]", Values::Scalar(fl::mean_of_v(x, rate)?)),
        ("c", Values::Scalar(fl::shrink_eps(mu, s2, eps, rate))),
        ("E[LN(z)]", Values::PerUnit(fl::corrected(x, &ln, rate)?)),
    ];
    let units = NoisyUnits::dropout(x, rate)?;
    let mut out = run(
        "ln",
        &site,
        &Plan::Ln { ln: ln.clone(), u },
        budget,
        formulas,
    )?;
    attach(&mut out, "E[LN(z)]", &units, Norm::Ln(&ln))?;
    Ok(out)
}

/// `eval rms`: `E[R^2]`, `E[RMSNorm(z)]`.
pub fn rms(
    x: &[f64],
    p: f64,
    gamma: Option<Vec<f64>>,
    eps: f64,
    budget: Budget,
) -> Result<EvalOutput, Error> {
    fr::mean_square(x)?;
    let rate = Rate::new(p)?;
    let rms = RmsNorm::with_defaults(x.len(), gamma, eps)?;
    let site = Site::plain(x, p)?;
    let formulas = vec![
        ("E[R^2]", Values::Scalar(fr::mean_of_r2(x, rate)?)),
        (
            "E[RMSNorm(z)]",
            Values::PerUnit(fr::corrected(x, &rms, rate)?),
        ),
    ];
    let units = NoisyUnits::dropout(x, rate)?;
    let mut out = run(
        "rms",
        &site,
        &Plan::Rms { rms: rms.clone() },
        budget,
        formulas,
    )?;
    attach(&mut out, "E[RMSNorm(z)]", &units, Norm::Rms(&rms))?;
    Ok(out)
}

/// `eval bypass`: `E[V]` of `y = h + dropout(v)`, `c_damped`, `E[LN(y)]`
/// (`γ = 1`, `β = 0`, `ε = 0`).
pub fn bypass(h: &[f64], v: &[f64], p: f64, budget: Budget) -> Result<EvalOutput, Error> {
    check_len("v", v, h.len())?;
    let site = Site::new(h.to_vec(), vec![(v.to_vec(), p)])?;
    let ln = LayerNorm::plain(h.len(), 0.0)?;
    let u = weights(&fb::uncorrected(&site, &ln)?, ln.beta())?;
    let formulas = vec![
        ("E[V]", Values::Scalar(fb::mean_of_v(&site)?)),
        ("c_damped", Values::Scalar(fb::damped(&site, 0.0)?)),
        ("E[LN(y)]", Values::PerUnit(fb::corrected(&site, &ln)?)),
    ];
    let units = NoisyUnits::from_site(&site)?;
    let mut out = run(
        "bypass",
        &site,
        &Plan::Bypass { ln: ln.clone(), u },
        budget,
        formulas,
    )?;
    attach(&mut out, "E[LN(y)]", &units, Norm::Ln(&ln))?;
    Ok(out)
}

/// The LayerNorm parameters of `eval compound`: `γ`, `β` of each norm.
#[derive(Debug, Clone, Default)]
pub struct CompoundParams {
    pub gamma1: Vec<f64>,
    pub beta1: Vec<f64>,
    pub gamma2: Option<Vec<f64>>,
    pub beta2: Option<Vec<f64>>,
}

/// `eval compound`: `c1`, `c2`, `E[LN2(LN1(z))]`.
pub fn compound(
    x: &[f64],
    p: f64,
    params: CompoundParams,
    budget: Budget,
) -> Result<EvalOutput, Error> {
    fl::input_moments(x)?;
    let rate = Rate::new(p)?;
    check_len("gamma1", &params.gamma1, x.len())?;
    let ln1 = LayerNorm::new(params.gamma1, params.beta1, 0.0)?;
    let ln2 = LayerNorm::with_defaults(x.len(), params.gamma2, params.beta2, 0.0)?;
    let parts = fc::compound(x, &ln1, &ln2, rate)?;
    let u1 = weights(&fl::uncorrected(x, &ln1)?, ln1.beta())?;
    let u2 = weights(&fc::c1_only(x, &ln1, &ln2, rate)?, ln2.beta())?;
    let formulas = vec![
        ("c1", Values::Scalar(parts.c1)),
        ("c2", Values::Scalar(parts.c2)),
        (
            "E[LN2(LN1(z))]",
            Values::PerUnit(fc::corrected(x, &ln1, &ln2, rate)?),
        ),
    ];
    let site = Site::plain(x, p)?;
    let plan = Plan::Compound { ln1, ln2, u1, u2 };
    run("compound", &site, &plan, budget, formulas)
}
