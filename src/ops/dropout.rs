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

use rand::Rng;

use super::buffers::check_buffers;
use super::rate::Rate;
use super::shape::{MaskShape, row_width};
use crate::engine::keep;
use crate::error::{Error, check_len};

/// A dropout implementation under test (the conformance trait).
///
/// Implement it for your own layer and run it through the registry with
/// [`Subject`]. The generator is passed in so a test controls every random
/// number; an implementation must draw from no other source.
pub trait DropoutLayer: Sync {
    /// A short name for reports.
    fn name(&self) -> &str;

    /// Training-mode forward pass at drop rate `p`: writes the output into
    /// `out` and the keep mask into `mask` (both `x.len()` long).
    fn forward_train(
        &self,
        x: &[f64],
        p: f64,
        rng: &mut dyn Rng,
        out: &mut [f64],
        mask: &mut [bool],
    ) -> Result<(), Error>;

    /// Evaluation-mode forward pass. A correct layer copies `x` and never
    /// touches `rng`.
    fn forward_eval(
        &self,
        x: &[f64],
        p: f64,
        rng: &mut dyn Rng,
        out: &mut [f64],
    ) -> Result<(), Error>;

    /// Backward pass given the forward pass's mask.
    fn backward(
        &self,
        grad_out: &[f64],
        p: f64,
        mask: &[bool],
        grad_in: &mut [f64],
    ) -> Result<(), Error>;

    /// Attention dropout: drops entries of one row `a` of attention
    /// probabilities (after the softmax) in training mode. The default is
    /// [`forward_train`](Self::forward_train) on the row, which is what the
    /// specification asks; override it only if your attention path differs.
    fn forward_attention(
        &self,
        a: &[f64],
        p: f64,
        rng: &mut dyn Rng,
        out: &mut [f64],
        mask: &mut [bool],
    ) -> Result<(), Error> {
        self.forward_train(a, p, rng, out, mask)
    }

    /// Training-mode pass over a `T × d` block `x` (row-major, `positions`
    /// rows) with the mask shape `shape`. The default is
    /// [`default_positions`].
    #[allow(clippy::too_many_arguments)]
    fn forward_positions(
        &self,
        x: &[f64],
        positions: usize,
        shape: MaskShape,
        p: f64,
        rng: &mut dyn Rng,
        out: &mut [f64],
        mask: &mut [bool],
    ) -> Result<(), Error> {
        default_positions(self, x, positions, shape, p, rng, out, mask)
    }
}

/// The default `T × d` forward pass of a [`DropoutLayer`] (what
/// [`DropoutLayer::forward_positions`] does unless overridden).
///
/// * `Independent`: the layer's own training pass over all `T·d` entries.
/// * `SharedOverPositions`: the layer's training pass over the first row
///   draws the `d` feature masks; every row then keeps the features that
///   row kept, survivors divided by `q` like the reference does.
#[allow(clippy::too_many_arguments)]
pub fn default_positions<L: DropoutLayer + ?Sized>(
    layer: &L,
    x: &[f64],
    positions: usize,
    shape: MaskShape,
    p: f64,
    rng: &mut dyn Rng,
    out: &mut [f64],
    mask: &mut [bool],
) -> Result<(), Error> {
    let d = row_width(x.len(), positions)?;
    match shape {
        MaskShape::Independent => layer.forward_train(x, p, rng, out, mask),
        MaskShape::SharedOverPositions => {
            let rate = Rate::new(p)?;
            check_buffers("output buffer", out, mask, x.len())?;
            let mut row_out = vec![0.0; d];
            let mut row_mask = vec![false; d];
            layer.forward_train(&x[..d], p, rng, &mut row_out, &mut row_mask)?;
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

    fn forward_train(
        &self,
        x: &[f64],
        p: f64,
        rng: &mut dyn Rng,
        out: &mut [f64],
        mask: &mut [bool],
    ) -> Result<(), Error> {
        keep_and_scale(
            x,
            p,
            rng,
            out,
            mask,
            |rng, rate| keep(rng, rate.p()),
            |v, rate| v / rate.q(),
        )
    }

    fn forward_eval(
        &self,
        x: &[f64],
        p: f64,
        _rng: &mut dyn Rng,
        out: &mut [f64],
    ) -> Result<(), Error> {
        Rate::new(p)?;
        check_len("eval output buffer", out, x.len())?;
        out.copy_from_slice(x);
        Ok(())
    }

    fn backward(
        &self,
        grad_out: &[f64],
        p: f64,
        mask: &[bool],
        grad_in: &mut [f64],
    ) -> Result<(), Error> {
        scale_kept_gradients(grad_out, p, mask, grad_in, |g, rate| g / rate.q())
    }
}

/// The training loop every keep-and-scale layer shares (the reference, the
/// mutants' scaling deviations, the power perturbations): `p` is checked
/// ([`Rate::new`]) before the buffers; then per unit `kept(rng, rate)` draws
/// its mask entry, and a kept unit `x_k` becomes `survivor(x_k, rate)`, a
/// dropped one `0`.
pub fn keep_and_scale(
    x: &[f64],
    p: f64,
    rng: &mut dyn Rng,
    out: &mut [f64],
    mask: &mut [bool],
    kept: impl Fn(&mut dyn Rng, Rate) -> bool,
    survivor: impl Fn(f64, Rate) -> f64,
) -> Result<(), Error> {
    let rate = Rate::new(p)?;
    check_buffers("output buffer", out, mask, x.len())?;
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
    grad_out: &[f64],
    p: f64,
    mask: &[bool],
    grad_in: &mut [f64],
    scale: impl Fn(f64, Rate) -> f64,
) -> Result<(), Error> {
    let rate = Rate::new(p)?;
    check_buffers("gradient buffer", grad_in, mask, grad_out.len())?;
    for ((gi, &m), &g) in grad_in.iter_mut().zip(mask).zip(grad_out) {
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
///   subset-sum tables, [`crate::fast`] — since every extra mask buys power;
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
