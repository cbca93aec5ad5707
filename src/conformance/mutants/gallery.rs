//! The gallery as one table: every known-wrong dropout layer, what it gets
//! wrong, where the mistake is described, which claims must kill it, and
//! (for the two equivalent ones) why no claim can.
//!
//! A row is data: its layer is the reference with one [`Deviation`] patched
//! in ([`super::patch`]). Adding a mutant is adding a row (and, for a new
//! kind of mistake, a variant of [`Deviation`]).

use super::patch::{Deviant, Deviation, Keep, Scale};
use super::{Effect, Mutant};
use crate::ops::MaskShape;

/// One row of the table.
struct Row {
    /// The layer; its name is the mutant's id.
    layer: Deviant,
    mistake: &'static str,
    source: &'static str,
    /// The claims that name this mistake directly: each must kill it.
    must_kill: &'static [&'static str],
    equivalent: Option<&'static str>,
    effect: Option<Effect>,
}

/// A training and backward pass that keep by `keep` and scale a kept unit's
/// value by `survivor` and its gradient by `gradient`.
const fn scaling(keep: Keep, survivor: Scale, gradient: Scale) -> Deviation {
    Deviation::Scaling {
        keep,
        survivor,
        gradient,
    }
}

/// A non-equivalent row with no closed-form effect.
const fn row(
    name: &'static str,
    deviation: Deviation,
    mistake: &'static str,
    source: &'static str,
    must_kill: &'static [&'static str],
) -> Row {
    Row {
        layer: Deviant { name, deviation },
        mistake,
        source,
        must_kill,
        equivalent: None,
        effect: None,
    }
}

/// Where a mistake is described: a section of `docs/formulas.md`, a file
/// in this repository a reader can open (`tests/mutants.rs` checks that
/// each cited file and section exists).
const SCALING: &str = "docs/formulas.md §1.4 (survivors are x/q) and §1.1";
const KEEP_RULE: &str = "docs/formulas.md §1.3 (kept count)";
const SEMANTICS: &str = "docs/formulas.md §11 (train/eval semantics rules)";
const ATTENTION: &str = "docs/formulas.md §7 (attention dropout after softmax)";
const MASK_SHAPE: &str = "docs/formulas.md §8 (mask shape)";
const VARIANCE: &str = "docs/formulas.md §1.1 (Var z = x² p / q over independent masks)";

/// `P(column all zero)` over the `T` positions of the mask-shape claims:
/// `p` with a shared mask, `p^T` with independent ones.
fn zero_column_gap() -> f64 {
    use crate::claims::mask_shape::{P, T};
    P - P.powi(T as i32)
}

