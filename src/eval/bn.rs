//! `eval bn`: from a trained BatchNorm's buffers, the shrinkage `c` per
//! channel and the folded `running_var` (the zero-cost fix), beside a Monte
//! Carlo check.
//!
//! The closed forms use the buffers alone
//! ([`crate::formulas::batchnorm`]): `c_k = sqrt(q − p rm_k²/rv_k)` and
//! `rv_k ← q rv_k − p rm_k²`, each channel judged on its own: a channel whose
//! fold is `≤ 0` (which finite-batch noise in the buffers can cause, see
//! [`f::NoFold`]) gets a status naming it and the reason instead of a value,
//! and the others are evaluated as usual. Both are exact at the stationary buffers
//! (algebraic functions of the input), so `exact` is the closed form itself. The Monte Carlo column checks that the buffers
//! are reproduced by the population they imply: it draws clean inputs
//! `x_k ~ N(rm_k, σ_k²)` with `σ_k² = q rv_k − p rm_k²`, drops them out at
//! rate `p`, estimates `Var z_k` (which must be `rv_k`), and reports
//! `c_k = sqrt(σ_k² / Var̂ z_k)` (delta-method SE `c/2 · SE(Var̂)/Var̂`) and
//! the fold `q Var̂ z_k − p rm_k²` (SE `q · SE(Var̂)`).
//!
//! The Monte Carlo column stays on the generic sampler (`"sampler":
//! "generic"`): every draw is a fresh Gaussian example, so `z` is not a
//! masked sum of a fixed vector and each element needs its own normal draw
//! whatever makes the mask (see [`crate::claims::batchnorm`]).

use rand_distr::{Distribution, StandardNormal};

use clap::Args;

use super::{ChannelStatus, ChannelVerdict, EvalOutput, EvalResult, Values, monte_carlo};
use crate::claims::SamplerKind;
use crate::engine::{Budget, Sampler, Stream, estimate};
use crate::error::{Error, check_len};
use crate::eval::input::{read_list, read_number};
use crate::formulas::batchnorm as f;
use crate::ops::{Rate, Subject, TrainPass};
use crate::stats::Estimate;

struct BufferSampler<'a> {
    subject: &'a Subject<'a>,
    mean: &'a [f64],
    sd: Vec<f64>,
    p: f64,
}

impl Sampler for BufferSampler<'_> {
    type Scratch = (Vec<f64>, Vec<f64>, Vec<f64>, Vec<bool>);
    fn dim(&self) -> usize {
        self.mean.len()
    }
    fn scratch(&self) -> Self::Scratch {
        let k = self.mean.len();
        (vec![0.0; k], vec![0.0; k], vec![0.0; k], vec![false; k])
    }
    fn draw(&self, rng: &mut Stream, s: &mut Self::Scratch, out: &mut [f64]) -> Result<(), Error> {
        let (x, z, z_alt, mask) = s;
        for round in 0..2 {
            for ((v, m), sd) in x.iter_mut().zip(self.mean).zip(&self.sd) {
                let n: f64 = StandardNormal.sample(rng);
                *v = m + sd * n;
            }
            let target = if round == 0 { &mut *z } else { &mut *z_alt };
            self.subject
                .dropout
                .forward_train(TrainPass::new(x, target, mask), self.p, rng)?;
        }
        for ((o, a), b) in out.iter_mut().zip(z.iter()).zip(z_alt.iter()) {
            *o = 0.5 * (a - b) * (a - b);
        }
        Ok(())
    }
}

