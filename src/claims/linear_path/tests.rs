//! The family's own checks: every exact closed form agrees with its
//! enumeration, and each wrong covariance rule planted in place of the
//! right one fails its claim (on the oracle and on the z-test).

use super::*;
use crate::claims::{Verdict, check};
use crate::engine::DEFAULT_SEED;
use crate::ops::Rate;
use nalgebra::DMatrix;

fn claim(id: &str) -> &'static PathClaim {
    path_claims()
        .iter()
        .find(|c| c.id == id)
        .expect("a listed claim")
}

/// A claim whose closed form is replaced by a planted (wrong) one.
struct Planted {
    real: &'static PathClaim,
    analytic: Vec<f64>,
}

impl Claim for Planted {
    fn card(&self) -> Card {
        self.real.card()
    }
    fn analytic(&self) -> Result<Vec<f64>, Error> {
        Ok(self.analytic.clone())
    }
    fn oracle(&self) -> Result<Option<Oracle>, Error> {
        self.real.oracle()
    }
    fn estimate(&self, subject: &Subject, budget: Budget) -> Result<Vec<Estimate>, Error> {
        self.real.estimate(subject, budget)
    }
}

/// Runs the claim at its default budget; the verdict and whether a z-test
/// rejected.
fn run(c: &dyn Claim) -> (Verdict, bool) {
    let budget = Budget::new(c.default_samples(), DEFAULT_SEED).unwrap();
    let r = check(c, &Subject::reference(), budget);
    assert!(r.error.is_none(), "{}: {:?}", c.id(), r.error);
    (r.verdict, r.tests.iter().any(|t| t.rejected))
}

/// The path's moments with `wrong` applied after the source and after
/// every linear map.
fn moments_with(path: &Path, wrong: impl Fn(&mut Moments)) -> Moments {
    let mut m = path.source.moments();
    wrong(&mut m);
    for step in &path.steps {
        m = match step {
            Step::Linear { w, b } => {
                let mut next = m.linear(w, b);
                wrong(&mut next);
                next
            }
            Step::Add(h) => m.add(h),
            Step::Dropout(rate) => m.dropout(*rate),
        };
    }
    m
}

fn drop_off_diagonal(m: &mut Moments) {
    let diag = m.cov.diagonal();
    m.cov = DMatrix::from_diagonal(&diag);
}

/// `source`'s moments carried through the path's steps, a further dropout
/// by `dropout` (the real rule, or a planted one).
fn through_steps(
    path: &Path,
    source: Moments,
    dropout: impl Fn(&Moments, Rate) -> Moments,
) -> Moments {
    path.steps.iter().fold(source, |m, s| match s {
        Step::Linear { w, b } => m.linear(w, b),
        Step::Add(h) => m.add(h),
        Step::Dropout(r) => dropout(&m, *r),
    })
}

/// The claim `real` with its closed form taken from the planted moments
/// `m` must fail, by a z-test's rejection (not only the oracle).
fn planted_fails(real: &'static PathClaim, m: &Moments) {
    let planted = Planted {
        real,
        analytic: real.closed_form_of(m).unwrap(),
    };
    let (verdict, rejected) = run(&planted);
    assert_eq!(verdict, Verdict::Fail, "{}", real.id());
    assert!(
        rejected,
        "{}: the z-test must reject, not only the oracle",
        real.id()
    );
}

#[test]
fn every_exact_closed_form_agrees_with_its_enumeration() {
    for c in path_claims() {
        if c.quantity == Quantity::Output {
            continue;
        }
        let oracle = c.oracle().unwrap().unwrap();
        let analytic = c.analytic().unwrap();
        assert!(
            oracle.agrees_with(&analytic),
            "{}: {analytic:?} vs {oracle:?}",
            c.id
        );
    }
}

#[test]
fn the_real_rules_pass_their_claims() {
    for id in [
        "linear_path.covariance",
        "linear_path.attention_covariance",
        "linear_path.chain_covariance",
    ] {
        assert_eq!(run(claim(id)).0, Verdict::Pass, "{id}");
    }
}

#[test]
fn dropping_the_off_diagonal_fails_the_covariance_claims() {
    for id in [
        "linear_path.covariance",
        "linear_path.attention_covariance",
        "linear_path.chain_covariance",
    ] {
        let real = claim(id);
        let m = moments_with(&real.path(), drop_off_diagonal);
        planted_fails(real, &m);
    }
}

#[test]
fn forgetting_a_head_fails_the_attention_claims() {
    for id in [
        "linear_path.attention_covariance",
        "linear_path.attention_mean_of_v",
    ] {
        let real = claim(id);
        let path = real.path();
        let Source::Attention { heads, rate } = &path.source else {
            panic!("an attention path")
        };
        // The second head's covariance block forgotten (its mean kept).
        let one = Source::Attention {
            heads: heads[..1].to_vec(),
            rate: *rate,
        };
        let mut source = path.source.moments();
        let kept = one.moments().cov;
        let n = kept.nrows();
        source.cov.fill(0.0);
        source.cov.view_mut((0, 0), (n, n)).copy_from(&kept);
        let m = through_steps(&path, source, |m, r| m.dropout(r));
        planted_fails(real, &m);
    }
}

