//! `eval linear_path`: a dropout that reaches its norm through a linear
//! layer, `y = W (m ⊙ u / q) + b + h` in front of a LayerNorm (or, with
//! `--rms`, an RMSNorm) — `E[V]` (`E[R²]`) exact, the factor `c` (`c_rms`)
//! and `E[LN(y)]` (`E[RMSNorm(y)]`) to leading order. Derivations:
//! [`crate::formulas::linear_path`] (`Σ = (p/q) W diag(u²) Wᵀ`, then
//! `E[V] = V(ȳ) + tr(CΣC)/d`, `E[R²] = mean ȳ² + tr Σ/d`).
//!
//! `exact` enumerates the `2^m` masks of `u` through the path's own forward
//! ([`crate::exact::linear_path`], which never uses the covariance rules)
//! when `m ≤` [`MAX_ENUMERATION_D`]; `mc` samples masks through the
//! reference dropout layer ([`sample_path`]). The factor has no enumerated
//! or sampled value here (it is a derived quantity of the two others).

use clap::Args;
use nalgebra::{DMatrix, DVector};

use super::ln::{NormArgs, optional_list};
use super::quantity::RateArg;
use super::{EvalOutput, EvalResult, Values, monte_carlo};
use crate::claims::SamplerKind;
use crate::claims::fn_claim::sample_means;
use crate::claims::linear_path::sample_path;
use crate::engine::Budget;
use crate::error::{Error, check_len};
use crate::eval::input::read_list;
use crate::exact::MAX_ENUMERATION_D;
use crate::exact::linear_path::path_expectation;
use crate::formulas::linear_path::{self as f, Path, Source};
use crate::formulas::mean_and_variance;
use crate::ops::{AnyNorm, LayerNorm, Rate, RmsNorm, Subject};

/// The one-line help of `eval linear_path`.
pub const ABOUT: &str =
    "Dropout -> Linear -> (+h) -> LayerNorm/RMSNorm: E[V] (E[R^2]), c, E[LN(y)] (E[RMSNorm(y)]).";

/// Arguments of `eval linear_path`.
#[derive(Debug, Clone, Args)]
pub struct LinearPathArgs {
    /// The dropout's input u (m entries), comma-separated (or @FILE).
    #[arg(long, allow_hyphen_values = true)]
    pub u: String,
    #[command(flatten)]
    pub p: RateArg,
    /// The Linear's weight W (d × m), row-major: d·m numbers (or @FILE).
    #[arg(long, allow_hyphen_values = true)]
    pub w: String,
    /// The Linear's bias b, d entries (default 0).
    #[arg(long, allow_hyphen_values = true)]
    pub b: Option<String>,
    /// The added term h (a residual), d entries (default 0).
    #[arg(long, allow_hyphen_values = true)]
    pub h: Option<String>,
    /// Normalize with RMSNorm instead of LayerNorm (then no --beta).
    #[arg(long)]
    pub rms: bool,
    #[command(flatten)]
    pub norm: NormArgs,
}

super::quantity::eval_quantity!("linear_path");

/// `eval linear_path` from its arguments (read in flag order).
pub fn run(a: LinearPathArgs, budget: Budget) -> Result<EvalOutput, Error> {
    let (u, p) = (read_list("--u", &a.u)?, a.p.value()?);
    let w = read_list("--w", &a.w)?;
    let b = optional_list("--b", &a.b)?;
    let h = optional_list("--h", &a.h)?;
    let params = a.norm.params()?;
    if w.is_empty() || w.len() % u.len() != 0 {
        return Err(Error::InvalidOption {
            what: format!(
                "--w holds {} numbers, not d × m with m = {} (the length of --u)",
                w.len(),
                u.len()
            ),
        });
    }
    let d = w.len() / u.len();
    let norm = if a.rms {
        if params.beta.is_some() {
            return Err(Error::InvalidOption {
                what: "--beta with --rms: RMSNorm has no shift".into(),
            });
        }
        AnyNorm::Rms(RmsNorm::with_defaults(d, params.gamma, params.eps)?)
    } else {
        AnyNorm::Layer(LayerNorm::with_defaults(
            d,
            params.gamma,
            params.beta,
            params.eps,
        )?)
    };
    let path = path(&u, p, DMatrix::from_row_slice(d, u.len(), &w), b, h)?;
    linear_path(&path, &norm, budget)
}

