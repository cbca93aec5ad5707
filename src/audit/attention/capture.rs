//! An attention site's capture: the softmax rows, the projected values and
//! the output projection, checked on construction.

use crate::error::{Error, check_finite_vec, check_len};
use crate::ops::Rate;

/// One attention site's capture (row-major, batch outermost).
#[derive(Debug, Clone)]
pub struct AttentionCapture {
    /// The `nn.MultiheadAttention`'s module name.
    pub name: String,
    pub p: f64,
    pub batch: usize,
    pub heads: usize,
    /// Queries per batch element (`L`).
    pub queries: usize,
    /// Keys (`S`).
    pub keys: usize,
    /// Head width (`J`).
    pub head_dim: usize,
    /// Output width (`E`).
    pub embed: usize,
    /// The softmax weights, `B × H × L × S`.
    pub weights: Vec<f64>,
    /// The projected values, `B × H × S × J`.
    pub values: Vec<f64>,
    /// `W_o`, `E × H·J` (torch's `out_proj.weight`).
    pub out_weight: Vec<f64>,
    /// `c`, `E` (zeros when the projection has no bias).
    pub out_bias: Vec<f64>,
}

/// The shape of a capture: `(batch, heads, queries, keys, head_dim, embed)`.
pub type AttentionShape = (usize, usize, usize, usize, usize, usize);

impl AttentionCapture {
    /// A capture from its parts, checked for shape, finiteness and weights
    /// `≥ 0`.
    pub fn new(
        name: String,
        p: f64,
        shape: AttentionShape,
        weights: Vec<f64>,
        values: Vec<f64>,
        out_weight: Vec<f64>,
        out_bias: Vec<f64>,
    ) -> Result<Self, Error> {
        Rate::new(p)?;
        let (batch, heads, queries, keys, head_dim, embed) = shape;
        if [batch, heads, queries, keys, head_dim, embed].contains(&0) {
            return Err(Error::InvalidOption {
                what: format!(
                    "attention site {name}: every dimension must be positive, got {shape:?}"
                ),
            });
        }
        check_len("weights", &weights, batch * heads * queries * keys)?;
        check_len("values", &values, batch * heads * keys * head_dim)?;
        check_len("out_weight", &out_weight, embed * heads * head_dim)?;
        check_len("out_bias", &out_bias, embed)?;
        for (what, x) in [
            ("weights", &weights),
            ("values", &values),
            ("out_weight", &out_weight),
            ("out_bias", &out_bias),
        ] {
            check_finite_vec(what, x)?;
        }
        if weights.iter().any(|a| *a < 0.0) {
            return Err(Error::InvalidOption {
                what: format!("attention site {name}: a softmax weight is negative"),
            });
        }
        Ok(AttentionCapture {
            name,
            p,
            batch,
            heads,
            queries,
            keys,
            head_dim,
            embed,
            weights,
            values,
            out_weight,
            out_bias,
        })
    }

    /// The softmax row of batch `b`, head `h`, query `i`.
    pub(super) fn row(&self, b: usize, h: usize, i: usize) -> &[f64] {
        let start = ((b * self.heads + h) * self.queries + i) * self.keys;
        &self.weights[start..start + self.keys]
    }
}
