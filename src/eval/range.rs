//! When an `eval` result is outside its formula's useful range: the
//! `warning` line of each result, from three checks on this input.
//!
//! # 1. Few kept units (`p` close to 1, or small `d`)
//!
//! The leading-order forms expand in `1/d`, but what the expansion really
//! counts is the kept units: with `K ~ Binomial(d, q)` kept, every neglected
//! term carries a power of `Var K / E[K]² = p/(q d)` (for example
//! `Var M / mean x² = p/(q d)` exactly, and `Var V / E[V]² → 1/(q d)` as
//! `p → 1`). When the relative spread of the kept count,
//! `sqrt(p/(q d))`, exceeds [`KEPT_COUNT_SPREAD_LIMIT`] = 1/2 (a typical mask
//! keeps half again or half as many units as on average), the neglected
//! terms are of the size of the correction and the leading order is not a
//! usable estimate. The limit is `q d > 4 p`, that is `d > 4p/q`.
//!
//! # 2. Second order that barely helps (small `d`)
//!
//! The second order's neglected term is `O(1/d²)`, but its constant is not
//! small: on the claims' inputs the second order is 2–4 times closer to
//! the truth than the first at `d = 16` and about 1000 times at `d = 4096`
//! (`tests/second_order.rs`), so below `d ≈ 16` it may remove little of the
//! first order's error. Where the truth is known on this input (the exact
//! value, or a Monte Carlo estimate that resolves the first order's error,
//! `‖f − mc‖ > z_crit ‖SE‖`), the check measures it: a second order that
//! removes less than [`SECOND_ORDER_MIN_GAIN`] = half of the first order's
//! error (`‖s − t‖ > ‖f − t‖ / 2`) is flagged as barely better.
//!
//! # 3. A correction that makes this input worse
//!
//! Against the exact value (or, without one, the Monte Carlo estimate), a
//! corrected value farther off than the value it replaces (`u` for the
//! first order, `f` for the second) is flagged. Against Monte Carlo the
//! difference of the two distances must exceed the estimate's noise,
//! `z_crit ‖SE‖` at the suite's level ([`crate::stats::critical_z`]); against
//! an exact value, the enumeration's own rounding bound and that of the
//! distances ([`crate::stats::tolerance::distance_order_slack`]).

use super::{EvalOutput, EvalResult, FormulaKind, Values};
use crate::exact::CLOSED_FORM_ROUNDINGS;
use crate::stats::tolerance;

/// The largest relative spread `sqrt(p/(q d))` of the kept count at which
/// a leading-order value is shown without a warning (module docs, 1).
pub const KEPT_COUNT_SPREAD_LIMIT: f64 = 0.5;

/// The share of the first order's error the second order must remove to be
/// shown without a warning (module docs, 2).
pub const SECOND_ORDER_MIN_GAIN: f64 = 0.5;

/// Adds the warnings of the three checks to the results of `output`.
pub fn annotate(output: &mut EvalOutput) {
    let (p, d) = (output.p, output.d);
    for r in &mut output.results {
        if r.kind != FormulaKind::LeadingOrder {
            continue;
        }
        if let Some(w) = few_kept_units(p, d) {
            r.add_warning(w);
        }
        if let Some(w) = second_order_barely_helps(r, d) {
            r.add_warning(w);
        }
        for w in corrections_that_hurt(r) {
            r.add_warning(w);
        }
    }
}

/// Check 1: `sqrt(p/(q d)) > 1/2`.
pub fn few_kept_units(p: f64, d: usize) -> Option<String> {
    let q = 1.0 - p;
    let spread = (p / (q * d as f64)).sqrt();
    (spread > KEPT_COUNT_SPREAD_LIMIT).then(|| {
        format!(
            "leading order in 1/(qd) breaks down: q d = {} units are kept on average and the \
             kept count's relative spread sqrt(p/(qd)) = {} exceeds {KEPT_COUNT_SPREAD_LIMIT}, so \
             the neglected terms (relative size about p/(qd)) are as large as the correction \
             (needs d > 4p/q = {}); read the exact or Monte Carlo value",
            short(q * d as f64),
            short(spread),
            short(4.0 * p / q),
        )
    })
}

fn distance(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y) * (x - y))
        .sum::<f64>()
        .sqrt()
}

fn norm(a: &[f64]) -> f64 {
    a.iter().map(|x| x * x).sum::<f64>().sqrt()
}

/// What separates two distances to a truth (module docs, 3).
#[derive(Debug, Clone, Copy)]
enum Slack {
    /// An exact truth whose per-entry rounding bounds have this norm.
    Rounding { norm: f64, d: usize },
    /// A Monte Carlo truth: `z_crit ‖SE‖`.
    Noise(f64),
}

impl Slack {
    /// The margin by which `gap_a` must exceed `gap_b` to be larger.
    fn between(self, gap_a: f64, gap_b: f64) -> f64 {
        match self {
            Slack::Rounding { norm, d } => tolerance::distance_order_slack(norm, gap_a, gap_b, d),
            Slack::Noise(s) => s,
        }
    }
}

