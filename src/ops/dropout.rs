//! Inverted dropout: the reference implementation and the conformance trait.
//!
//! # Definition
//!
//! ```text
//! train:  m_k ~ Bernoulli(q) independently,  z_k = m_k x_k / q
//! eval:   z = x, no random numbers drawn
//! back:   ∂L/∂x_k = (∂L/∂z_k) · m_k / q, with the forward pass's mask
//! ```
//!
//! Survivors are computed as `x_k / q` (a division, so a survivor equals
//! `x_k / q` to the last bit). The keep rule is `u >= p` for `u ~ U[0, 1)` ([`crate::engine::keep`]).
//! `p = 0` keeps every unit and divides by 1: the identity. `p = 1` is
//! rejected with [`Error::InvalidRate`]: there is no inverted scale to apply,
//! and returning zeros silently would hide a configuration mistake.
//!
//! # The trait's shape
//!
//! Each method of [`DropoutLayer`] takes the buffers of its pass as one
//! value ([`TrainPass`], [`EvalPass`], [`BackwardPass`], [`BlockPass`]),
//! then the drop rate `p` and (for the passes that may draw) the
//! generator. An implementation checks `p` first ([`Rate::new`]), then the
//! buffers' lengths ([`TrainPass::check_lengths`] and its siblings), as the
//! reference does.

use rand::Rng;

use super::pass::{BackwardPass, BlockPass, EvalPass, TrainPass};
use super::shape::{MaskShape, row_width};
use crate::engine::keep;
use crate::error::Error;
use crate::formulas::Rate;

/// A dropout implementation under test (the conformance trait).
///
/// Implement it for your own layer and run it through the registry with
/// [`Subject`]. The generator is passed in so a test controls every random
/// number; an implementation must draw from no other source.
pub trait DropoutLayer: Sync {
    /// A short name for reports.
    fn name(&self) -> &str;