/// The path `u → dropout(p) → Linear(w, b) → + h`, checked.
pub fn path(
    u: &[f64],
    p: f64,
    w: DMatrix<f64>,
    b: Option<Vec<f64>>,
    h: Option<Vec<f64>>,
) -> Result<Path, Error> {
    crate::error::check_finite_vec("u", u)?;
    crate::error::check_finite_vec("w", w.as_slice())?;
    let d = w.nrows();
    let vector = |name: &'static str, v: Option<Vec<f64>>| -> Result<DVector<f64>, Error> {
        let v = v.unwrap_or_else(|| vec![0.0; d]);
        crate::error::check_finite_vec(name, &v)?;
        check_len(name, &v, d)?;
        Ok(DVector::from_vec(v))
    };
    let (b, h) = (vector("b", b)?, vector("h", h)?);
    let source = Source::Dropped {
        u: u.to_vec(),
        rate: Rate::new(p)?,
    };
    let path = Path::linear_then_add(source, w, b, h);
    path.validate()?;
    Ok(path)
}

/// The names of the three quantities `eval linear_path` reports through a
/// LayerNorm: the spread `E[V]`, the factor `c`, the output.
const LAYER_NAMES: [&str; 3] = ["E[V]", "c", "E[LN(y)]"];
/// The same through an RMSNorm: `E[R²]`, `c_rms`, the output.
const RMS_NAMES: [&str; 3] = ["E[R^2]", "c_rms", "E[RMSNorm(y)]"];

/// `eval linear_path` on a checked path through `norm`.
pub fn linear_path(path: &Path, norm: &AnyNorm, budget: Budget) -> Result<EvalOutput, Error> {
    let mc = monte_carlo(budget)?;
    let m = path.moments()?;
    let d = m.dim();
    if norm.dim() != d {
        return Err(Error::LengthMismatch {
            what: "norm gains (one per output of W)",
            expected: d,
            got: norm.dim(),
        });
    }
    let Source::Dropped { u, rate } = &path.source else {
        return Err(Error::InvalidOption {
            what: "eval linear_path takes a dropped vector, not attention".into(),
        });
    };
    let layer = matches!(norm, AnyNorm::Layer(_));
    // The per-mask statistic: the spread (V or R²), then the norm's output.
    let statistic = |y: &DVector<f64>, out: &mut [f64]| -> Result<(), Error> {
        let (mu, s2) = mean_and_variance(y.as_slice());
        out[0] = if layer { s2 } else { s2 + mu * mu };
        norm.forward(y.as_slice(), &mut out[1..])
    };
    let exact = if u.len() <= MAX_ENUMERATION_D {
        let mut failed = None;
        let oracle = path_expectation(path, d + 1, |y, _, out| {
            if let Err(e) = statistic(y, out) {
                failed = Some(e);
            }
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
        Some(oracle.values)
    } else {
        None
    };
    let est = mc
        .map(|b| {
            sample_means(&Subject::reference(), b, d + 1, |s, rng, out| {
                statistic(&sample_path(path, s, rng)?, out)
            })
        })
        .transpose()?;
    let mut eval = vec![0.0; d];
    norm.forward(m.mean.as_slice(), &mut eval)?;
    let ([spread_name, factor, output], spread, corrected, c) = match norm {
        AnyNorm::Layer(ln) => (
            LAYER_NAMES,
            f::mean_of_v(&m),
            f::ln_corrected(&m, ln)?,
            f::ln_factor(&m, ln.eps())?,
        ),
        AnyNorm::Rms(rms) => (
            RMS_NAMES,
            f::mean_of_r2(&m),
            f::rms_corrected(&m, rms)?,
            f::rms_factor(&m, rms.eps())?,
        ),
    };
    let results = vec![
        EvalResult::exact(
            spread_name,
            Values::Scalar(spread),
            exact.as_ref().map(|e| vec![e[0]]),
        )
        .with_optional_estimates(est.as_ref().map(|e| &e[..1]), SamplerKind::Generic),
        EvalResult::leading(factor, Values::Scalar(c), None).with_uncorrected(vec![1.0]),
        EvalResult::leading(
            output,
            Values::PerUnit(corrected),
            exact.as_ref().map(|e| e[1..].to_vec()),
        )
        .with_optional_estimates(est.as_ref().map(|e| &e[1..]), SamplerKind::Generic)
        .with_uncorrected(eval),
    ];
    EvalOutput::new("linear_path", rate.p(), d, budget, results)
        .with_eps(norm.eps())
        .checked()
}
