//! The normalization kernel: per mask `M`, `V`, `R²` by table look-ups, and
//! optionally `E[LN(z)_k]` for every channel without touching each element.
//!
//! # Per mask
//!
//! ```text
//! z_k = m_k x_k / q
//! M   = (1/d) Σ_k m_k (x_k/q)            one look-up per 8 channels
//! R²  = (1/d) Σ_k m_k (x_k/q)²           (same look-up: two-column tables)
//! V   = R² − M²
//! s   = 1/√(V + ε)
//! ```
//!
//! # Per channel, algebraically
//!
//! `LN(z)_k = (z_k − M) s = m_k (x_k/q) s − M s`, and since `m_k² = m_k`,
//!
//! ```text
//! Σ_draws LN_k  = (x_k/q) A_k − G₁                 A_k = Σ_{draws keeping k} s
//! Σ_draws LN_k² = (x_k/q)² B_k − 2 (x_k/q) C_k + G₂   B_k = Σ_{keeping k} s²
//!                                                     C_k = Σ_{keeping k} M s²
//! G₁ = Σ_draws M s,  G₂ = Σ_draws M² s²
//! ```
//!
//! so the mean of `LN_k` and its standard error need only the three sums
//! `A_k, B_k, C_k` per channel. Those are masked sums over *draws*: masks
//! are generated 64 at a time, each 64×64 block of bits is transposed so
//! that one word holds channel `k`'s keep bits across the 64 masks, and the
//! sums `(s, s², M s²)` of every subset of each 8 masks are tabulated, so a
//! channel costs 8 look-ups per 64 masks instead of 64 conditional adds.
//! All arithmetic is `f64` in a fixed order.

use super::bits::{MaskBits, WordSource, transpose64};
use super::run::{ChunkKernel, estimate_from_sums, run_chunks};
use super::tables::SubsetTables;
use crate::engine::{Budget, Stream};
use crate::error::{Error, check_finite_vec};
use crate::ops::Rate;
use crate::stats::Estimate;

/// Scalar sums per draw: Σ M, Σ M², Σ V, Σ V², Σ R², Σ (R²)², Σ M s, Σ M² s².
const SCALARS: usize = 8;

/// Estimates of the normalization statistics of `z = dropout(x)`.
#[derive(Debug, Clone, PartialEq)]
pub struct NormEstimates {
    /// `E[M]`, `M = mean_k z_k`.
    pub mean: Estimate,
    /// `E[V]`, `V = mean_k z_k² − M²`.
    pub var: Estimate,
    /// `E[R²]`, `R² = mean_k z_k²`.
    pub r2: Estimate,
    /// `E[LN(z)_k] = E[(z_k − M)/√(V + ε)]` per channel (empty when not asked).
    pub ln: Vec<Estimate>,
}

/// The fast kernel for `M`, `V`, `R²` and (optionally) `E[LN(z)]`.
#[derive(Debug, Clone)]
pub struct FastNorm {
    scaled: Vec<f64>,
    eps: f64,
    ln: bool,
    bits: MaskBits,
    tables: SubsetTables<2>,
}

impl FastNorm {
    /// The kernel for input `x`, drop rate `p`, LayerNorm `ε` (`> 0`), with
    /// the per-channel `E[LN(z)]` when `ln`.
    pub fn new(x: &[f64], p: f64, eps: f64, ln: bool) -> Result<Self, Error> {
        check_finite_vec("x", x)?;
        let rate = Rate::new(p)?;
        check_eps(eps)?;
        let scaled: Vec<f64> = x.iter().map(|v| v / rate.q()).collect();
        let squared: Vec<f64> = scaled.iter().map(|v| v * v).collect();
        let tables = SubsetTables::new([&scaled, &squared]);
        Ok(FastNorm {
            bits: MaskBits::new(rate.q())?,
            scaled,
            eps,
            ln,
            tables,
        })
    }

    fn d(&self) -> usize {
        self.scaled.len()
    }

