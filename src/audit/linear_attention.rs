//! Audit of attention-path captures: attention dropout on each head's
//! probability row → value product → head concatenation → `o_proj(W, b)`
//! → (+h) → norm (a Mistral or Llama `post_attention_layernorm` site).
//! Per token (one query of one batch row) the path is
//! [`Source::Attention`] with that query's rows and the batch row's values;
//! the truth, eval and first-order outputs come from the shared loop
//! ([`super::linear::audit_tokens`]). The first-order output uses the
//! path's moments ([`Path::moments`]: `Σ` of width `E`, formed once per
//! token; the traces alone would do, at `O(H S E d_h)` per token).

use nalgebra::{DMatrix, DVector};

use super::linear::{LinearAudit, LinearTail, audit_tokens};
use crate::error::Error;
use crate::formulas::linear_path::{Head, Path, Source, ln_corrected, rms_corrected};
use crate::ops::{AnyNorm, Rate};

/// One attention-path site: per token its heads (row `a`, values), and
/// what follows the dropout ([`LinearTail`]: `o_proj`, the added term `h`,
/// the norm).
#[derive(Debug, Clone)]
pub struct AttentionPathCapture {
    pub name: String,
    pub rate: Rate,
    pub heads: Vec<Vec<Head>>,
    pub tail: LinearTail,
}

impl AttentionPathCapture {
    /// From flat row-major arrays: `probs` `B·H·L·S`, `values` `B·H·S·J`
    /// (`shape = [B, H, L, S, J]`), `w` one row per output unit (`E` rows of
    /// width `H·J`), `b` (`E`), `h` one row per token (`B·L` rows of `E`).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        name: String,
        p: f64,
        shape: [usize; 5],
        probs: &[f64],
        values: &[f64],
        w: &[Vec<f64>],
        b: Vec<f64>,
        h: Vec<Vec<f64>>,
        norm: AnyNorm,
    ) -> Result<Self, Error> {
        let [batch, heads, queries, keys, dh] = shape;
        let check = |what, expected: usize, got: usize| {
            if expected == got {
                Ok(())
            } else {
                Err(Error::LengthMismatch {
                    what,
                    expected,
                    got,
                })
            }
        };
        check(
            "attention probabilities",
            batch * heads * queries * keys,
            probs.len(),
        )?;
        check("values", batch * heads * keys * dh, values.len())?;
        crate::error::check_finite_vec("attention probabilities", probs)?;
        crate::error::check_finite_vec("values", values)?;
        check("h (tokens)", batch * queries, h.len())?;
        let e = norm.dim();
        check("o_proj rows", e, w.len())?;
        check("o_proj bias", e, b.len())?;
        for row in w {
            check("o_proj row", heads * dh, row.len())?;
            crate::error::check_finite_vec("o_proj", row)?;
        }
        for row in &h {
            check("h (one token)", e, row.len())?;
            crate::error::check_finite_vec("h", row)?;
        }
        let mut tokens = Vec::with_capacity(batch * queries);
        for bi in 0..batch {
            for l in 0..queries {
                let per_head = (0..heads)
                    .map(|hd| {
                        let row = ((bi * heads + hd) * queries + l) * keys;
                        let v0 = (bi * heads + hd) * keys * dh;
                        Head {
                            a: probs[row..row + keys].to_vec(),
                            v: DMatrix::from_row_slice(keys, dh, &values[v0..v0 + keys * dh]),
                        }
                    })
                    .collect();
                tokens.push(per_head);
            }
        }
        Ok(AttentionPathCapture {
            name,
            rate: Rate::new(p)?,
            heads: tokens,
            tail: LinearTail {
                w: DMatrix::from_fn(e, heads * dh, |i, j| w[i][j]),
                b: DVector::from_vec(b),
                h,
                norm,
            },
        })
    }

    fn path(&self, t: usize) -> Path {
        let source = Source::Attention {
            heads: self.heads[t].clone(),
            rate: self.rate,
        };
        self.tail.path(source, t)
    }

    /// The first-order output of every token (the live correction).
    pub fn first_order_tokens(&self) -> Result<Vec<Vec<f64>>, Error> {
        (0..self.heads.len())
            .map(|t| first_order(&self.tail.norm, &self.path(t)))
            .collect()
    }
}

fn first_order(norm: &AnyNorm, path: &Path) -> Result<Vec<f64>, Error> {
    let m = path.moments()?;
    match norm {
        AnyNorm::Layer(ln) => ln_corrected(&m, ln),
        AnyNorm::Rms(rms) => rms_corrected(&m, rms),
    }
}

/// Audits one attention-path capture at `samples` masks per token.
pub fn audit_attention_path(
    capture: &AttentionPathCapture,
    samples: u64,
    seed: u64,
) -> Result<LinearAudit, Error> {
    audit_tokens(
        (&capture.name, capture.heads.len(), &capture.tail.norm),
        (samples, seed),
        |t| capture.path(t),
        |_, path| first_order(&capture.tail.norm, path),
    )
}
