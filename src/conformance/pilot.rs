//! How long a run of claims will take, estimated before it starts: each
//! claim's sampler timed on a small pilot budget, the time scaled to the
//! run's draws. `dropmc report` refuses a run estimated beyond
//! [`MAX_RUN_SECONDS`] up front, naming `--samples` and the estimate.
//!
//! # The estimate, step by step
//!
//! 1. A claim's run is a fixed part (its closed form, its oracle, the
//!    sampler's setup) and a part linear in its draws `n`: `T(n) = a + b n`.
//!    The draws dominate a long run, so only `b` matters there.
//! 2. The pilot times the claim's sampler alone
//!    ([`crate::claims::sample`], what the run calls) at `n₁ =`
//!    [`PILOT_DRAWS`] draws (or `n` when smaller): `t₁ = a′ + b n₁`, `a′`
//!    the sampler's setup.
//! 3. `t₁ n / n₁` over-states `T(n)` (it counts the setup `n/n₁` times).
//!    When it is below [`SHORT_SECONDS`] the claim is short whatever the
//!    split, and that is its estimate.
//! 4. Otherwise the pilot grows (`n ← n · min(64, ⌈PILOT_SECONDS / t⌉)`,
//!    at least doubling) until it takes [`PILOT_SECONDS`] or reaches `n`,
//!    and the last two pilots give the slope `b`, the fixed part
//!    cancelling ([`extrapolated_seconds`]): an exact truth whose cost no
//!    draw count changes is not extrapolated as if it were draws.
//!
//! The pilot's draws are discarded: the run itself reads its own streams
//! from the start, so the estimate changes no bit of any result.

use std::time::Instant;

use crate::claims::{Claim, sample};
use crate::engine::{Budget, derive_seed};
use crate::ops::Subject;

/// The longest run accepted without a time budget: one hour.
pub const MAX_RUN_SECONDS: f64 = 3600.0;
/// Draws of a claim's first pilot (step 2).
pub const PILOT_DRAWS: u64 = 1024;
/// A claim whose crude estimate is below this is not piloted further
/// (step 3): 57 such claims add under a minute to an hour's limit.
pub const SHORT_SECONDS: f64 = 1.0;
/// What the grown pilot aims to take per claim (step 4).
pub const PILOT_SECONDS: f64 = 0.05;

/// The estimated time of a run ([`estimate_seconds`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunEstimate {
    /// Seconds, summed over the claims piloted.
    pub seconds: f64,
    /// True when the piloting stopped early, past `stop_above`: the run
    /// takes at least `seconds`.
    pub partial: bool,
}

impl RunEstimate {
    /// "about 5 min", or "at least 3 h" for a partial estimate.
    pub fn words(&self) -> String {
        let qualifier = if self.partial { "at least" } else { "about" };
        format!("{qualifier} {}", duration_words(self.seconds))
    }
}

/// The estimated seconds of running `claims` on `subject` at `samples`
/// draws each, under the run seed `seed` (module docs); the piloting stops
/// once the sum passes `stop_above` (a run to be refused needs no more). A
/// claim whose pilot fails adds nothing: the run reports its error itself.
pub fn estimate_seconds(
    claims: &[&dyn Claim],
    subject: &Subject,
    seed: u64,
    samples: u64,
    stop_above: f64,
) -> RunEstimate {
    let mut seconds = 0.0;
    for claim in claims {
        if seconds > stop_above {
            return RunEstimate {
                seconds,
                partial: true,
            };
        }
        seconds += claim_seconds(*claim, subject, derive_seed(seed, claim.id()), samples);
    }
    RunEstimate {
        seconds,
        partial: false,
    }
}

/// One claim's estimate (module docs, steps 2–4); 0 when its pilot fails.
fn claim_seconds(claim: &dyn Claim, subject: &Subject, seed: u64, samples: u64) -> f64 {
    let run = |n: u64| -> Result<(), crate::error::Error> {
        sample(claim, subject, Budget::new(n, seed)?).map(drop)
    };
    extrapolated_seconds(run, PILOT_DRAWS, samples).unwrap_or(0.0)
}

