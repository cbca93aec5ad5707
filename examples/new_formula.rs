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
//! Step 5 registers it: a [`Family`] holding the claim, added to the
//! crate's own families with [`Registry::with_family`]. Every output reads
//! the registry, so the report row, the JSON, `dropmc list` and the
//! conformance kit pick the claim up without an edit inside `src/`.
//!
//! ```text
//! cargo run --release --example new_formula                 # report row + JSON
//! cargo run --release --example new_formula -- list         # dropmc, with the family
//! cargo run --release --example new_formula -- report --family example --json
//! ```

use std::process::ExitCode;

use dropmc::Error;
use dropmc::claims::{Claim, Shape};
use dropmc::engine::{Budget, Sampler, Stream, estimate};
use dropmc::exact::{Oracle, enumerate_masks};
use dropmc::ops::{Rate, Subject};
use dropmc::registry::{Family, Registry};
use dropmc::report::{self, Options};
use dropmc::stats::Estimate;

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

/// Step 5, the family: its name, its claims, and that it needs nothing but
/// a dropout layer (so the conformance kit runs it on any implementation).
pub fn family() -> Family {
    static PAIR_COVARIANCE: PairCovariance = PairCovariance;
    Family::new("example", "pairwise products of dropout outputs")
        .with_claim(&PAIR_COVARIANCE)
        .exercising_dropout_alone()
}

/// The crate's families and this one.
pub fn registry() -> Registry {
    Registry::default().with_family(family())
}

fn main() -> ExitCode {
    let registry = registry();
    // With arguments this program is `dropmc` with the family added.
    let args: Vec<_> = std::env::args_os().collect();
    if args.len() > 1 {
        return dropmc::cli::main_with_registry(&registry, args);
    }
    let options = Options {
        family: Some("example".into()),
        ..Options::default()
    };
    match report::run(&registry, &Subject::reference(), &options) {
        Ok(report) => {
            print!("{}", report::table(&report));
            let json = serde_json::to_string_pretty(&report::to_json(&report));
            println!("{}", json.unwrap_or_default());
            if report.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