    /// Training-mode forward pass at drop rate `p`: writes the output into
    /// `pass.out` and the keep mask into `pass.mask` (both `pass.x.len()`
    /// long).
    fn forward_train(&self, pass: TrainPass<'_>, p: f64, rng: &mut dyn Rng) -> Result<(), Error>;

    /// Evaluation-mode forward pass. A correct layer copies `pass.x` into
    /// `pass.out` and never touches `rng`.
    fn forward_eval(&self, pass: EvalPass<'_>, p: f64, rng: &mut dyn Rng) -> Result<(), Error>;

    /// Backward pass given the forward pass's mask.
    fn backward(&self, pass: BackwardPass<'_>, p: f64) -> Result<(), Error>;

    /// Attention dropout: drops entries of one row `a.x` of attention
    /// probabilities (after the softmax) in training mode. The default is
    /// [`forward_train`](Self::forward_train) on the row, which is what the
    /// specification asks; override it only if your attention path differs.
    fn forward_attention(&self, a: TrainPass<'_>, p: f64, rng: &mut dyn Rng) -> Result<(), Error> {
        self.forward_train(a, p, rng)
    }

    /// Training-mode pass over a `T × d` block `b` (`b.pass.x` row-major,
    /// `b.positions` rows) with the mask shape `b.shape`. The default is
    /// [`default_positions`].
    fn forward_positions(&self, b: BlockPass<'_>, p: f64, rng: &mut dyn Rng) -> Result<(), Error> {
        default_positions(self, b, p, rng)
    }
}

/// The default `T × d` forward pass of a [`DropoutLayer`] (what
/// [`DropoutLayer::forward_positions`] does unless overridden).
///
/// * `Independent`: the layer's own training pass over all `T·d` entries.
/// * `SharedOverPositions`: the layer's training pass over the first row
///   draws the `d` feature masks; every row then keeps the features that
///   row kept, survivors divided by `q` like the reference does.
pub fn default_positions<L>(
    layer: &L,
    block: BlockPass<'_>,
    p: f64,
    rng: &mut dyn Rng,
) -> Result<(), Error>
where
    L: DropoutLayer + ?Sized,
{
    let d = row_width(block.pass.x.len(), block.positions)?;
    match block.shape {
        MaskShape::Independent => layer.forward_train(block.pass, p, rng),
        MaskShape::SharedOverPositions => {
            let rate = Rate::new(p)?;
            block.pass.check_lengths()?;
            let TrainPass { x, out, mask } = block.pass;
            let mut row_out = vec![0.0; d];
            let mut row_mask = vec![false; d];
            layer.forward_train(TrainPass::new(&x[..d], &mut row_out, &mut row_mask), p, rng)?;
            for (i, (o, m)) in out.iter_mut().zip(mask.iter_mut()).enumerate() {
                *m = row_mask[i % d];
                *o = if *m { x[i] / rate.q() } else { 0.0 };
            }
            Ok(())
        }
    }
}

/// The crate's reference inverted dropout.
#[derive(Debug, Clone, Copy, Default)]
pub struct InvertedDropout;

impl DropoutLayer for InvertedDropout {
    fn name(&self) -> &str {
        "reference"
    }

    fn forward_train(&self, pass: TrainPass<'_>, p: f64, rng: &mut dyn Rng) -> Result<(), Error> {
        keep_and_scale(pass, p, rng, |rng, r| keep(rng, r.p()), |v, r| v / r.q())
    }

    fn forward_eval(&self, pass: EvalPass<'_>, p: f64, _rng: &mut dyn Rng) -> Result<(), Error> {
        Rate::new(p)?;
        pass.check_lengths()?;
        pass.out.copy_from_slice(pass.x);
        Ok(())
    }

    fn backward(&self, pass: BackwardPass<'_>, p: f64) -> Result<(), Error> {
        scale_kept_gradients(pass, p, |g, rate| g / rate.q())
    }
}

/// The training loop every keep-and-scale layer shares (the reference, the
/// mutants' scaling deviations, the power perturbations): `p` is checked
/// ([`Rate::new`]) before the buffers; then per unit `kept(rng, rate)` draws
/// its mask entry, and a kept unit `x_k` becomes `survivor(x_k, rate)`, a
/// dropped one `0`.
pub fn keep_and_scale(
    pass: TrainPass<'_>,
    p: f64,
    rng: &mut dyn Rng,
    kept: impl Fn(&mut dyn Rng, Rate) -> bool,
    survivor: impl Fn(f64, Rate) -> f64,
) -> Result<(), Error> {
    let rate = Rate::new(p)?;
    pass.check_lengths()?;
    let TrainPass { x, out, mask } = pass;
    for ((o, m), &v) in out.iter_mut().zip(mask.iter_mut()).zip(x) {
        *m = kept(&mut *rng, rate);
        *o = if *m { survivor(v, rate) } else { 0.0 };
    }
    Ok(())
}

/// The backward loop every keep-and-scale layer shares: `p` is checked
/// before the buffers; a kept unit's gradient `g` becomes `scale(g, rate)`,
/// a dropped unit's `0`.
pub fn scale_kept_gradients(
    pass: BackwardPass<'_>,
    p: f64,
    scale: impl Fn(f64, Rate) -> f64,
) -> Result<(), Error> {
    let rate = Rate::new(p)?;
    pass.check_lengths()?;
    for ((gi, &m), &g) in pass.grad_in.iter_mut().zip(pass.mask).zip(pass.grad_out) {
        *gi = if m { scale(g, rate) } else { 0.0 };
    }
    Ok(())
}

/// What the claims run against.
///
/// Two kinds of subject go through the same claims:
///
/// * **the mathematics** ([`Subject::reference`]): masks are exact
///   Bernoulli(q) draws made by the engine, and the question is whether a
///   formula is right. A claim with a fast estimator
///   ([`crate::claims::Claim::fast_estimate`]) uses it — bit masks and
///   subset-sum tables, [`crate::ops::fast`] — since every extra mask buys power;
///   a claim about an implementation's own behaviour (eval mode, backward,
///   the bits of a survivor) runs the reference layer [`InvertedDropout`];
/// * **an implementation under test** ([`Subject::with_dropout`]): the
///   reference layer, a mutant, a framework's layer. Its own forward pass is
///   called for every draw (the generic path), so the claims judge what it
///   computes.
///
/// Each row of a report says which sampler produced it
/// ([`crate::claims::SamplerKind`]).
#[derive(Clone, Copy)]
pub struct Subject<'a> {
    /// The dropout layer whose forward pass the generic path calls.
    pub dropout: &'a dyn DropoutLayer,
    kind: SubjectKind,
}

/// Whether a subject is the mathematics or an implementation (see [`Subject`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubjectKind {
    /// Exact Bernoulli(q) masks drawn by the engine; fast estimators allowed.
    Mathematics,
    /// A layer whose own forward pass must be called.
    Implementation,
}

impl Subject<'static> {
    /// The mathematics: exact Bernoulli(q) masks, with the crate's reference
    /// layer for the claims that are about a layer's behaviour.
    pub fn reference() -> Self {
        Subject {
            dropout: &InvertedDropout,
            kind: SubjectKind::Mathematics,
        }
    }
}

impl<'a> Subject<'a> {
    /// An implementation under test: every draw calls `dropout`'s forward.
    pub fn with_dropout(dropout: &'a dyn DropoutLayer) -> Self {
        Subject {
            dropout,
            kind: SubjectKind::Implementation,
        }
    }

    /// Which kind of subject this is.
    pub fn kind(&self) -> SubjectKind {
        self.kind
    }

    /// True for the mathematics (fast estimators allowed).
    pub fn is_mathematics(&self) -> bool {
        self.kind == SubjectKind::Mathematics
    }

    /// The name reports use.
    pub fn name(&self) -> &str {
        self.dropout.name()
    }
}