/// Evaluates `c` and the fold for buffers `running_mean`, `running_var` at
/// drop rate `p`, each channel on its own: a channel without a fold
/// ([`f::NoFold`]) is reported in the output's `channels` and left out of
/// the results (whose `units` name the channels they hold); bad input
/// (non-finite, `running_var ≤ 0`, mismatched lengths, `p` outside `[0, 1)`)
/// is an error.
pub fn bn(
    running_mean: &[f64],
    running_var: &[f64],
    p: f64,
    budget: Budget,
) -> Result<EvalOutput, Error> {
    let rate = Rate::new(p)?;
    check_len("running_var", running_var, running_mean.len())?;
    let mc = monte_carlo(budget)?;
    let judged = f::fold_channels(running_mean, running_var, rate)?;
    let channels: Vec<ChannelStatus> = judged
        .iter()
        .enumerate()
        .map(|(channel, j)| ChannelStatus {
            channel,
            status: match j {
                Ok(_) => ChannelVerdict::Folded,
                Err(_) => ChannelVerdict::NoFold,
            },
            reason: j.as_ref().err().map(f::NoFold::to_string),
        })
        .collect();
    let units: Vec<usize> = judged
        .iter()
        .enumerate()
        .filter_map(|(k, j)| j.is_ok().then_some(k))
        .collect();
    let folded: Vec<f64> = judged
        .iter()
        .filter_map(|j| j.as_ref().ok().copied())
        .collect();
    let running_mean: Vec<f64> = units.iter().map(|&k| running_mean[k]).collect();
    let c: Vec<f64> = units
        .iter()
        .zip(&running_mean)
        .map(|(&k, &rm)| f::c_squared_from_buffers(rm, running_var[k], rate).sqrt())
        .collect();
    // No channel to sample: closed forms only.
    let mc = mc.filter(|_| !units.is_empty());
    let running_mean = running_mean.as_slice();
    let subject = Subject::reference();
    let sampler = BufferSampler {
        subject: &subject,
        mean: running_mean,
        sd: folded.iter().map(|s| s.sqrt()).collect(),
        p,
    };
    let var = mc
        .map(|b| estimate(&sampler, b).map(|a| a.estimates()))
        .transpose()?;
    let c_mc: Option<Vec<Estimate>> = var.as_ref().map(|var| {
        var.iter()
            .zip(&folded)
            .map(|(v, s2)| {
                let value = (s2 / v.value).sqrt();
                Estimate {
                    value,
                    stderr: 0.5 * value * v.stderr / v.value,
                    n: v.n,
                    dof: v.dof,
                }
            })
            .collect()
    });
    let fold_mc: Option<Vec<Estimate>> = var.as_ref().map(|var| {
        var.iter()
            .zip(running_mean)
            .map(|(v, rm)| Estimate {
                value: rate.q() * v.value - rate.p() * rm * rm,
                stderr: rate.q() * v.stderr,
                n: v.n,
                dof: v.dof,
            })
            .collect()
    });
    // A subnormal running_var can make the sampled variance 0 (c = s²/0).
    let results = vec![
        EvalResult::exact("c", Values::PerUnit(c), None)
            .with_optional_estimates(c_mc.as_deref(), SamplerKind::Generic)
            .for_units(units.clone()),
        EvalResult::exact("folded_running_var", Values::PerUnit(folded), None)
            .with_optional_estimates(fold_mc.as_deref(), SamplerKind::Generic)
            .for_units(units),
    ];
    let budget = if mc.is_some() {
        budget
    } else {
        Budget {
            samples: 0,
            ..budget
        }
    };
    EvalOutput::new("bn", p, running_var.len(), budget, results)
        .with_channels(channels)
        .checked()
}

/// The one-line help of `eval bn`.
pub const ABOUT: &str = "From trained BatchNorm buffers: c per channel and the folded running_var.";

/// Arguments of `eval bn`.
#[derive(Debug, Clone, Args)]
pub struct BnArgs {
    /// running_mean buffer, comma-separated (or @FILE).
    #[arg(long, allow_hyphen_values = true)]
    pub running_mean: String,
    /// running_var buffer, comma-separated (or @FILE).
    #[arg(long, allow_hyphen_values = true)]
    pub running_var: String,
    /// Drop rate of the dropout in front of the BatchNorm, 0 <= p < 1.
    #[arg(long, allow_hyphen_values = true)]
    pub p: String,
}

super::quantity::eval_quantity!("bn");

/// `eval bn` from its arguments.
pub fn run(a: BnArgs, budget: Budget) -> Result<EvalOutput, Error> {
    let running_mean = read_list("--running-mean", &a.running_mean)?;
    let running_var = read_list("--running-var", &a.running_var)?;
    bn(
        &running_mean,
        &running_var,
        read_number("--p", &a.p)?,
        budget,
    )
}
