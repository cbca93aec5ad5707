//! The closed forms of every query row of one batch element, as matrix
//! products (the derivation is in the module docs of [`super`]).
//!
//! # The products
//!
//! Per head `h` write `A_h` (`L × S`, the softmax rows), `V_h` (`S × J`),
//! `W_o^h` (`E × J`, the head's block of columns of `W_o`) and `∘` for the
//! elementwise product. The sums of the derivation are entries of
//!
//! ```text
//! w_h       = V_h (W_o^h)ᵀ                       S × E   w_{h,s,k} = Σ_j v_{h,s,j} W_o[k,(h,j)]
//! E[out]    = 1 cᵀ + Σ_h (A_h V_h) (W_o^h)ᵀ       L × E   = 1 cᵀ + concat_h(A_h V_h) W_oᵀ
//! Var(out)  = (p/q) Σ_h (A_h ∘ A_h)(w_h ∘ w_h)    L × E
//! Var R_h   = (p/q) (A_h ∘ A_h) 1                 L
//! ```
//!
//! The mean is taken the way the module computes its eval output
//! (`A_h V_h` first: `L·S·J + L·H·J·E` products instead of `L·H·S·E`);
//! the variance needs `w` itself, squared entry by entry, so it is the one
//! `L × H·S × E` product. Each product is a GEMM (matrixmultiply's blocked
//! kernel, nalgebra's, on strided matrices in the capture's slices: no
//! copies but the squares), in place of the scalar loops over every row,
//! head, coordinate and key.
//!
//! # Bits
//!
//! The rows are cut into blocks of [`ROW_BLOCK`] and the variance's
//! outputs into tiles of [`COLUMN_BLOCK`] coordinates (constants, not the
//! thread count); every block's or tile's products run in one thread, the
//! heads accumulated in order, so the bits depend on neither the thread count
//! nor the scheduling.

use std::ops::Range;

use rayon::prelude::*;

use super::AttentionCapture;

/// Query rows per block of products: each block's products pack the
/// right-hand matrix once for this many rows.
const ROW_BLOCK: usize = 128;

/// Output coordinates per tile of the variance's product (so a short
/// input still gives the threads several tiles).
const COLUMN_BLOCK: usize = 256;

/// A strided matrix in a slice: `rows × cols`, entry `(r, c)` at
/// `r·strides.0 + c·strides.1`.
#[derive(Clone, Copy)]
struct Shape {
    rows: usize,
    cols: usize,
    strides: (usize, usize),
}

impl Shape {
    /// A row-major `rows × cols` block with rows `stride` apart.
    fn rows(rows: usize, cols: usize, stride: usize) -> Shape {
        Shape {
            rows,
            cols,
            strides: (stride, 1),
        }
    }

    /// `cols × rows`: the transpose, on the same entries.
    fn t(self) -> Shape {
        Shape {
            rows: self.cols,
            cols: self.rows,
            strides: (self.strides.1, self.strides.0),
        }
    }

    /// Panics unless every entry lies in a slice of `len` (a bug, not an
    /// input: the capture's dimensions were checked on construction).
    fn check(self, len: usize) {
        let last = (self.rows - 1) * self.strides.0 + (self.cols - 1) * self.strides.1;
        assert!(
            self.rows > 0 && self.cols > 0 && last < len,
            "matrix out of its slice"
        );
    }
}

/// `C ← α A B + β C` (matrixmultiply's `dgemm`, single-threaded).
fn gemm(alpha: f64, a: (&[f64], Shape), b: (&[f64], Shape), beta: f64, c: (&mut [f64], Shape)) {
    let ((a, sa), (b, sb), (c, sc)) = (a, b, c);
    assert!(sa.cols == sb.rows && sc.rows == sa.rows && sc.cols == sb.cols);
    sa.check(a.len());
    sb.check(b.len());
    sc.check(c.len());
    let s = |x: usize| x as isize;
    // SAFETY: every entry the kernel reads or writes lies in its slice (the
    // checks above: the largest index of each strided matrix is in
    // bounds), and `c` is borrowed mutably, so it aliases neither `a` nor
    // `b`.
    unsafe {
        matrixmultiply::dgemm(
            sa.rows,
            sa.cols,
            sb.cols,
            alpha,
            a.as_ptr(),
            s(sa.strides.0),
            s(sa.strides.1),
            b.as_ptr(),
            s(sb.strides.0),
            s(sb.strides.1),
            beta,
            c.as_mut_ptr(),
            s(sc.strides.0),
            s(sc.strides.1),
        );
    }
}

/// The closed forms of some of batch element `b`'s query rows.
pub(super) struct BatchForms {
    /// `E[out]`, `queries × E`.
    pub(super) mean: Vec<f64>,
    /// `Var(out)`, `queries × E`.
    pub(super) variance: Vec<f64>,
    /// `Var R`, `queries × H`.
    pub(super) row_sum_variance: Vec<f64>,
    /// `w_{h,s,k}` for the sampled coordinates `ks`, `H × |ks| × S`.
    pub(super) columns: Vec<f64>,
}

/// `W_o^h` transposed (`J × E`) in `W_o` (`E × H·J`).
fn out_block(c: &AttentionCapture, h: usize) -> (&[f64], Shape) {
    let hj = c.heads * c.head_dim;
    (
        &c.out_weight[h * c.head_dim..],
        Shape::rows(c.embed, c.head_dim, hj).t(),
    )
}

