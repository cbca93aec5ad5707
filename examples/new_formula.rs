//! Adding a formula end to end, from outside the crate.
//!
//! The new result: inverted dropout leaves distinct units uncorrelated, so
//! for `j ≠ k`
//!
//! ```text
//! E[z_j z_k] = E[z_j] E[z_k] = x_j x_k          (independent masks)
//! ```
//!
//! The four steps every claim in `src/claims/` follows:
//!
//! 1. the closed form (here `x_j x_k` for each pair), with its derivation in
//!    the doc comment;
//! 2. an exact oracle: enumerate every mask with `exact::enumerate_masks`;
//! 3. a Monte Carlo estimator: a `Sampler` run by `engine::estimate`, which
//!    gives the same bits for the same seed on any number of threads;
//! 4. a `Claim` implementation; `claims::check` then z-tests the estimate at
//!    the suite's level and compares the oracle with the closed form.
//!
//! Inside the crate, step 5 is one line in `src/claims/registry.rs`; the
//! report, `dropmc list`, the JSON, the registry test and the snapshot then
//! pick the claim up. Run with `cargo run --release --example new_formula`.

use dropmc::claims::{Claim, Shape, Verdict, check};
use dropmc::engine::{Budget, Sampler, Stream, derive_seed, estimate};
use dropmc::exact::{Oracle, enumerate_masks};
use dropmc::ops::{Rate, Subject};
use dropmc::stats::Estimate;
use dropmc::{Error, report};

const X: [f64; 4] = [0.5, -1.0, 2.0, 1.5];
const P: f64 = 0.4;

/// The pairs `(j, k)`, `j < k`, in a fixed order.
fn pairs() -> Vec<(usize, usize)> {
    (0..X.len())
        .flat_map(|j| (j + 1..X.len()).map(move |k| (j, k)))
        .collect()
}

/// Step 1, the closed form.
fn products(x: &[f64]) -> Vec<f64> {
    pairs().into_iter().map(|(j, k)| x[j] * x[k]).collect()
}

/// Step 3, the sampler: one training pass of the subject's dropout per draw,
/// the products of its outputs as the statistics.
struct PairProducts<'a> {
    subject: &'a Subject<'a>,
}

impl Sampler for PairProducts<'_> {
    type Scratch = (Vec<f64>, Vec<bool>);
    fn dim(&self) -> usize {
        pairs().len()
    }
    fn scratch(&self) -> Self::Scratch {
        (vec![0.0; X.len()], vec![false; X.len()])
    }
    fn draw(
        &self,
        rng: &mut Stream,
        (z, mask): &mut Self::Scratch,
        out: &mut [f64],
    ) -> Result<(), Error> {
        self.subject.dropout.forward_train(&X, P, rng, z, mask)?;
        for (o, (j, k)) in out.iter_mut().zip(pairs()) {
            *o = z[j] * z[k];
        }
        Ok(())
    }
}

/// Step 4, the claim.
struct PairCovariance;

impl Claim for PairCovariance {
    fn id(&self) -> &'static str {
        "example.pair_product"
    }
    fn family(&self) -> &'static str {
        "example"
    }
    fn formula(&self) -> &'static str {
        "E[z_j z_k] = x_j x_k for j != k"
    }
    fn shape(&self) -> Shape {
        Shape::Vector
    }
    fn default_samples(&self) -> u64 {
        1_000_000
    }
    fn analytic(&self) -> Result<Vec<f64>, Error> {
        Ok(products(&X))
    }
    /// Step 2, the exact oracle.
    fn oracle(&self) -> Result<Option<Oracle>, Error> {
        let rate = Rate::new(P)?;
        let oracle = enumerate_masks(X.len(), rate, pairs().len(), |mask, out| {
            let z: Vec<f64> = X
                .iter()
                .zip(mask)
                .map(|(x, &m)| if m { x / rate.q() } else { 0.0 })
                .collect();
            for (o, (j, k)) in out.iter_mut().zip(pairs()) {
                *o = z[j] * z[k];
            }
        })?;
        Ok(Some(oracle))
    }
    fn estimate(&self, subject: &Subject, budget: Budget) -> Result<Vec<Estimate>, Error> {
        Ok(estimate(&PairProducts { subject }, budget)?.estimates())
    }
}

fn main() -> Result<(), Error> {
    let claim = PairCovariance;
    let budget = Budget::new(claim.default_samples(), derive_seed(1, claim.id()))?;
    let result = check(&claim, &Subject::reference(), budget);
    let report = report::Report {
        seed: 1,
        subject: "reference".into(),
        results: vec![result],
    };
    print!("{}", report::table(&report));
    if report.results[0].verdict != Verdict::Pass {
        return Err(Error::Degenerate {
            what: "the new claim failed".into(),
        });
    }
    Ok(())
}