/// Every mutant, non-equivalent ones first.
static TABLE: [Row; 17] = [
    row(
        "divide_by_p",
        scaling(Keep::AtLeastP, Scale::DivideByP, Scale::DivideByP),
        "Divides survivors (and gradients) by the drop rate p instead of the keep probability q.",
        SCALING,
        &["semantics.survivors_exact"],
    ),
    row(
        "multiply_by_q",
        scaling(Keep::AtLeastP, Scale::MultiplyByQ, Scale::MultiplyByQ),
        "Multiplies survivors (and gradients) by q in training instead of dividing.",
        SCALING,
        &["semantics.survivors_exact"],
    ),
    row(
        "keep_below_p",
        scaling(Keep::BelowP, Scale::DivideByQ, Scale::DivideByQ),
        "Keeps a unit when u < p, the complement of the intended mask: keeps a fraction p.",
        KEEP_RULE,
        &["semantics.keep_fraction"],
    ),
    row(
        "eval_scales_by_q",
        Deviation::EvalScalesByQ,
        "Multiplies by q at evaluation after inverted training (mixes the two schemes).",
        SEMANTICS,
        &["semantics.eval_identity"],
    ),
    row(
        "eval_draws",
        Deviation::EvalDraws,
        "Draws the mask before the mode branch: evaluation returns x but consumes random numbers.",
        SEMANTICS,
        &["semantics.eval_identity"],
    ),
    row(
        "eval_masks",
        Deviation::EvalMasks,
        "Applies the training mask in evaluation mode too.",
        SEMANTICS,
        &["semantics.eval_identity"],
    ),
    row(
        "backward_fresh_mask",
        Deviation::BackwardFreshMask,
        "Backward pass draws a fresh mask instead of reusing the forward pass's.",
        SEMANTICS,
        &["semantics.backward_mask"],
    ),
    row(
        "backward_unscaled",
        scaling(Keep::AtLeastP, Scale::DivideByQ, Scale::Unscaled),
        "Backward pass applies the mask but forgets the 1/q scale.",
        SEMANTICS,
        &["semantics.backward_finite_difference"],
    ),
    row(
        "attention_renormalised",
        Deviation::AttentionRenormalised,
        "Renormalises the surviving attention weights so every row sums to one.",
        ATTENTION,
        &["attention.entry_mean"],
    ),
    row(
        "attention_logits",
        Deviation::AttentionLogits,
        "Drops the attention logits before the softmax instead of the probabilities after it.",
        ATTENTION,
        &["attention.entry_mean"],
    ),
    Row {
        // P(column all zero) is p instead of p^T, in each column.
        effect: Some(Effect {
            claim: "mask_shape.independent_zero_column",
            effect: || vec![zero_column_gap(); crate::claims::mask_shape::D],
        }),
        ..row(
            "shared_for_independent",
            Deviation::ForcedShape(MaskShape::SharedOverPositions),
            "Shares one mask over all positions where an independent mask per entry is specified.",
            MASK_SHAPE,
            &["mask_shape.independent_zero_column"],
        )
    },
    Row {
        // P(column all zero) is p^T instead of p, in each column.
        effect: Some(Effect {
            claim: "mask_shape.shared_zero_column",
            effect: || vec![-zero_column_gap(); crate::claims::mask_shape::D],
        }),
        ..row(
            "independent_for_shared",
            Deviation::ForcedShape(MaskShape::Independent),
            "Draws an independent mask per entry where one mask shared over positions is specified.",
            MASK_SHAPE,
            &["mask_shape.shared_zero_column"],
        )
    },
    Row {
        // The kept fraction is 0.98 q instead of q (q = 0.7 there).
        effect: Some(Effect {
            claim: "semantics.keep_fraction",
            effect: || vec![-0.02 * (1.0 - crate::claims::semantics::P)],
        }),
        ..row(
            "rate_off_2pct",
            scaling(Keep::ScaledKeep(0.98), Scale::DivideByQ, Scale::DivideByQ),
            "Keeps with probability q' = 0.98 q (a drop rate 2 % off) but still scales by 1/q.",
            KEEP_RULE,
            &["semantics.keep_fraction"],
        )
    },
    row(
        "mask_per_shape",
        Deviation::MaskPerShape,
        "Keeps one mask per input shape and reuses it on every call (issue 52's numpy layer): two \
         training passes over one input agree, so the pair form of the variance is 0.",
        VARIANCE,
        &["dropout.variance"],
    ),
    row(
        "loss_scaling",
        scaling(Keep::AtLeastP, Scale::Unscaled, Scale::DivideByQ),
        "Scales the loss by 1/q instead of the activations: forward m x, gradient g m / q.",
        SCALING,
        &["semantics.backward_finite_difference"],
    ),
    Row {
        equivalent: Some(
            "A dropped unit is 0 and 0 / q is 0 bit for bit, so every output, mask and gradient equals the reference's.",
        ),
        ..row(
            "rescale_dropped",
            Deviation::RescaleDropped,
            "Applies the 1/q scale to the dropped units too: (m x) / q.",
            SCALING,
            &[],
        )
    },
    Row {
        equivalent: Some(
            "The rules differ only when u equals p exactly, which has probability at most 2^-53 per unit (u lives on a 2^-53 grid): unobservable at any feasible budget.",
        ),
        ..row(
            "keep_above_p",
            scaling(Keep::AboveP, Scale::DivideByQ, Scale::DivideByQ),
            "Keeps a unit when u > p instead of u >= p.",
            KEEP_RULE,
            &[],
        )
    },
];

/// Every mutant, non-equivalent ones first.
pub fn gallery() -> Vec<Mutant> {
    TABLE
        .iter()
        .map(|r| Mutant {
            id: r.layer.name,
            mistake: r.mistake,
            source: r.source,
            must_kill: r.must_kill,
            equivalent: r.equivalent,
            effect: r.effect,
            layer: &r.layer,
        })
        .collect()
}
