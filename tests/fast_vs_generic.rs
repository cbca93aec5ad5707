//! The switch to the fast path is honest: every quantity of the
//! normalization families that the fast kernels now estimate (`FastSite`,
//! `FastCompound`) agrees with the per-element (generic) estimate of the
//! same configuration, drawn from different streams.
//!
//! Two independent estimates of one expectation: `z = (a − b)/√(se_a² + se_b²)`,
//! tested by `common::assert_same` (Student-t at the smaller dof, at the
//! suite's per-assertion level).
//!
//! False-alarm accounting (recorded by `tests/common`, summed by
//! `tests/zz_budget.rs`):
//! * `every_norm_claim_agrees_on_the_fast_and_the_generic_path`: every
//!   component of every claim that declares the norm-site fast path
//!   ([`FastPath::NormSite`]), once (counted as they run: the registry's
//!   components of those claims);
//! * `eval_quantities_agree_on_the_fast_and_the_generic_path`: every `mc`
//!   component of `eval ln | rms | bypass | compound` at d = 12, once at
//!   ε = 0 and once at ε = 0.1 for ln and rms: `(4 + d) + (1 + d)` twice,
//!   `(2 + d) + (2 + d)` once, 86 components;
//! * `a_bypass_whose_y_is_often_constant_matches_the_exact_value`: 8
//!   components of `eval bypass` against the exact enumeration.
//!
//! The other tests make no statistical assertion.

use dropmc::Error;
use dropmc::claims::{FastPath, registry};
use dropmc::engine::{Budget, Sampler, Stream, estimate};
use dropmc::eval::norm::{self, CompoundParams};
use dropmc::eval::{EvalOutput, LayerNormParams};
use dropmc::ops::fast::FastSite;
use dropmc::ops::{AnyNorm, InvertedDropout, LayerNorm, RmsNorm, Site, Subject};
use dropmc::stats::Estimate;

mod common;

fn assert_same(what: &str, a: Estimate, b: Estimate) {
    common::assert_same(&format!("{what} (fast vs generic)"), a, b);
}

#[test]
fn every_norm_claim_agrees_on_the_fast_and_the_generic_path() {
    let (mut components, mut declared) = (0, 0);
    for claim in registry() {
        if claim.fast_path() != Some(FastPath::NormSite) {
            continue;
        }
        declared += claim.analytic().unwrap().len();
        let fast = claim
            .fast_estimate(Budget::new(400_000, 31).unwrap())
            .unwrap_or_else(|| panic!("{} has no fast estimate", claim.id()))
            .unwrap();
        let generic = claim
            .estimate(&Subject::reference(), Budget::new(100_000, 32).unwrap())
            .unwrap();
        assert_eq!(fast.len(), generic.len(), "{}", claim.id());
        for (k, (a, b)) in fast.iter().zip(&generic).enumerate() {
            assert_same(&format!("{}[{k}]", claim.id()), *a, *b);
            components += 1;
        }
    }
    // Every component of every declaring claim was compared (none skipped
    // by a short estimate), and there were some.
    assert_eq!(components, declared);
    assert!(components > 0);
}

/// The statistics of one draw of `eval`'s quantities, by the per-element
/// path: the reference dropout through `Site::draw`, then the crate's norms.
/// Each shrink factor is `Σ_k (out_k − β_k) u_k / Σ u²` with `u` the
/// uncorrected output minus `β` (written here from the definition).
struct EvalSampler {
    site: Site,
    quantity: &'static str,
    ln1: LayerNorm,
    ln2: LayerNorm,
    rms: RmsNorm,
    u1: Vec<f64>,
    u2: Vec<f64>,
}

fn factor(out: &[f64], beta: &[f64], u: &[f64]) -> f64 {
    let norm: f64 = u.iter().map(|v| v * v).sum();
    out.iter()
        .zip(beta)
        .zip(u)
        .map(|((o, b), u)| (o - b) * u)
        .sum::<f64>()
        / norm
}

fn moments(y: &[f64]) -> (f64, f64, f64) {
    let d = y.len() as f64;
    let m = y.iter().sum::<f64>() / d;
    let v = y.iter().map(|a| (a - m) * (a - m)).sum::<f64>() / d;
    (m, v, y.iter().map(|a| a * a).sum::<f64>() / d)
}

