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
//! 4. a `Claim` implementation: its `Card` (id, family, formula, shape,
//!    budget, statistic) and the three computations; `claims::check` then
//!    z-tests the estimate at the suite's level and compares the oracle with
//!    the closed form.
//!
//! Step 5 registers it: a [`Family`] holding the claim and an `eval`
//! quantity (the same three parts on the user's own `x` and `p`), added to
//! the crate's families with [`Registry::with_family`]. Every output reads
//! the registry, so the report row, the JSON, `dropmc list`, `dropmc eval
//! pairs` and the conformance kit pick the family up without an edit
//! inside `src/`.
//!
//! ```text
//! cargo run --release --example new_formula                 # report row + JSON
//! cargo run --release --example new_formula -- list         # dropmc, with the family
//! cargo run --release --example new_formula -- report --family example --json
//! cargo run --release --example new_formula -- eval pairs --x 1,2,3 --p 0.2
//! ```

use std::process::ExitCode;

use dropmc::conformance::report::{self, Options};
use dropmc::{
    Budget, Card, Claim, Error, Estimate, EvalOutput, EvalQuantity, EvalResult, Family,
    MAX_ENUMERATION_D, Oracle, Rate, Registry, Sampler, SamplerKind, Shape, Stream, Subject,
    TrainPass, Values, enumerate_masks, estimate, monte_carlo, read_list, read_number,
};

/// The claim's configuration.
const X: [f64; 4] = [0.5, -1.0, 2.0, 1.5];
const P: f64 = 0.4;

/// The pairs `(j, k)`, `j < k`, of `d` units in a fixed order.
fn pairs(d: usize) -> Vec<(usize, usize)> {
    (0..d)
        .flat_map(|j| (j + 1..d).map(move |k| (j, k)))
        .collect()
}

/// Step 1, the closed form.
fn products(x: &[f64]) -> Vec<f64> {
    pairs(x.len())
        .into_iter()
        .map(|(j, k)| x[j] * x[k])
        .collect()
}

/// Step 2, the exact oracle: the mean of `z_j z_k` over every mask.
fn enumerated_products(x: &[f64], rate: Rate) -> Result<Oracle, Error> {
    let pairs = pairs(x.len());
    enumerate_masks(x.len(), rate, pairs.len(), |mask, out| {
        let z: Vec<f64> = x
            .iter()
            .zip(mask)
            .map(|(v, &m)| if m { v / rate.q() } else { 0.0 })
            .collect();
        for (o, &(j, k)) in out.iter_mut().zip(&pairs) {
            *o = z[j] * z[k];
        }
    })
}

/// Step 3, the sampler: one training pass of the subject's dropout per draw,
/// the products of its outputs as the statistics.
struct PairProducts<'a> {
    subject: &'a Subject<'a>,
    x: &'a [f64],
    p: f64,
    pairs: Vec<(usize, usize)>,
}

impl Sampler for PairProducts<'_> {
    type Scratch = (Vec<f64>, Vec<bool>);
    fn dim(&self) -> usize {
        self.pairs.len()
    }
    fn scratch(&self) -> Self::Scratch {
        (vec![0.0; self.x.len()], vec![false; self.x.len()])
    }
    fn draw(
        &self,
        rng: &mut Stream,
        (z, mask): &mut Self::Scratch,
        out: &mut [f64],
    ) -> Result<(), Error> {
        self.subject
            .dropout
            .forward_train(TrainPass::new(self.x, z, mask), self.p, rng)?;
        for (o, &(j, k)) in out.iter_mut().zip(&self.pairs) {
            *o = z[j] * z[k];
        }
        Ok(())
    }
}

fn sample_products(
    subject: &Subject,
    x: &[f64],
    p: f64,
    budget: Budget,
) -> Result<Vec<Estimate>, Error> {
    let sampler = PairProducts {
        subject,
        x,
        p,
        pairs: pairs(x.len()),
    };
    Ok(estimate(&sampler, budget)?.estimates())
}

/// Step 4, the claim.
struct PairCovariance;

impl Claim for PairCovariance {
    fn card(&self) -> Card {
        Card::new(
            "example.pair_product",
            "example",
            "E[z_j z_k] = x_j x_k for j != k",
            Shape::Vector,
            1_000_000,
        )
    }
    fn analytic(&self) -> Result<Vec<f64>, Error> {
        Ok(products(&X))
    }
    fn oracle(&self) -> Result<Option<Oracle>, Error> {
        Ok(Some(enumerated_products(&X, Rate::new(P)?)?))
    }
    fn estimate(&self, subject: &Subject, budget: Budget) -> Result<Vec<Estimate>, Error> {
        sample_products(subject, &X, P, budget)
    }
}

/// Arguments of `eval pairs`.
#[derive(Debug, clap::Args)]
pub struct PairArgs {
    /// The pre-dropout vector, comma-separated, or @FILE.
    #[arg(long, allow_hyphen_values = true)]
    pub x: String,
    /// Drop rate, 0 <= p < 1.
    #[arg(long, allow_hyphen_values = true)]
    pub p: String,
}

/// Step 5a, the `eval` quantity: closed form, exact value (enumeration up to
/// the crate's limit) and Monte Carlo on the user's numbers; `--samples` and
/// `--seed`, which every quantity takes, arrive as `budget`.
fn eval_pairs(args: PairArgs, budget: Budget) -> Result<EvalOutput, Error> {
    let x = read_list("--x", &args.x)?;
    let p = read_number("--p", &args.p)?;
    let rate = Rate::new(p)?;
    let enumerated = if x.len() <= MAX_ENUMERATION_D {
        Some(enumerated_products(&x, rate)?.values)
    } else {
        None
    };
    let estimates = monte_carlo(budget)?
        .map(|b| sample_products(&Subject::reference(), &x, p, b))
        .transpose()?;
    let result = EvalResult::exact("E[z_j z_k]", Values::PerUnit(products(&x)), enumerated)
        .with_optional_estimates(estimates.as_deref(), SamplerKind::Generic);
    EvalOutput::new("pairs", p, x.len(), budget, vec![result]).checked()
}

/// Step 5b, the family: its name, its claim, that it needs nothing but a
/// dropout layer (so the conformance kit runs it on any implementation),
/// and its `eval` quantity.
pub fn family() -> Family {
    static PAIR_COVARIANCE: PairCovariance = PairCovariance;
    Family::new("example", "pairwise products of dropout outputs")
        .with_claim(&PAIR_COVARIANCE)
        .exercising_dropout_alone()
        .with_quantity(EvalQuantity::new(
            "pairs",
            "E[z_j z_k] = x_j x_k for every pair j < k.",
            eval_pairs,
        ))
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
