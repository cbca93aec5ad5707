//! The conformance kit on a layer written outside the crate (the same one as
//! `examples/conformance.rs`, without the bug switch): it passes the
//! claims of every family that needs only a dropout layer (semantics,
//! attention, mask-shape, ensemble, and any added since) at their default
//! budgets. Counted in `tests/zz_budget.rs`; the dropout family
//! is run on the reference by `tests/report_snapshot.rs`.

mod common;

use dropmc::Error;
use dropmc::conformance::{self, Options};
use dropmc::ops::{BackwardPass, DropoutLayer, EvalPass, TrainPass};
use rand::{Rng, RngExt};
use std::sync::LazyLock;

/// The families this test runs: every family of the registry whose claims
/// need only a dropout layer (`CrateFamily::dropout_alone`), but the dropout
/// family's own (run on the reference by `tests/report_snapshot.rs`). Read
/// from the registry, so a family added by docs/architecture.md's steps is
/// run here with no edit.
fn families() -> &'static [&'static str] {
    static FAMILIES: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
        dropmc::claims::families()
            .into_iter()
            .filter(|f| f.dropout_alone && f.name != "dropout")
            .map(|f| f.name)
            .collect()
    });
    &FAMILIES
}

struct Outside;

fn keep_probability(p: f64) -> Result<f64, Error> {
    if (0.0..1.0).contains(&p) {
        Ok(1.0 - p)
    } else {
        Err(Error::InvalidRate { p })
    }
}

impl DropoutLayer for Outside {
    fn name(&self) -> &str {
        "outside"
    }
    fn forward_train(&self, pass: TrainPass<'_>, p: f64, rng: &mut dyn Rng) -> Result<(), Error> {
        let TrainPass { x, out, mask } = pass;
        let q = keep_probability(p)?;
        for ((o, m), v) in out.iter_mut().zip(mask.iter_mut()).zip(x) {
            *m = rng.random::<f64>() >= p;
            *o = if *m { v / q } else { 0.0 };
        }
        Ok(())
    }
    fn forward_eval(&self, pass: EvalPass<'_>, p: f64, _: &mut dyn Rng) -> Result<(), Error> {
        let EvalPass { x, out } = pass;
        keep_probability(p)?;
        out.copy_from_slice(x);
        Ok(())
    }
    fn backward(&self, pass: BackwardPass<'_>, p: f64) -> Result<(), Error> {
        let BackwardPass {
            grad_out: g,
            mask,
            grad_in: gi,
        } = pass;
        let q = keep_probability(p)?;
        for ((o, m), v) in gi.iter_mut().zip(mask).zip(g) {
            *o = if *m { v / q } else { 0.0 };
        }
        Ok(())
    }
}

#[test]
fn a_layer_written_outside_the_crate_passes_conformance() {
    let options = Options {
        families: Some(families()),
        ..Options::default()
    };
    let result = conformance::run(&Outside, &options).expect("runs");
    assert_eq!(result.subject, "outside");
    assert_eq!(result.verdicts.len(), conformance::claims(&options).len());
    assert!(result.verdicts.len() >= 20);
    for v in &result.verdicts {
        common::assert_pass(&v.result);
    }
    assert!(result.passed());
}

#[test]
fn the_default_selection_is_the_dropout_level_families() {
    // The families whose claims need nothing but a dropout layer, as the
    // registry declares them (`CrateFamily::dropout_alone`): a family added
    // by docs/architecture.md's steps needs no edit here.
    let dropout_level: Vec<&str> = dropmc::claims::families()
        .into_iter()
        .filter(|f| f.dropout_alone)
        .map(|f| f.name)
        .collect();
    for family in [
        "dropout",
        "semantics",
        "attention",
        "mask_shape",
        "ensemble",
    ] {
        assert!(dropout_level.contains(&family), "{family}");
    }
    let claims = conformance::claims(&Options::default());
    for family in &dropout_level {
        assert!(claims.iter().any(|c| c.family() == *family), "{family}");
    }
    assert!(claims.iter().all(|c| dropout_level.contains(&c.family())));
}