impl Sampler for EvalSampler {
    type Scratch = [Vec<f64>; 4];
    fn dim(&self) -> usize {
        let d = self.site.dim();
        match self.quantity {
            "ln" => 4 + d,
            "rms" => 1 + d,
            _ => 2 + d,
        }
    }
    fn scratch(&self) -> Self::Scratch {
        let d = self.site.dim();
        [vec![0.0; d], vec![0.0; d], vec![0.0; d], vec![0.0; d]]
    }
    fn draw(&self, rng: &mut Stream, s: &mut Self::Scratch, out: &mut [f64]) -> Result<(), Error> {
        let [y, buf, tmp, alt] = s;
        let mut mask = vec![false; y.len()];
        self.site.draw(&InvertedDropout, rng, y, buf, &mut mask)?;
        let (m, v, r2) = moments(y);
        match self.quantity {
            "ln" => {
                self.ln1.forward(y, &mut out[4..])?;
                self.site.draw(&InvertedDropout, rng, alt, buf, &mut mask)?;
                let m_alt = moments(alt).0;
                out[..3].copy_from_slice(&[m, 0.5 * (m - m_alt) * (m - m_alt), v]);
                out[3] = factor(&out[4..], self.ln1.beta(), &self.u1);
            }
            "rms" => {
                out[0] = r2;
                self.rms.forward(y, &mut out[1..])?;
            }
            "bypass" => {
                out[0] = v;
                self.ln1.forward(y, &mut out[2..])?;
                out[1] = factor(&out[2..], self.ln1.beta(), &self.u1);
            }
            _ => {
                self.ln1.forward(y, tmp)?;
                self.ln2.forward(tmp, &mut out[2..])?;
                out[0] = factor(tmp, self.ln1.beta(), &self.u1);
                out[1] = factor(&out[2..], self.ln2.beta(), &self.u2);
            }
        }
        Ok(())
    }
}

fn minus(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(a, b)| a - b).collect()
}

fn compare(output: &EvalOutput, generic: &EvalSampler) -> usize {
    let reference = estimate(generic, Budget::new(100_000, 42).unwrap())
        .unwrap()
        .estimates();
    let mut at = 0;
    for r in &output.results {
        assert_eq!(
            r.sampler.map(|s| s.label()),
            Some("fast"),
            "{} {}",
            output.quantity,
            r.name
        );
        let (mc, se) = r.estimate().expect("a Monte Carlo run");
        for (k, (&mc, &se)) in mc.iter().zip(se).enumerate() {
            let fast = Estimate {
                value: mc,
                stderr: se,
                n: output.samples,
                dof: f64::INFINITY,
            };
            assert_same(
                &format!("eval {} {}[{k}]", output.quantity, r.name),
                fast,
                reference[at],
            );
            at += 1;
        }
    }
    assert_eq!(at, reference.len());
    at
}

#[test]
fn eval_quantities_agree_on_the_fast_and_the_generic_path() {
    let d = 12;
    let x: Vec<f64> = (0..d)
        .map(|k| ((k * 5 % 7) as f64 - 2.0) * 0.6 + 0.4)
        .collect();
    let h: Vec<f64> = (0..d).map(|k| (k as f64 * 0.9).cos()).collect();
    let g1: Vec<f64> = (0..d).map(|k| 0.6 + 0.1 * (k % 5) as f64).collect();
    let b1: Vec<f64> = (0..d).map(|k| 0.2 * (k % 3) as f64 - 0.2).collect();
    let g2: Vec<f64> = g1.iter().rev().copied().collect();
    let b2: Vec<f64> = b1.iter().map(|b| -b).collect();
    let p = 0.25;
    let budget = Budget::new(400_000, 41).unwrap();
    let plain = Site::plain(&x, p).unwrap();
    let sampler = |site: &Site, quantity, ln1: LayerNorm, rms: RmsNorm, u1, u2| EvalSampler {
        site: site.clone(),
        quantity,
        ln2: LayerNorm::new(g2.clone(), b2.clone(), 0.0).unwrap(),
        ln1,
        rms,
        u1,
        u2,
    };
    let mut components = 0;
    for eps in [0.0, 0.1] {
        let ln = LayerNorm::new(g1.clone(), b1.clone(), eps).unwrap();
        let rms = RmsNorm::new(g1.clone(), eps).unwrap();
        let mut clean = vec![0.0; d];
        ln.forward(&x, &mut clean).unwrap();
        let ln_params = LayerNormParams {
            gamma: Some(g1.clone()),
            beta: Some(b1.clone()),
            eps,
        };
        let out = norm::ln(&x, p, ln_params, budget).unwrap();
        let u1 = minus(&clean, &b1);
        components += compare(&out, &sampler(&plain, "ln", ln, rms.clone(), u1, vec![]));
        let out = norm::rms(&x, p, Some(g1.clone()), eps, budget).unwrap();
        let ln = LayerNorm::plain(d, 0.0).unwrap();
        components += compare(&out, &sampler(&plain, "rms", ln, rms, vec![], vec![]));
    }
    // bypass: y = h + dropout(x), plain LayerNorm, ε = 0.
    let site = Site::new(h.clone(), vec![(x.clone(), p)]).unwrap();
    let ln = LayerNorm::plain(d, 0.0).unwrap();
    let mut clean = vec![0.0; d];
    ln.forward(&site.clean(), &mut clean).unwrap();
    let out = norm::bypass(&h, &x, p, budget).unwrap();
    let rms = RmsNorm::new(vec![1.0; d], 0.0).unwrap();
    components += compare(
        &out,
        &sampler(&site, "bypass", ln, rms.clone(), clean, vec![]),
    );
    // compound: the c1-only estimate for LN2's weights, as eval defines it.
    let params = CompoundParams {
        gamma1: g1.clone(),
        beta1: b1.clone(),
        gamma2: Some(g2.clone()),
        beta2: Some(b2.clone()),
        eps: 0.0,
    };
    let out = norm::compound(&x, p, params, budget).unwrap();
    let ln1 = LayerNorm::new(g1.clone(), b1.clone(), 0.0).unwrap();
    let mut first = vec![0.0; d];
    ln1.forward(&x, &mut first).unwrap();
    let c1 = out.results[0].formula.as_slice()[0];
    let c1_hat: Vec<f64> = first
        .iter()
        .zip(&b1)
        .map(|(f, b)| b + c1 * (f - b))
        .collect();
    let ln2 = LayerNorm::new(g2.clone(), b2.clone(), 0.0).unwrap();
    let mut second = vec![0.0; d];
    ln2.forward(&c1_hat, &mut second).unwrap();
    let (u1, u2) = (minus(&first, &b1), minus(&second, &b2));
    components += compare(&out, &sampler(&plain, "compound", ln1, rms, u1, u2));
    assert_eq!(components, 2 * ((4 + d) + (1 + d)) + 2 * (2 + d));
}

