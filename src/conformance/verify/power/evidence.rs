//! From the journal's runs to a candidate's row: each component's
//! evidence over the seeds (finite z's averaged, infinite ones counted as
//! certain detections) and the power it supports (module docs of
//! [`super`]).

use super::interval::clopper_pearson_lower;
use super::{Candidate, INTERVAL_LEVEL, PowerRow, RunRecord, SeedRate};
use crate::claims::Claim;
use crate::stats::{critical_z, rejection_probability};

/// One component's evidence over the seeds: its finite z's, summed, and
/// the seeds where its z was infinite (module docs).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ComponentEvidence {
    finite_sum: f64,
    finite: u64,
    certain: u64,
}

impl ComponentEvidence {
    pub(super) fn add(&mut self, z: Option<f64>) {
        match z {
            Some(z) => {
                self.finite_sum += z;
                self.finite += 1;
            }
            None => self.certain += 1,
        }
    }

    /// The probability that this component misses under one seed: the
    /// point estimate `(1 − c/K)(1 − π(δ̄))`, or with `scale` the
    /// conservative one at the default budget (lower bounds on the rate of
    /// certain detections and on `|δ|`, the latter scaled by `scale`).
    pub(super) fn miss(&self, scale: Option<f64>) -> f64 {
        let seeds = self.finite + self.certain;
        let certain = match scale {
            None => self.certain as f64 / seeds as f64,
            Some(_) => clopper_pearson_lower(self.certain, seeds, 1.0 - INTERVAL_LEVEL),
        };
        let finite_miss = if self.finite == 0 {
            // No finite z: the point estimate has certain = 1; the bound has
            // no evidence on the finite test and credits it nothing.
            1.0
        } else {
            let m = self.finite as f64;
            let mean = self.finite_sum / m;
            let delta = match scale {
                None => mean,
                // Lower confidence bound on |δ| at the per-assertion level
                // (the mean of m unit-variance z's has SD 1/√m), scaled.
                Some(s) => (mean.abs() - critical_z() / m.sqrt()).max(0.0) * s,
            };
            1.0 - rejection_probability(delta)
        };
        (1.0 - certain) * finite_miss
    }
}

/// One candidate's row from its runs (one per seed), ignoring the claims in
/// `unusable`.
pub(super) fn measure(
    candidate: &Candidate,
    claims: &[&'static dyn Claim],
    unusable: &[&'static str],
    runs: &[RunRecord],
) -> PowerRow {
    let mut detections = 0;
    let mut certain_seeds = 0;
    let mut killed: Vec<(String, u64)> = Vec::new();
    // Per (claim, component), and the draws' scale to the default budget.
    let mut evidence: Vec<Vec<ComponentEvidence>> = vec![Vec::new(); claims.len()];
    let mut scale: Vec<f64> = vec![1.0; claims.len()];
    let mut errored = false;
    for run in runs {
        let mut detected = false;
        let mut certain = false;
        for (c, r) in run.claims.iter().enumerate() {
            if unusable.contains(&r.id.as_str()) {
                continue;
            }
            errored |= r.errored;
            if evidence[c].is_empty() {
                evidence[c] = vec![ComponentEvidence::default(); r.z.len()];
            }
            scale[c] = (claims[c].default_samples() as f64 / r.samples.max(1) as f64)
                .sqrt()
                .max(1.0);
            for (e, z) in evidence[c].iter_mut().zip(&r.z) {
                e.add(*z);
                certain |= z.is_none();
            }
            if r.failed {
                detected = true;
                match killed.iter_mut().find(|(id, _)| *id == r.id) {
                    Some((_, n)) => *n += 1,
                    None => killed.push((r.id.clone(), 1)),
                }
            }
        }
        detections += u64::from(detected);
        certain_seeds += u64::from(certain);
    }
    let seeds = runs.len() as u64;
    let power_at = |scaled: bool| {
        if errored {
            return 1.0; // a claim that cannot even be evaluated fails under every seed
        }
        let miss: f64 = evidence
            .iter()
            .zip(&scale)
            .flat_map(|(components, &s)| {
                components.iter().map(move |e| e.miss(scaled.then_some(s)))
            })
            .product();
        1.0 - miss
    };
    PowerRow {
        subject: candidate.name.clone(),
        equivalent: candidate.equivalent.is_some(),
        seeds,
        detections,
        empirical: detections as f64 / seeds as f64,
        detected: SeedRate::new(detections, seeds),
        certain: SeedRate::new(certain_seeds, seeds),
        from_effect: power_at(false),
        at_default_budget: power_at(true),
        killed_by: killed,
    }
}