#[test]
fn treating_the_second_dropout_input_as_fixed_fails_the_chain() {
    // Rule 1 in place of rule 5: (p/q) diag(x̄²) without diag Σ_x.
    let real = claim("linear_path.chain_covariance");
    let path = real.path();
    let m = through_steps(&path, path.source.moments(), |m, r| {
        let extra = m.mean.map(|x| r.odds() * x * x);
        Moments {
            mean: m.mean.clone(),
            cov: &m.cov + DMatrix::from_diagonal(&extra),
        }
    });
    planted_fails(real, &m);
}

#[test]
fn the_first_order_output_beats_the_eval_output() {
    let (first, eval) = claim("linear_path.output").output_gaps().unwrap();
    println!("first-order gap {first:e}, eval gap {eval:e}");
    assert!(first < eval / 3.0, "first {first} eval {eval}");
}

#[test]
fn the_first_order_output_passes_its_order_check_and_planted_forms_fail_it() {
    let real = claim("linear_path.output");
    let order = real.order_check_with(sweep::first_order).unwrap();
    println!("first order: {}", order.summary());
    assert!(order.passed(), "{}", order.summary());
    let squared: sweep::ClosedForm = |path, rate| {
        // c² in place of c.
        let c = sweep::first_order(path, rate)?;
        let eval = sweep::eval_output(path, rate)?;
        Ok(c.iter().zip(&eval).map(|(c, e)| c * c / e).collect())
    };
    for (what, plant) in [
        ("the eval output", sweep::eval_output as sweep::ClosedForm),
        ("c squared", squared),
    ] {
        let order = real.order_check_with(plant).unwrap();
        println!("{what}: {}", order.summary());
        assert!(!order.passed(), "{what} passed: {}", order.summary());
    }
}

#[test]
fn the_sweeps_grouped_oracle_agrees_with_full_enumeration() {
    // The same path through the general forward on all 2^d masks. Each
    // mask's LN(y)_k is a two-pass reduction over d units and a division
    // (≤ 2d + 40 roundings) of a value at most sqrt(d) in size (|LN_k| ≤
    // sqrt(d − 1) at γ = 1, β = 0); that bound is added to both oracles' own.
    use crate::formulas::layernorm;
    use crate::ops::LayerNorm;
    use crate::stats::tolerance::gamma_upper;
    for d in [4, 8, 12, 16] {
        let sweep::SweepPath { u, mean, w } = sweep::path(d);
        let h = &mean - &w * &u;
        let path = Path {
            source: Source::Dropped {
                u: u.as_slice().to_vec(),
                rate: crate::ops::Rate::new(0.3).unwrap(),
            },
            steps: vec![
                Step::Linear {
                    w: w.clone(),
                    b: DVector::zeros(d),
                },
                Step::Add(h),
            ],
        };
        let ln = LayerNorm::new(vec![1.0; d], vec![0.0; d], 0.0).unwrap();
        let full = ex::path_expectation(&path, d, |y, _, out| {
            out.copy_from_slice(&layernorm::uncorrected(y.as_slice(), &ln).unwrap())
        })
        .unwrap();
        let (values, rounding) = sweep::exact(d).unwrap();
        for k in 0..d {
            let g = usize::from(k >= d / 2);
            let tol = full.rounding[k]
                + rounding[g]
                + gamma_upper(2.0 * d as f64 + 40.0) * (d as f64).sqrt();
            assert!(
                (full.values[k] - values[g]).abs() <= tol,
                "d = {d}, unit {k}: full {} grouped {} tol {tol:e}",
                full.values[k],
                values[g]
            );
        }
    }
}

const U: [f64; 6] = [1.5, -0.4, 0.8, 2.0, -1.1, 0.3];
const H: [f64; 6] = [0.2, 1.0, -0.5, 0.0, 0.7, -1.3];

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-13 * a.abs().max(b.abs()).max(1.0)
}

/// The bypass reduction (here: `Site` lives in `ops`, above `formulas`).
#[test]
fn the_bypass_path_gives_the_damped_form() {
    let site = crate::ops::Site::new(H.to_vec(), vec![(U.to_vec(), 0.3)]).unwrap();
    let mut path = Path {
        source: Source::Dropped {
            u: U.to_vec(),
            rate: crate::ops::Rate::new(0.3).unwrap(),
        },
        steps: vec![],
    };
    path.steps.push(Step::Add(DVector::from_column_slice(&H)));
    let m = path.moments().unwrap();
    assert!(close(
        f::mean_of_v(&m),
        crate::formulas::bypass::mean_of_v(&site).unwrap()
    ));
    let s2 = crate::formulas::layernorm::input_moments(m.mean.as_slice())
        .unwrap()
        .1;
    let c = f::ln_factor_from_trace(s2, m.cov.trace(), U.len(), 0.1).unwrap();
    assert!(close(
        c,
        crate::formulas::bypass::damped(&site, 0.1).unwrap()
    ));
}
