//! The family's paths: [`linear`], [`attention`], [`chain`] and the
//! output claim's [`wide`] with its LayerNorm [`wide_norm`].

use nalgebra::{DMatrix, DVector};

use crate::formulas::linear_path::{Head, Path, Source, Step};
use crate::ops::{LayerNorm, Rate};

/// A deterministic, irregular matrix (entries in `[−1.2, 1.2]`): no
/// symmetry that could hide a dropped off-diagonal term.
fn weights(rows: usize, cols: usize, seed: usize) -> DMatrix<f64> {
    DMatrix::from_fn(rows, cols, |i, j| {
        let k = (i * 31 + j * 17 + seed * 7) % 23;
        (k as f64 - 11.0) / 11.0 * 1.2
    })
}

fn vector(n: usize, seed: usize) -> DVector<f64> {
    DVector::from_fn(n, |i, _| ((i * 13 + seed * 5) % 11) as f64 / 5.0 - 1.0)
}

fn rate(p: f64) -> Rate {
    Rate::new(p).expect("a literal rate in [0, 1)")
}

/// `Dropout_{0.3}(u ∈ ℝ⁶) → Linear(W ∈ ℝ^{4×6}, b) → (+h)`: 6 mask bits.
pub fn linear() -> Path {
    Path {
        source: Source::Dropped {
            u: vec![1.5, -0.4, 0.8, 2.0, -1.1, 0.3],
            rate: rate(0.3),
        },
        steps: vec![
            Step::Linear {
                w: weights(4, 6, 1),
                b: vector(4, 2),
            },
            Step::Add(DVector::from_vec(vec![0.5, -1.0, 0.2, 1.5])),
        ],
    }
}

/// Attention dropout at `p = 0.2` on two heads of three keys each
/// (`d_h = 2`), concatenated (width 4) → `o_proj ∈ ℝ^{4×4}` → (+h): 6 bits.
pub fn attention() -> Path {
    let head = |a: [f64; 3], seed| Head {
        a: a.to_vec(),
        v: weights(3, 2, seed) + DMatrix::from_element(3, 2, 0.3),
    };
    Path {
        source: Source::Attention {
            heads: vec![head([0.2, 0.3, 0.5], 3), head([0.6, 0.1, 0.3], 4)],
            rate: rate(0.2),
        },
        steps: vec![
            Step::Linear {
                w: weights(4, 4, 5),
                b: vector(4, 6),
            },
            Step::Add(DVector::from_vec(vec![-0.3, 0.8, 0.0, 1.1])),
        ],
    }
}

/// `Dropout_{0.3}(u ∈ ℝ⁵) → Linear(4×5) → Dropout_{0.2} → Linear(4×4, b)
/// → (+h)`: 5 + 4 = 9 bits.
pub fn chain() -> Path {
    Path {
        source: Source::Dropped {
            u: vec![1.0, -0.6, 0.9, 1.7, -1.2],
            rate: rate(0.3),
        },
        steps: vec![
            Step::Linear {
                w: weights(4, 5, 7),
                b: DVector::zeros(4),
            },
            Step::Dropout(rate(0.2)),
            Step::Linear {
                w: weights(4, 4, 8),
                b: vector(4, 9),
            },
            Step::Add(DVector::from_vec(vec![0.4, -0.2, 1.0, -0.7])),
        ],
    }
}

/// `Dropout_{0.1}(u ∈ ℝ¹⁶) → Linear(16×16, b) → (+h)` before a LayerNorm
/// with per-unit `γ`, `β`: the first-order output claim (16 bits).
pub fn wide() -> Path {
    Path {
        source: Source::Dropped {
            u: vector(16, 10).iter().map(|x| x + 0.8).collect(),
            rate: rate(0.1),
        },
        steps: vec![
            Step::Linear {
                w: weights(16, 16, 11) * 0.5,
                b: vector(16, 12),
            },
            Step::Add(vector(16, 13) * 0.5),
        ],
    }
}

/// The LayerNorm of [`wide`]: `γ_k = 1 + k/16`, `β_k = (k mod 3)/4 − 1/4`,
/// `ε = 10⁻⁵`.
pub fn wide_norm() -> LayerNorm {
    let gamma = (0..16).map(|k| 1.0 + k as f64 / 16.0).collect();
    let beta = (0..16).map(|k| (k % 3) as f64 / 4.0 - 0.25).collect();
    LayerNorm::new(gamma, beta, 1e-5).expect("valid literal LayerNorm")
}
