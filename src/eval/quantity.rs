//! Every `eval` quantity as a value: its name, its one-line help, its clap
//! arguments and its run. Each quantity's module makes its value
//! (`eval::ln::quantity()`), and a family registers that value, so a
//! misspelt quantity is a compile error rather than a silent omission. The command line builds `dropmc eval <name>` from
//! [`EvalQuantity::command`] and runs it with [`EvalQuantity::run_matches`];
//! bindings and other front ends call [`EvalQuantity::run_args`] with the
//! same flags and get the same [`EvalOutput`] (so the same JSON).
//!
//! ```
//! let registry = dropmc::Registry::default();
//! let ln = registry.quantity("ln").unwrap();
//! let args = ["--x", "1,2,4,-1", "--p", "0.3", "--samples", "0"].map(String::from);
//! let out = ln.run_args(&args).unwrap();
//! assert_eq!(out.quantity, "ln");
//! assert!(out.results.iter().all(|r| r.mc.is_none())); // --samples 0: closed forms only
//! ```

use std::sync::Arc;

use clap::{ArgMatches, Args, Command, FromArgMatches};

use super::EvalOutput;
use crate::engine::Budget;
use crate::engine::DEFAULT_SEED;
use crate::error::Error;

type Runner = Arc<dyn Fn(&ArgMatches) -> Result<EvalOutput, Error> + Send + Sync>;
type Augment = Arc<dyn Fn(Command) -> Command + Send + Sync>;

/// One `eval` quantity: `dropmc eval <name> ...`.
#[derive(Clone)]
pub struct EvalQuantity {
    name: &'static str,
    about: &'static str,
    long_about: Option<&'static str>,
    args: Augment,
    run: Runner,
}

impl std::fmt::Debug for EvalQuantity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EvalQuantity")
            .field("name", &self.name)
            .field("about", &self.about)
            .finish_non_exhaustive()
    }
}

impl EvalQuantity {
    /// A quantity whose arguments are the clap-derived struct `A` followed
    /// by the [`SamplingArgs`] every quantity takes, and whose evaluation is
    /// `run` (given `A` and the budget those make).
    pub fn new<A: Args + FromArgMatches + 'static>(
        name: &'static str,
        about: &'static str,
        run: fn(A, Budget) -> Result<EvalOutput, Error>,
    ) -> Self {
        EvalQuantity {
            name,
            about,
            long_about: None,
            args: Arc::new(|c: Command| SamplingArgs::augment_args(A::augment_args(c))),
            run: Arc::new(move |m: &ArgMatches| {
                let args = A::from_arg_matches(m).map_err(|e| usage(&e))?;
                let sampling = SamplingArgs::from_arg_matches(m).map_err(|e| usage(&e))?;
                run(args, sampling.budget())
            }),
        }
    }

    /// The same quantity with a longer `--help` text.
    pub fn long_about(mut self, text: &'static str) -> Self {
        self.long_about = Some(text);
        self
    }

    /// The subcommand's name (`ln`, `rms`, ...).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The one-line help.
    pub fn about(&self) -> &'static str {
        self.about
    }

    /// The clap subcommand: `Command::new(name).about(about)` with the
    /// quantity's arguments.
    pub fn command(&self) -> Command {
        // After the arguments: the derive sets the struct's doc comment as
        // the about text, which names the struct, not the quantity.
        (self.args)(Command::new(self.name))
            .about(self.about)
            .long_about(self.long_about)
    }

    /// Runs the quantity on arguments clap has already parsed with
    /// [`EvalQuantity::command`].
    pub fn run_matches(&self, m: &ArgMatches) -> Result<EvalOutput, Error> {
        (self.run)(m)
    }

    /// Parses `args` (flags only, no program name: `["--x", "1,2,3", "--p",
    /// "0.1"]`) with the same clap command as the command line and runs the
    /// quantity. A clap error is [`Error::Usage`] with clap's whole message.
    pub fn run_args(&self, args: &[String]) -> Result<EvalOutput, Error> {
        let argv = std::iter::once(self.name.to_string()).chain(args.iter().cloned());
        let matches = self
            .command()
            .try_get_matches_from(argv)
            .map_err(|e| usage(&e))?;
        self.run_matches(&matches)
    }
}

fn usage(e: &clap::Error) -> Error {
    Error::Usage {
        message: e.render().to_string(),
    }
}

/// The drop rate `--p` of the quantities with one dropout of a given rate.
#[derive(Debug, Clone, Args)]
pub struct RateArg {
    /// Drop rate, 0 <= p < 1.
    #[arg(long, allow_hyphen_values = true)]
    pub p: String,
}

impl RateArg {
    /// The rate given (checked against `0 <= p < 1` where it is used).
    pub fn value(&self) -> Result<f64, Error> {
        crate::eval::input::read_number("--p", &self.p)
    }
}

/// The pre-dropout vector `--x` and its drop rate `--p`, for the quantities
/// that drop one vector.
#[derive(Debug, Clone, Args)]
pub struct DroppedVectorArgs {
    /// The pre-dropout vector, comma-separated (or @FILE).
    #[arg(long, allow_hyphen_values = true)]
    pub x: String,
    #[command(flatten)]
    pub p: RateArg,
}

impl DroppedVectorArgs {
    /// The vector and the rate given (read in that order, so the first bad
    /// flag is the one an error names).
    pub fn values(&self) -> Result<(Vec<f64>, f64), Error> {
        Ok((
            crate::eval::input::read_list("--x", &self.x)?,
            self.p.value()?,
        ))
    }
}

/// Sampling options shared by every `eval` quantity: [`EvalQuantity::new`]
/// adds them after the quantity's own arguments.
#[derive(Debug, Clone, Args)]
pub struct SamplingArgs {
    /// Monte Carlo draws (0: closed forms and exact values only).
    #[arg(long, default_value_t = 1_000_000, value_parser = crate::eval::input::parse_count, allow_hyphen_values = true)]
    pub samples: u64,
    /// Seed of the random streams.
    #[arg(long, default_value_t = DEFAULT_SEED, value_parser = crate::eval::input::parse_count)]
    pub seed: u64,
}

impl SamplingArgs {
    /// The budget (`--samples 0` is kept: each quantity then skips Monte Carlo).
    pub fn budget(&self) -> Budget {
        Budget {
            samples: self.samples,
            seed: self.seed,
        }
    }
}

/// Declares an `eval` module's `pub fn quantity() -> EvalQuantity`: the
/// module's `ABOUT` and `run` under the name the command line and the
/// bindings call it by. A family registers this function, not the name, so
/// a misspelt quantity does not compile.
macro_rules! eval_quantity {
    ($name:literal) => {
        #[doc = concat!(
                    "`dropmc eval ", $name, "`: this module's `ABOUT` and `run` as one ",
                    "[`EvalQuantity`](crate::eval::EvalQuantity) (declared by `eval_quantity!`)."
                )]
        pub fn quantity() -> crate::eval::EvalQuantity {
            crate::eval::EvalQuantity::new($name, ABOUT, run)
        }
    };
}
pub(crate) use eval_quantity;
