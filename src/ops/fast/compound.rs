//! The fast kernel of the compound site `dropout → LN1 → LN2`: per mask the
//! moments of LN1's output from masked sums over units, per channel
//! `E[LN2(LN1(z))_k]` from one masked sum over masks.
//!
//! # Per mask
//!
//! With `w_k = x_k/q`, the shift `c = mean_k x_k`, `y'_k = z_k − c = m_k w_k − c`,
//! `M' = mean y'`, `V = mean y'² − M'²`, `s = 1/√(V + ε1)` (as
//! [`super::site`]), and `β̃1 = β1 − b` for a constant `b` (`β1`'s first
//! entry when `β1` is constant, so that `β̃1 = 0` exactly; else its mean):
//!
//! ```text
//! u_k = LN1(z)_k − b = γ1_k (y'_k − M') s + β̃1_k     (LN2 is shift-invariant:
//!                                                     LN2(u + b) = LN2(u))
//! Σ u   = s (Σ γ1 y' − M' Σ γ1) + Σ β̃1
//! Σ u²  = s² (Σ γ1² y'² − 2 M' Σ γ1² y' + M'² Σ γ1²)
//!         + 2 s (Σ γ1 β̃1 y' − M' Σ γ1 β̃1) + Σ β̃1²      (expand the square)
//! Σ a y' = −c Σ a + Σ_k m_k a_k w_k,  Σ a y'² = c² Σ a + Σ_k m_k a_k (w_k² − 2 c w_k)
//! ```
//!
//! so every sum is a constant plus `Σ_k m_k col_k` for seven fixed columns
//! (`w`, `w² − 2cw`, `γ1 w`, `γ1² w`, `γ1² (w² − 2cw)`, `γ1 β̃1 w`, and
//! `a γ1 w` for `eval`'s shrink factor of LN1 with weights `a`), one
//! look-up per 4 units in the nibble tables, 64 masks at a time
//! (word-major blocks, [`super::blocks`]). Then `ū = Σu/d`, `V2 = Σu²/d − ū²`,
//! `s2 = 1/√(V2 + ε2)`.
//!
//! # Per channel
//!
//! ```text
//! LN2_k − β2_k = γ2_k s2 (u_k − ū)
//!              = γ2_k [γ1_k s s2 (m_k w_k − c − M') + β̃1_k s2 − ū s2]
//! Σ_b (LN2_bk − β2_k)/γ2_k = γ1_k (w_k Σ_{b keeps k} s s2 − c Σ s s2 − Σ M' s s2)
//!                            + β̃1_k Σ s2 − Σ ū s2
//! ```
//!
//! one masked sum over masks of the per-mask weight `s·s2` per channel (the
//! transposed nibble-table sums of [`super::blocks`]), four block scalars, batch-means
//! standard errors, as in [`super::site`].
//!
//! # The constant rule and conditioning
//!
//! A mask giving a constant `z` (bit patterns, [`super::constant`]) has
//! `s = 0`, so `u = β̃1` exactly, as the per-element LN1 returns `β1`; if
//! `β1` is constant too, LN2's input is constant and `s2 = 0` (`LN2 = β2`).
//! Every other mask must pass [`super::site`]'s floor on `V + ε1`, and
//! `V2 + ε2 ≥ κ2 / 2^-26` with `κ2 = 4 (d + 16) u · mean_k (|γ1_k| r s + |β̃1_k|)²`
//! (`r = 2 (|c| + max |w|) ≥ |y'_k − M'|`), the summation bound on the
//! rounding of `V2` (it adds `O(d)` terms of size at most the square of a
//! bound on `|u_k|`). A run with a mask below either floor returns `None`.