/// `V_h` (`S × J`) of batch element `b`.
fn values(c: &AttentionCapture, b: usize, h: usize) -> (&[f64], Shape) {
    let (s_n, j_n) = (c.keys, c.head_dim);
    let start = (b * c.heads + h) * s_n * j_n;
    (
        &c.values[start..start + s_n * j_n],
        Shape::rows(s_n, j_n, j_n),
    )
}

/// `w_h` (`S × E`, row-major) of batch element `b`.
fn projected(c: &AttentionCapture, b: usize, h: usize) -> Vec<f64> {
    let (s_n, e_n) = (c.keys, c.embed);
    let mut w = vec![0.0; s_n * e_n];
    let shape = Shape::rows(s_n, e_n, e_n);
    gemm(1.0, values(c, b, h), out_block(c, h), 0.0, (&mut w, shape));
    w
}

/// The closed forms of the query rows `queries` of batch element `b`
/// (`odds = p/q`), and the columns
/// `w_{h,·,k}` of the coordinates `ks` for the sampled check.
pub(super) fn batch_forms(
    c: &AttentionCapture,
    b: usize,
    queries: Range<usize>,
    odds: f64,
    ks: &[usize],
) -> BatchForms {
    let (hn, l_n, s_n, j_n, e_n) = (c.heads, c.queries, c.keys, c.head_dim, c.embed);
    let squared: Vec<(Vec<f64>, Vec<f64>)> = (0..hn)
        .into_par_iter()
        .map(|h| {
            let w = projected(c, b, h);
            let columns = ks
                .iter()
                .flat_map(|&k| (0..s_n).map(move |s| (s, k)))
                .map(|(s, k)| w[s * e_n + k])
                .collect();
            (w.into_iter().map(|x| x * x).collect(), columns)
        })
        .collect();
    let hj = hn * j_n;
    let weights = |h: usize, i0: usize, n: usize| {
        let start = ((b * hn + h) * l_n + i0) * s_n;
        &c.weights[start..start + n * s_n]
    };
    let blocks: Vec<(usize, usize)> = queries
        .clone()
        .step_by(ROW_BLOCK)
        .map(|i0| (i0, ROW_BLOCK.min(queries.end - i0)))
        .collect();
    let rows: Vec<(Vec<f64>, Vec<f64>)> = blocks
        .par_iter()
        .map(|&(i0, n)| {
            let mut heads_out = vec![0.0; n * hj];
            let mut row_sum_variance = vec![0.0; n * hn];
            for h in 0..hn {
                let a = weights(h, i0, n);
                let out = (&mut heads_out[h * j_n..], Shape::rows(n, j_n, hj));
                gemm(
                    1.0,
                    (a, Shape::rows(n, s_n, s_n)),
                    values(c, b, h),
                    0.0,
                    out,
                );
                for (i, row) in a.chunks(s_n).enumerate() {
                    row_sum_variance[i * hn + h] = odds * row.iter().map(|x| x * x).sum::<f64>();
                }
            }
            let mut mean: Vec<f64> = (0..n).flat_map(|_| c.out_bias.iter().copied()).collect();
            gemm(
                1.0,
                (&heads_out, Shape::rows(n, hj, hj)),
                (&c.out_weight, Shape::rows(e_n, hj, hj).t()),
                1.0,
                (&mut mean, Shape::rows(n, e_n, e_n)),
            );
            (mean, row_sum_variance)
        })
        .collect();
    let column_blocks: Vec<(usize, usize)> = (0..e_n)
        .step_by(COLUMN_BLOCK)
        .map(|k0| (k0, COLUMN_BLOCK.min(e_n - k0)))
        .collect();
    let tiles: Vec<((usize, usize), (usize, usize))> = blocks
        .iter()
        .flat_map(|&r| column_blocks.iter().map(move |&k| (r, k)))
        .collect();
    let variance_tiles: Vec<Vec<f64>> = tiles
        .par_iter()
        .map(|&((i0, n), (k0, m))| {
            let mut tile = vec![0.0; n * m];
            let mut a2 = vec![0.0; n * s_n];
            for (h, (w2, _)) in squared.iter().enumerate() {
                for (sq, x) in a2.iter_mut().zip(weights(h, i0, n)) {
                    *sq = x * x;
                }
                gemm(
                    odds,
                    (&a2, Shape::rows(n, s_n, s_n)),
                    (&w2[k0..], Shape::rows(s_n, m, e_n)),
                    1.0,
                    (&mut tile, Shape::rows(n, m, m)),
                );
            }
            tile
        })
        .collect();
    let mut forms = BatchForms {
        mean: Vec::with_capacity(queries.len() * e_n),
        variance: Vec::with_capacity(queries.len() * e_n),
        row_sum_variance: Vec::with_capacity(queries.len() * hn),
        columns: squared.into_iter().flat_map(|(_, col)| col).collect(),
    };
    for (m, r) in rows {
        forms.mean.extend(m);
        forms.row_sum_variance.extend(r);
    }
    let mut tile = variance_tiles.iter().zip(&tiles);
    for &(_, n) in &blocks {
        let row_tiles: Vec<_> = tile.by_ref().take(column_blocks.len()).collect();
        for i in 0..n {
            for (t, (_, (_, m))) in &row_tiles {
                forms.variance.extend(&t[i * m..(i + 1) * m]);
            }
        }
    }
    forms
}