/// The seconds of `run(samples)`, from pilots of `run` (module docs,
/// steps 2–4): the first at `first` draws (or `samples` when smaller),
/// grown until one takes [`PILOT_SECONDS`] or reaches `samples`. A run of
/// `n` costs `a + b n`; the last two pilots `(n₁, t₁)`, `(n₂, t₂)` give
/// `b = (t₂ − t₁)/(n₂ − n₁)` (at least 0: timer noise), the fixed part
/// cancelling (an exact enumeration that no draw count changes), and the
/// estimate is `t₂ + b (samples − n₂)`. After one pilot the estimate is the
/// crude `t n / n₁` of step 3. A pilot that fails gives `Err`: the run would
/// fail the same way and says why itself.
pub fn extrapolated_seconds<E>(
    mut run: impl FnMut(u64) -> Result<(), E>,
    first: u64,
    samples: u64,
) -> Result<f64, E> {
    let mut timed = |n: u64| -> Result<f64, E> {
        let start = Instant::now();
        run(n)?;
        Ok(start.elapsed().as_secs_f64())
    };
    let mut n = first.min(samples).max(2);
    let mut t = timed(n)?;
    let crude = t * samples as f64 / n as f64;
    if crude < SHORT_SECONDS || n >= samples {
        return Ok(crude);
    }
    let mut previous = None;
    while t < PILOT_SECONDS && n < samples {
        previous = Some((n, t));
        let factor = (PILOT_SECONDS / t.max(1e-9)).ceil().clamp(2.0, 64.0) as u64;
        n = n.saturating_mul(factor).min(samples);
        t = timed(n)?;
    }
    let per_draw = match previous {
        Some((n1, t1)) => ((t - t1) / (n - n1) as f64).max(0.0),
        None => t / n as f64,
    };
    Ok(t + per_draw * samples.saturating_sub(n) as f64)
}

/// A duration in words: seconds below two minutes, minutes below two
/// hours, hours below two days, days beyond.
pub fn duration_words(seconds: f64) -> String {
    let (value, unit) = if seconds < 120.0 {
        (seconds, "s")
    } else if seconds < 7200.0 {
        (seconds / 60.0, "min")
    } else if seconds < 172_800.0 {
        (seconds / 3600.0, "h")
    } else {
        (seconds / 86_400.0, "days")
    };
    format!("{value:.0} {unit}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claims::registry;

    #[test]
    fn durations_read_in_the_unit_that_fits() {
        assert_eq!(duration_words(5.2), "5 s");
        assert_eq!(duration_words(600.0), "10 min");
        assert_eq!(duration_words(3.0 * 3600.0), "3 h");
        assert_eq!(duration_words(30.0 * 86_400.0), "30 days");
    }

    #[test]
    fn the_estimate_grows_with_the_draws() {
        let claims: Vec<&dyn Claim> = registry()
            .into_iter()
            .filter(|c| c.id() == "dropout.mean")
            .collect();
        let subject = Subject::reference();
        let small = estimate_seconds(&claims, &subject, 1, 1_000, MAX_RUN_SECONDS);
        let huge = estimate_seconds(&claims, &subject, 1, 1_000_000_000_000_000, MAX_RUN_SECONDS);
        // 10^15 draws take far more than an hour on any sampler (the fast
        // path's dropout.mean, 4.4·10^8 draws/s on the idle 2-core machine,
        // would take 26 days; 10^12 took 38 min there and failed this
        // test); a thousand far less than a second.
        assert!(small.seconds < 1.0 && !small.partial, "{small:?}");
        assert!(huge.seconds > MAX_RUN_SECONDS, "{huge:?}");
        assert!(huge.words().starts_with("about"), "{huge:?}");
    }
}