use super::blocks::{block_sizes, channel_sums_over_masks, fill_block};
use super::compact::MaskBits;
use super::conditioning::{RESOLUTION, ill_conditioned, site_floor};
use super::constant::{ConstantPattern, constant_patterns};
use super::lanes::Xoshiro8;
use super::run::{ChunkKernel, Isa, estimate_from_batches, estimate_from_sums, run_chunks};
use super::tables::SubsetTables;
use crate::engine::{Budget, Stream};
use crate::error::{Error, check_all_finite, check_finite_vec, check_len};
use crate::ops::{LayerNorm, Rate};
use crate::stats::Estimate;
use crate::stats::tolerance;

/// Σ t1, Σ t1² (LN1's factor, per draw); Σ t2, Σ t2², Σ n t2 (LN2's factor,
/// per block); Σ n_b²; the count of ill-conditioned masks.
const SCALARS: usize = 7;
const ILL: usize = 6;

/// Estimates of the compound site's statistics.
#[derive(Debug, Clone, PartialEq)]
pub struct CompoundEstimates {
    /// `E[LN2(LN1(z))_k]`.
    pub out: Vec<Estimate>,
    /// `E[Σ_k a1_k (LN1_k − β1_k)]` and `E[Σ_k a2_k (LN2_k − β2_k)]`.
    pub factors: [Estimate; 2],
}

/// The fast kernel of `LN2(LN1(dropout(x)))` (see the module docs).
#[derive(Debug, Clone)]
pub struct FastCompound {
    d: usize,
    shift: f64,
    scaled: Vec<f64>,
    gamma1: Vec<f64>,
    shifted_beta1: Vec<f64>,
    gamma2: Vec<f64>,
    beta2: Vec<f64>,
    eps: [f64; 2],
    /// Σ over units of γ1, γ1², γ1 β̃1, a1 γ1, β̃1, β̃1².
    constants: [f64; 6],
    bits: MaskBits,
    tables: SubsetTables<7>,
    patterns: Vec<ConstantPattern>,
    constant_beta1: bool,
    weights2: Vec<f64>,
    floor: f64,
    /// `4 (d + 16) u` and the three coefficients of `mean (|γ1| r s + |β̃1|)²`.
    kappa2: [f64; 4],
}

impl FastCompound {
    /// The kernel for `x`, rate `p`, LN1 and LN2 (of `x`'s width), with the
    /// shrink-factor weights `a1`, `a2` (zeros when not needed).
    pub fn new(
        x: &[f64],
        p: f64,
        ln1: &LayerNorm,
        ln2: &LayerNorm,
        a1: &[f64],
        a2: &[f64],
    ) -> Result<Self, Error> {
        check_finite_vec("x", x)?;
        let d = x.len();
        for (what, v) in [
            ("LN1", ln1.gamma()),
            ("LN2", ln2.gamma()),
            ("a1", a1),
            ("a2", a2),
        ] {
            check_len(what, v, d)?;
        }
        check_all_finite("a1", a1)?;
        check_all_finite("a2", a2)?;
        let rate = Rate::new(p)?;
        let shift = x.iter().sum::<f64>() / d as f64;
        let scaled: Vec<f64> = x.iter().map(|v| v / rate.q()).collect();
        let (g1, b1) = (ln1.gamma(), ln1.beta());
        let constant_beta1 = b1.iter().all(|&b| b == b1[0]);
        let b = if constant_beta1 {
            b1[0]
        } else {
            b1.iter().sum::<f64>() / d as f64
        };
        let bt: Vec<f64> = b1.iter().map(|v| v - b).collect();
        let sq: Vec<f64> = scaled.iter().map(|w| w * w - 2.0 * shift * w).collect();
        let col = |f: &dyn Fn(usize) -> f64| (0..d).map(f).collect::<Vec<f64>>();
        let columns = [
            scaled.clone(),
            sq.clone(),
            col(&|k| g1[k] * scaled[k]),
            col(&|k| g1[k] * g1[k] * scaled[k]),
            col(&|k| g1[k] * g1[k] * sq[k]),
            col(&|k| g1[k] * bt[k] * scaled[k]),
            col(&|k| a1[k] * g1[k] * scaled[k]),
        ];
        let sum = |f: &dyn Fn(usize) -> f64| (0..d).map(f).sum::<f64>();
        let constants = [
            sum(&|k| g1[k]),
            sum(&|k| g1[k] * g1[k]),
            sum(&|k| g1[k] * bt[k]),
            sum(&|k| a1[k] * g1[k]),
            sum(&|k| bt[k]),
            sum(&|k| bt[k] * bt[k]),
        ];
        let zeros = vec![0.0; d];
        let (floor, _) = site_floor(&zeros, &[&scaled[..]], shift);
        let r = 2.0 * (shift.abs() + scaled.iter().fold(0.0f64, |m, w| m.max(w.abs())));
        let df = d as f64;
        let kappa2 = [
            tolerance::first_order(4.0 * (df + 16.0)),
            sum(&|k| g1[k] * g1[k]) * r * r / df,
            sum(&|k| 2.0 * (g1[k] * bt[k]).abs()) * r / df,
            constants[5] / df,
        ];
        let refs: [&[f64]; 7] = std::array::from_fn(|i| &columns[i][..]);
        Ok(FastCompound {
            d,
            shift,
            gamma1: g1.to_vec(),
            shifted_beta1: bt,
            gamma2: ln2.gamma().to_vec(),
            beta2: ln2.beta().to_vec(),
            eps: [ln1.eps(), ln2.eps()],
            constants,
            bits: MaskBits::new(rate.q())?,
            tables: SubsetTables::new(refs),
            patterns: constant_patterns(&zeros, x, rate.q(), None),
            constant_beta1,
            weights2: a2.iter().zip(ln2.gamma()).map(|(a, g)| a * g).collect(),
            floor,
            kappa2,
            scaled,
        })
    }