    /// Runs `budget.samples` masks.
    pub fn estimate(&self, budget: Budget) -> Result<NormEstimates, Error> {
        let sums = run_chunks(self, budget)?;
        let n = budget.samples;
        let ln = if self.ln {
            self.scaled
                .iter()
                .enumerate()
                .map(|(k, &c)| {
                    let [a, b, cc] = [0, 1, 2].map(|i| sums[SCALARS + 3 * k + i]);
                    let sum = c * a - sums[6];
                    let sum_sq = c * c * b - 2.0 * c * cc + sums[7];
                    estimate_from_sums(sum, sum_sq, n)
                })
                .collect()
        } else {
            Vec::new()
        };
        Ok(NormEstimates {
            mean: estimate_from_sums(sums[0], sums[1], n),
            var: estimate_from_sums(sums[2], sums[3], n),
            r2: estimate_from_sums(sums[4], sums[5], n),
            ln,
        })
    }
}

/// Checks a LayerNorm epsilon: finite and `> 0` (with `ε = 0`, the
/// all-dropped mask, of probability `p^d`, has no LayerNorm).
pub fn check_eps(eps: f64) -> Result<f64, Error> {
    if eps.is_finite() && eps > 0.0 {
        Ok(eps)
    } else {
        Err(Error::Degenerate {
            what: format!("LayerNorm epsilon must be finite and > 0, got {eps}"),
        })
    }
}

impl ChunkKernel for FastNorm {
    fn width(&self) -> usize {
        SCALARS + if self.ln { 3 * self.d() } else { 0 }
    }

    fn chunk(&self, rng: &mut Stream, draws: usize, sums: &mut [f64]) {
        let d = self.d();
        let nw = d.div_ceil(64);
        let inv_d = 1.0 / d as f64;
        let mut words = vec![0u64; 64 * nw];
        let mut open = vec![0u64; 64 * nw];
        let mut src = WordSource::new(rng);
        let tail = tail_mask(d);
        let mut per = [[0.0f64; 4]; 64];
        let mut mask_tables = vec![[0.0f64; 4]; 8 * 256];
        let mut channels = vec![[0.0f64; 4]; if self.ln { d } else { 0 }];
        let mut done = 0;
        while done < draws {
            let nb = (draws - done).min(64);
            self.bits
                .fill(&mut src, &mut words[..nb * nw], &mut open[..nb * nw]);
            for mask in words.chunks_exact_mut(nw).take(nb) {
                mask[nw - 1] &= tail;
            }
            for (b, mask) in words.chunks_exact(nw).take(nb).enumerate() {
                let [sx, sx2] = self.tables.masked_sum(mask);
                let m = sx * inv_d;
                let r2 = sx2 * inv_d;
                let v = r2 - m * m;
                sums[0] += m;
                sums[1] += m * m;
                sums[2] += v;
                sums[3] += v * v;
                sums[4] += r2;
                sums[5] += r2 * r2;
                if self.ln {
                    let s = 1.0 / (v + self.eps).sqrt();
                    let s2 = s * s;
                    per[b] = [s, s2, m * s2, 0.0];
                    sums[6] += m * s;
                    sums[7] += m * m * s2;
                }
            }
            if self.ln {
                per[nb..].fill([0.0; 4]);
                accumulate_channels(&words[..nb * nw], nw, &per, &mut mask_tables, &mut channels);
            }
            done += nb;
        }
        for (k, c) in channels.iter().enumerate() {
            let base = SCALARS + 3 * k;
            sums[base] += c[0];
            sums[base + 1] += c[1];
            sums[base + 2] += c[2];
        }
    }
}

/// Adds, for every channel, the per-mask values of the masks (at most 64,
/// mask-major in `words`, `nw` words each) that keep it: transposes each
/// 64×64 block and reads 8 subset sums per channel.
fn accumulate_channels(
    words: &[u64],
    nw: usize,
    per: &[[f64; 4]; 64],
    tables: &mut [[f64; 4]],
    channels: &mut [[f64; 4]],
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2. The same additions in the same order as
        // the portable path, so the same bits.
        unsafe { accumulate_avx2(words, nw, per, tables, channels) };
        return;
    }
    accumulate_body(words, nw, per, tables, channels);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn accumulate_avx2(
    words: &[u64],
    nw: usize,
    per: &[[f64; 4]; 64],
    tables: &mut [[f64; 4]],
    channels: &mut [[f64; 4]],
) {
    accumulate_body(words, nw, per, tables, channels);
}

