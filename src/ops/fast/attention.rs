//! The attention-row kernel: a softmax row `a` over `T` keys, dropped after
//! the softmax (`b_i = m_i a_i / q`), with the row sum `R = Σ b_i` and the
//! output `o = Σ b_i v_i` for scalar values `v`.
//!
//! Both are masked sums of fixed columns, `a/q` and `a v/q`: one two-column
//! table look-up per 8 keys. Per row the kernel adds `D = R − Σa`, `D²`,
//! `D⁴`, `o`, `o²` to its sums. Because `E[R] = Σ_i a_i` exactly,
//! `E[D²] = Var R` exactly, so the variance is a plain mean with a plain
//! standard error (from `D⁴`).

use super::compact::MaskBits;
use super::lanes::Xoshiro8;
use super::norm::tail_mask;
use super::run::{ChunkKernel, Isa, estimate_from_sums, run_chunks};
use super::tables::SubsetTables;
use crate::engine::{Budget, Stream};
use crate::error::{Error, check_finite_vec, check_len};
use crate::ops::Rate;
use crate::stats::Estimate;

/// Estimates for one attention row under dropout.
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionEstimates {
    /// `E[R]`.
    pub row_sum: Estimate,
    /// `Var R`, estimated as the mean of `(R − Σa)²`.
    pub row_sum_var: Estimate,
    /// `E[o]`.
    pub output: Estimate,
}

/// The fast kernel for attention rows.
#[derive(Debug, Clone)]
pub struct FastAttention {
    keys: usize,
    total: f64,
    bits: MaskBits,
    tables: SubsetTables<2>,
}

impl FastAttention {
    /// The kernel for row `a`, values `v` (same length) and drop rate `p`.
    pub fn new(a: &[f64], v: &[f64], p: f64) -> Result<Self, Error> {
        check_finite_vec("a", a)?;
        check_finite_vec("v", v)?;
        check_len("v", v, a.len())?;
        let rate = Rate::new(p)?;
        let scaled: Vec<f64> = a.iter().map(|x| x / rate.q()).collect();
        let weighted: Vec<f64> = scaled.iter().zip(v).map(|(s, v)| s * v).collect();
        Ok(FastAttention {
            keys: a.len(),
            total: a.iter().sum(),
            bits: MaskBits::new(rate.q())?,
            tables: SubsetTables::new([&scaled, &weighted]),
        })
    }

    /// Runs `budget.samples` rows.
    pub fn estimate(&self, budget: Budget) -> Result<AttentionEstimates, Error> {
        let s = run_chunks(self, budget)?;
        let n = budget.samples;
        let mut row_sum = estimate_from_sums(s[0], s[1], n);
        row_sum.value += self.total;
        Ok(AttentionEstimates {
            row_sum,
            row_sum_var: estimate_from_sums(s[1], s[2], n),
            output: estimate_from_sums(s[3], s[4], n),
        })
    }
}

impl ChunkKernel for FastAttention {
    fn width(&self) -> usize {
        5
    }

    #[inline(always)]
    fn chunk(&self, rng: &mut Stream, draws: usize, sums: &mut [f64]) {
        self.chunk_on(Isa::Portable, rng, draws, sums);
    }

    /// Rows come 64 at a time, word-major (word `j` of row `b` is
    /// `words[64 j + b]`), and their two masked sums by
    /// [`SubsetTables::block_sums`]; rows past the last draw are generated
    /// and ignored.
    #[inline(always)]
    fn chunk_on(&self, isa: Isa, rng: &mut Stream, draws: usize, sums: &mut [f64]) {
        let nw = self.keys.div_ceil(64);
        let mut words = vec![0u64; 64 * nw];
        let mut scratch = Vec::new();
        let mut lanes = Xoshiro8::from_stream(rng);
        let tail = tail_mask(self.keys);
        let mut per_row = [[0.0f64; 64]; 2];
        let mut done = 0;
        while done < draws {
            let nb = (draws - done).min(64);
            self.bits.fill(&mut lanes, &mut words, &mut scratch);
            for w in &mut words[64 * (nw - 1)..] {
                *w &= tail;
            }
            self.tables.block_sums(isa, &words, &mut per_row);
            for (&r, &o) in per_row[0].iter().zip(&per_row[1]).take(nb) {
                let dev = r - self.total;
                let dev2 = dev * dev;
                sums[0] += dev;
                sums[1] += dev2;
                sums[2] += dev2 * dev2;
                sums[3] += o;
                sums[4] += o * o;
            }
            done += nb;
        }
    }
}