    /// Runs `budget.samples` masks; `None` below 129 masks, for an
    /// overflowing input or when a mask is ill-conditioned (the caller uses
    /// the per-element path).
    pub fn estimate(&self, budget: Budget) -> Result<Option<CompoundEstimates>, Error> {
        if budget.samples <= 2 * 64 || !self.floor.is_finite() || !self.kappa2[1].is_finite() {
            return Ok(None);
        }
        let sums = run_chunks(self, budget)?;
        if sums[ILL] > 0.0 {
            return Ok(None);
        }
        let (n, d) = (budget.samples, self.d);
        let at = |i: usize, k: usize| sums[SCALARS + i * d + k];
        let out = (0..d)
            .map(|k| {
                let e = estimate_from_batches(at(0, k), at(1, k), at(2, k), sums[5], n);
                Estimate {
                    value: self.beta2[k] + self.gamma2[k] * e.value,
                    stderr: self.gamma2[k].abs() * e.stderr,
                    ..e
                }
            })
            .collect();
        Ok(Some(CompoundEstimates {
            out,
            factors: [
                estimate_from_sums(sums[0], sums[1], n),
                estimate_from_batches(sums[2], sums[3], sums[4], sums[5], n),
            ],
        }))
    }

    /// `(M', s, s2, ū)` of mask `b` of the word-major block `words`, from
    /// its seven masked sums `t`, adding LN1's factor and the conditioning
    /// count into `scalars`.
    #[inline(always)]
    fn one_mask(&self, words: &[u64], b: usize, t: [f64; 7], scalars: &mut [f64]) -> [f64; 4] {
        let (d, c) = (self.d as f64, self.shift);
        let [g, g2, gb, ag, bt, bt2] = self.constants;
        let m = (t[0] - d * c) / d;
        let v = (t[1] + d * c * c) / d - m * m;
        let lin = |sum_a: f64, masked: f64| masked - c * sum_a;
        let (g_y, g2_y, gb_y, ag_y) = (lin(g, t[2]), lin(g2, t[3]), lin(gb, t[5]), lin(ag, t[6]));
        let g2_yy = t[4] + c * c * g2;
        let constant = self.patterns.iter().any(|p| p.matches_in_block(words, b));
        let s = if constant {
            0.0
        } else {
            if ill_conditioned(v + self.eps[0], self.floor) {
                scalars[ILL] += 1.0;
            }
            1.0 / (v + self.eps[0]).sqrt()
        };
        let t1 = s * (ag_y - m * ag);
        scalars[0] += t1;
        scalars[1] += t1 * t1;
        let mean_u = (s * (g_y - m * g) + bt) / d;
        let mean_u2 =
            (s * s * (g2_yy - 2.0 * m * g2_y + m * m * g2) + 2.0 * s * (gb_y - m * gb) + bt2) / d;
        let v2 = mean_u2 - mean_u * mean_u;
        let s2 = if constant && self.constant_beta1 {
            0.0
        } else {
            let [k0, k1, k2, k3] = self.kappa2;
            let kappa = k0 * (s * s * k1 + s * k2 + k3);
            if ill_conditioned(v2 + self.eps[1], kappa / RESOLUTION) {
                scalars[ILL] += 1.0;
            }
            1.0 / (v2 + self.eps[1]).sqrt()
        };
        [m, s, s2, mean_u]
    }
}