/// The truth a result is judged against, what it is, and the slack of a
/// comparison of distances to it (module docs, 3). An exact value without
/// a rounding bound (none of the enumerated leading-order results) is
/// charged the bound of a closed form, [`CLOSED_FORM_ROUNDINGS`] per entry.
fn truth(r: &EvalResult) -> Option<(&[f64], &'static str, Slack)> {
    match (&r.exact, &r.mc, &r.stderr) {
        (Some(e), _, _) => {
            let e = e.as_slice();
            let norm = match &r.exact_rounding {
                Some(rounding) => norm(rounding),
                None => tolerance::bound(CLOSED_FORM_ROUNDINGS, norm(e)),
            };
            Some((e, "exact", Slack::Rounding { norm, d: e.len() }))
        }
        (None, Some(m), Some(se)) => Some((
            m.as_slice(),
            "Monte Carlo",
            Slack::Noise(crate::stats::critical_z() * norm(se.as_slice())),
        )),
        _ => None,
    }
}

/// Check 2: the second order removes less than half the first order's
/// error, on a truth that resolves that error.
fn second_order_barely_helps(r: &EvalResult, d: usize) -> Option<String> {
    let s = r.second_order.as_ref()?;
    let (t, basis, slack) = truth(r)?;
    let gap_f = distance(r.formula.as_slice(), t);
    let gap_s = distance(s.as_slice(), t);
    let resolved = gap_f > slack.between(gap_f, 0.0);
    (resolved
        && gap_s <= gap_f + slack.between(gap_s, gap_f)
        && gap_s > SECOND_ORDER_MIN_GAIN * gap_f)
        .then(|| {
            format!(
                "second order at d = {d} barely helps: against the {basis} value it removes only \
             {:.0}% of the first order's error ({} -> {}); its O(1/d^2) remainder has a large \
             constant at small d (it gains a factor 2-4 only at d = 16)",
                100.0 * (1.0 - gap_s / gap_f),
                short(gap_f),
                short(gap_s),
            )
        })
}

/// Check 3: a correction farther from the truth than what it replaces.
fn corrections_that_hurt(r: &EvalResult) -> Vec<String> {
    let mut out = Vec::new();
    let Some((truth, basis, slack)) = truth(r) else {
        return out;
    };
    let f = r.formula.as_slice();
    let gap_f = distance(f, truth);
    let mut check = |better: &Values, worse_name: &str, better_name: &str, gap: f64| {
        let gap_b = distance(better.as_slice(), truth);
        if gap > gap_b + slack.between(gap, gap_b) {
            out.push(format!(
                "on this input the {worse_name} value is farther from the {basis} value ({}) \
                 than the {better_name} value ({})",
                short(gap),
                short(gap_b)
            ));
        }
    };
    if let Some(u) = &r.uncorrected {
        check(u, "corrected", "uncorrected", gap_f);
    }
    if let Some(s) = &r.second_order {
        let gap_s = distance(s.as_slice(), truth);
        check(&r.formula, "second-order", "first-order", gap_s);
    }
    out
}

/// Three significant digits.
fn short(v: f64) -> String {
    if v != 0.0 && !(1e-3..1e6).contains(&v.abs()) {
        format!("{v:.2e}")
    } else {
        let decimals = (2 - v.abs().log10().floor() as i32).clamp(0, 6) as usize;
        format!("{v:.decimals$}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(formula: Vec<f64>, exact: Vec<f64>, rounding: f64) -> EvalResult {
        let d = exact.len();
        let mut r = EvalResult::leading("E[LN(z)]", Values::PerUnit(formula), Some(exact))
            .with_uncorrected(vec![0.0; d]);
        r.exact_rounding = Some(vec![rounding; d]);
        r
    }

    #[test]
    fn a_correction_farther_from_the_exact_value_is_flagged() {
        // Exact (1, 1); the uncorrected (0, 0) is √2 off, the "correction"
        // (3, 3) is 2√2 off: it hurts, far beyond any rounding.
        let r = result(vec![3.0, 3.0], vec![1.0, 1.0], 1e-15);
        let w = corrections_that_hurt(&r);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("farther from the exact value"), "{w:?}");
    }

    #[test]
    fn distances_within_the_enumerations_rounding_are_not_ordered() {
        // The correction is 0.05 farther than the uncorrected value, but the
        // exact value's rounding bound (0.1 per entry) could account for it.
        let r = result(vec![2.05, 0.0], vec![1.0, 0.0], 0.1);
        assert!(corrections_that_hurt(&r).is_empty());
        // With a rounding bound of one ulp the same 0.05 is ordered.
        let r = result(vec![2.05, 0.0], vec![1.0, 0.0], f64::EPSILON);
        assert_eq!(corrections_that_hurt(&r).len(), 1);
    }
}