#[inline(always)]
fn accumulate_body(
    words: &[u64],
    nw: usize,
    per: &[[f64; 4]; 64],
    tables: &mut [[f64; 4]],
    channels: &mut [[f64; 4]],
) {
    build_mask_tables(per, tables);
    let masks = words.len() / nw;
    let mut block = [0u64; 64];
    for (j, group) in channels.chunks_mut(64).enumerate() {
        for (b, row) in block.iter_mut().enumerate() {
            *row = if b < masks { words[b * nw + j] } else { 0 };
        }
        transpose64(&mut block);
        for (c, &w) in group.iter_mut().zip(&block) {
            // Two interleaved partial sums halve the chain of dependent adds.
            let mut acc = [[0.0; 4]; 2];
            for h in 0..8 {
                let e = &tables[h * 256 + ((w >> (8 * h)) & 0xff) as usize];
                for l in 0..4 {
                    acc[h & 1][l] += e[l];
                }
            }
            for l in 0..4 {
                c[l] += acc[0][l] + acc[1][l];
            }
        }
    }
}

/// The bits of a mask's last word that are units (`units % 64` low bits, or
/// all 64).
pub fn tail_mask(units: usize) -> u64 {
    match units % 64 {
        0 => !0,
        r => (1u64 << r) - 1,
    }
}

/// Subset sums of the per-mask values over each group of 8 masks, built by
/// doubling: the entries with highest bit `j` are the entries below `2^j`
/// plus mask `j`'s values. Each entry reads entries finished long before,
/// so the additions are independent (no store-to-load chain).
#[inline(always)]
fn build_mask_tables(per: &[[f64; 4]; 64], tables: &mut [[f64; 4]]) {
    for (h, t) in tables.chunks_exact_mut(256).enumerate() {
        t[0] = [0.0; 4];
        for j in 0..8 {
            let e = per[8 * h + j];
            let (low, high) = t.split_at_mut(1 << j);
            for (dst, src) in high[..1 << j].iter_mut().zip(low.iter()) {
                *dst = [src[0] + e[0], src[1] + e[1], src[2] + e[2], src[3] + e[3]];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::stream;
    use rand::Rng;

    /// The AVX2 build of the channel accumulation and the portable one make
    /// the same additions in the same order: the same bits.
    #[test]
    fn vector_and_portable_accumulation_agree_bit_for_bit() {
        let mut rng = stream(8, 0);
        let nw = 3;
        let words: Vec<u64> = (0..50 * nw).map(|_| rng.next_u64()).collect();
        let mut per = [[0.0; 4]; 64];
        for (i, p) in per.iter_mut().enumerate().take(50) {
            let s = 1.0 / (1.0 + i as f64).sqrt();
            *p = [s, s * s, 0.3 * s * s, 0.0];
        }
        let mut tables = vec![[0.0; 4]; 8 * 256];
        let mut a = vec![[0.0; 4]; 150];
        accumulate_channels(&words, nw, &per, &mut tables, &mut a);
        let mut b = vec![[0.0; 4]; 150];
        accumulate_body(&words, nw, &per, &mut tables, &mut b);
        let bits = |v: &[[f64; 4]]| v.iter().flatten().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&a), bits(&b));
        // And channel 7 got the sum of s over the masks that keep it.
        let direct: f64 = (0..50)
            .filter(|&m| words[m * nw] >> 7 & 1 == 1)
            .map(|m| per[m][0])
            .sum();
        // Two summation orders of at most 50 terms in (0, 1]: each is within
        // (n − 1) ε Σ|t| ≤ 49 · 50 ε of the true sum (Higham), so they differ
        // by at most 2 · 50 · 50 ε.
        assert!((a[7][0] - direct).abs() <= 2.0 * 50.0 * 50.0 * f64::EPSILON);
    }
}