impl ChunkKernel for FastCompound {
    fn width(&self) -> usize {
        SCALARS + 3 * self.d
    }

    #[inline(always)]
    fn chunk(&self, rng: &mut Stream, draws: usize, sums: &mut [f64]) {
        self.chunk_on(Isa::Portable, rng, draws, sums);
    }

    #[inline(always)]
    fn chunk_on(&self, isa: Isa, rng: &mut Stream, draws: usize, sums: &mut [f64]) {
        let d = self.d;
        let nw = d.div_ceil(64);
        let mut lanes = Xoshiro8::from_stream(rng);
        // 64 masks, word-major (see super::blocks).
        let mut words = vec![0u64; 64 * nw];
        let mut scratch = Vec::new();
        let mut per_mask = [[0.0f64; 64]; 7];
        let mut per = [[0.0f64; 4]; 64];
        let mut weight = [0.0f64; 64];
        let mut mask_tables = SubsetTables::new([&weight[..]]);
        let mut kept = vec![0.0f64; d];
        let (scalars, channels) = sums.split_at_mut(SCALARS);
        for nb in block_sizes(draws) {
            fill_block(&self.bits, &mut lanes, &mut words, &mut scratch, d, nb);
            self.tables.block_sums(isa, &words, &mut per_mask);
            for b in 0..nb {
                let t = std::array::from_fn(|c| per_mask[c][b]);
                per[b] = self.one_mask(&words, b, t, scalars);
                weight[b] = per[b][1] * per[b][2];
            }
            weight[nb..].fill(0.0);
            // Σ s s2, Σ M' s s2, Σ s2, Σ ū s2 over the block.
            let mut block = [0.0f64; 4];
            for &[m, s, s2, mean_u] in &per[..nb] {
                block[0] += s * s2;
                block[1] += m * s * s2;
                block[2] += s2;
                block[3] += mean_u * s2;
            }
            mask_tables.refill([&weight[..]]);
            channel_sums_over_masks(isa, &words, &mask_tables, &mut kept);
            let n = nb as f64;
            let (sum, rest) = channels.split_at_mut(d);
            let (sum_sq, sum_weighted) = rest.split_at_mut(d);
            let mut factor = 0.0;
            for k in 0..d {
                let first = self.scaled[k] * kept[k] - self.shift * block[0] - block[1];
                let t = self.gamma1[k] * first + self.shifted_beta1[k] * block[2] - block[3];
                sum[k] += t;
                sum_sq[k] += t * t;
                sum_weighted[k] += n * t;
                factor += self.weights2[k] * t;
            }
            scalars[2] += factor;
            scalars[3] += factor * factor;
            scalars[4] += n * factor;
            scalars[5] += n * n;
        }
    }
}
