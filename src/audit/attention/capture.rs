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

    /// `w_{h,s,k} = Σ_j W_o[k, (h,j)] v_{h,s,j}` of batch `b`, laid out
    /// `H × E × S` (key innermost: a coordinate's column is contiguous).
    pub(super) fn projected_values(&self, b: usize) -> Vec<f64> {
        let (hn, s_n, j_n, e_n) = (self.heads, self.keys, self.head_dim, self.embed);
        let mut w = vec![0.0; hn * e_n * s_n];
        for h in 0..hn {
            let v = &self.values[(b * hn + h) * s_n * j_n..(b * hn + h + 1) * s_n * j_n];
            for k in 0..e_n {
                let wo = &self.out_weight[k * hn * j_n + h * j_n..k * hn * j_n + (h + 1) * j_n];
                let column = &mut w[(h * e_n + k) * s_n..(h * e_n + k + 1) * s_n];
                for (s, out) in column.iter_mut().enumerate() {
                    *out = wo
                        .iter()
                        .zip(&v[s * j_n..(s + 1) * j_n])
                        .map(|(a, b)| a * b)
                        .sum();
                }
            }
        }
        w
    }
}