/// Where the fast kernel cannot reproduce the per-element function it says
/// so (`None`), and the callers fall back: two dropped terms whose `y` can
/// be constant (`h = 0`, so the all-dropped mask gives `y = 0`) with `ε = 0`
/// before LayerNorm; too few masks for batch means. One dropped term with
/// `ε = 0` is recognised exactly and stays on the fast path.
#[test]
fn the_fast_kernel_declines_what_it_cannot_compute_exactly() {
    let d = 6;
    let v: Vec<f64> = (0..d).map(|k| 1.0 + k as f64).collect();
    let ln = AnyNorm::Layer(LayerNorm::plain(d, 0.0).unwrap());
    let two = Site::new(vec![0.0; d], vec![(v.clone(), 0.5), (v.clone(), 0.5)]).unwrap();
    let kernel = FastSite::new(&two, &ln, true).unwrap();
    assert!(
        kernel
            .estimate(Budget::new(10_000, 1).unwrap())
            .unwrap()
            .is_none()
    );
    let one = Site::plain(&v, 0.5).unwrap();
    let kernel = FastSite::new(&one, &ln, true).unwrap();
    assert!(
        kernel
            .estimate(Budget::new(10_000, 1).unwrap())
            .unwrap()
            .is_some()
    );
    assert!(
        kernel
            .estimate(Budget::new(100, 1).unwrap())
            .unwrap()
            .is_none()
    );
    // ... and eval then reports the generic sampler.
    let out = norm::ln(
        &v,
        0.5,
        LayerNormParams::default(),
        Budget::new(100, 1).unwrap(),
    )
    .unwrap();
    assert!(
        out.results
            .iter()
            .all(|r| r.sampler.map(|s| s.label()) == Some("generic"))
    );
}

/// The constant-input rule with `ε = 0` on the fast path: `y = h + dropout(v)`
/// with `h = (1, 1, 1, 1, 0, 0)`, `v = (0, 0, 0, 0, ½, ½)`, `p = ½`, so `y`
/// is the constant 1 (LayerNorm gives `β`) whenever units 4 and 5 are both
/// kept, a quarter of the masks. `eval bypass` must be on the fast path and
/// its `mc` must match the exact enumeration of the 64 masks: 2 + 6 = 8
/// z-tests.
#[test]
fn a_bypass_whose_y_is_often_constant_matches_the_exact_value() {
    let h = [1.0, 1.0, 1.0, 1.0, 0.0, 0.0];
    let v = [0.0, 0.0, 0.0, 0.0, 0.5, 0.5];
    let out = norm::bypass(&h, &v, 0.5, Budget::new(400_000, 44).unwrap()).unwrap();
    let mut tested = 0;
    for r in &out.results {
        assert_eq!(r.sampler.map(|s| s.label()), Some("fast"), "{}", r.name);
        let exact = r.exact.as_ref().expect("6 mask bits are enumerated");
        let (mc, se) = r.estimate().expect("a Monte Carlo run");
        for (k, ((&mc, &se), &want)) in mc.iter().zip(se).zip(exact.as_slice()).enumerate() {
            // Batch means of 64 masks: about one degree of freedom per batch.
            let estimate = Estimate {
                value: mc,
                stderr: se,
                n: 400_000,
                dof: 400_000.0 / 64.0 - 1.0,
            };
            common::assert_consistent(&format!("{}[{k}]", r.name), estimate, want);
            tested += 1;
        }
    }
    assert_eq!(tested, 8);
}
