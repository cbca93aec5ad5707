//! Bernoulli(q) masks as bits, exact for every `q`, by walking the binary
//! expansion of `q`.
//!
//! # The algorithm
//!
//! Write the keep probability as a finite binary fraction
//! `q = 0.b₁b₂…b_L` (every `f64` in `(0, 1)` is a dyadic rational, so its
//! expansion ends; `L ≤ 1074`, and `L ≤ 53 + e` for `q ≥ 2^-e`). A lane keeps
//! its unit iff a uniform `U = 0.u₁u₂u₃…` with independent fair bits `uᵢ`
//! satisfies `U < q`. Compare `U` with `q` digit by digit: at the first
//! index `i` where `uᵢ ≠ bᵢ`, `U < q` iff `uᵢ = 0` (and then `bᵢ = 1`).
//! Sixty-four lanes are compared at once, lane `j` reading bit `j` of each
//! random word:
//!
//! ```text
//! keep ← 0, open ← all ones                      (open: lanes not yet decided)
//! for i = 1, 2, …, L:
//!     w ← next random word                        (bit j of w is lane j's uᵢ)
//!     if bᵢ = 1:  keep ← keep | (open & ¬w)       (uᵢ = 0 < 1 = bᵢ: U < q)
//!                 open ← open & w                 (uᵢ = bᵢ = 1: still equal)
//!     if bᵢ = 0:  open ← open & ¬w                (uᵢ = 1 > 0 = bᵢ: U > q, drop;
//!                                                  uᵢ = bᵢ = 0: still equal)
//!     stop as soon as open = 0
//! lanes still open after digit L: U agrees with q on every digit of q, so
//! U ≥ q: they drop (keep stays 0 there).
//! ```
//!
//! # Why it is exact
//!
//! ```text
//! 1. Lane j's bits u₁, u₂, … are bit j of successive words of the stream:
//!    independent fair bits (the stream is modelled as uniform random words).
//!    No bit is ever used by two lanes, so lanes are independent.
//! 2. Stopping early never biases a lane: whether word i+1 is drawn depends
//!    only on words 1..i, so every word a lane reads is fresh; the loop stops
//!    only when every lane is decided (or q has no digits left), and a
//!    decided lane's result does not depend on any later word. So lane j
//!    keeps iff its own bit sequence is below q at the first differing digit.
//! 3. P(lane keeps) = Σ_{i: bᵢ = 1} P(u₁…u_{i−1} = b₁…b_{i−1}, uᵢ = 0)
//!                 = Σ_{i: bᵢ = 1} 2^{−(i−1)} · 2^{−1} = Σ bᵢ 2^{−i} = q.
//! ```
//!
//! The probability is exactly the `f64` value `q` the formulas use (no
//! 2^-53 grid, unlike the reference rule `u ≥ p` with a 53-bit `u`, whose
//! keep probability is `1 − ⌈p·2^53⌉/2^53`). Each lane reads on average
//! 2 digits; a word of 64 lanes needs about `log₂ 64 + 1.3 ≈ 7.3` random
//! words when `q` has many digits, and exactly 1 when `q = 1/2`.

use rand::Rng;

use super::run::Isa;
use crate::error::Error;

/// A source of 64 independent Bernoulli(q) bits per call.
#[derive(Debug, Clone, PartialEq)]
pub struct BernoulliBits {
    /// Binary digits of `q`, each as a word of all ones (digit 1) or all
    /// zeros (digit 0), most significant first. Empty when `q = 1`.
    digits: Vec<u64>,
    q: f64,
}

impl BernoulliBits {
    /// Bits that are 1 with probability exactly `q` (`0 < q ≤ 1`).
    pub fn new(q: f64) -> Result<Self, Error> {
        if !(q > 0.0 && q <= 1.0) {
            return Err(Error::InvalidRate { p: 1.0 - q });
        }
        let mut digits = Vec::new();
        if q < 1.0 {
            // Doubling and subtracting 1 are exact in binary floating point,
            // so this reads off q's digits without rounding.
            let mut r = q;
            while r != 0.0 {
                r *= 2.0;
                if r >= 1.0 {
                    digits.push(!0);
                    r -= 1.0;
                } else {
                    digits.push(0);
                }
            }
        }
        Ok(BernoulliBits { digits, q })
    }

    /// The keep probability.
    pub fn q(&self) -> f64 {
        self.q
    }

    /// Number of binary digits of `q` (0 for `q = 1`).
    pub fn digits(&self) -> usize {
        self.digits.len()
    }

    /// The digits, most significant first, each as a word of all ones
    /// (digit 1) or all zeros (digit 0).
    pub fn digit_words(&self) -> &[u64] {
        &self.digits
    }

    /// Sixty-four independent Bernoulli(q) bits (1 = keep).
    #[inline]
    pub fn word<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        if self.digits.is_empty() {
            return !0;
        }
        let mut keep = 0u64;
        let mut open = !0u64;
        for &b in &self.digits {
            let w = rng.next_u64();
            keep |= open & !w & b;
            open &= !(w ^ b);
            if open == 0 {
                break;
            }
        }
        keep
    }

    /// Fills `words` with Bernoulli(q) bits and clears the bits of a partial
    /// last word beyond `units` (those units do not exist).
    #[inline]
    pub fn fill<R: Rng + ?Sized>(&self, rng: &mut R, words: &mut [u64], units: usize) {
        for w in words.iter_mut() {
            *w = self.word(rng);
        }
        let tail = units % 64;
        if tail != 0
            && let Some(last) = words.last_mut()
        {
            *last &= (1u64 << tail) - 1;
        }
    }
}

/// Transposes a 64×64 bit matrix in place: afterwards bit `j` of `a[i]` is
/// what bit `i` of `a[j]` was. Recursive block swap, as in Warren's
/// *Hacker's Delight* §7-3: stage `J` (32, 16, …, 1) swaps the
/// off-diagonal `J×J` sub-blocks of every `2J×2J` block. Each stage is its
/// own loop over runs of `J` independent word pairs, so the wide stages
/// compile to vector code.
#[inline(always)]
pub fn transpose64(a: &mut [u64; 64]) {
    swap_blocks::<32>(a, 0x0000_0000_FFFF_FFFF);
    swap_blocks::<16>(a, 0x0000_FFFF_0000_FFFF);
    swap_blocks::<8>(a, 0x00FF_00FF_00FF_00FF);
    swap_blocks::<4>(a, 0x0F0F_0F0F_0F0F_0F0F);
    swap_blocks::<2>(a, 0x3333_3333_3333_3333);
    swap_blocks::<1>(a, 0x5555_5555_5555_5555);
}

/// [`transpose64`] on the level `isa`: with AVX-512 and GFNI (and VBMI),
/// by byte shuffles and bit-matrix instructions (see
/// `transpose64_gfni`); otherwise, or on a CPU without them, the portable
/// block swap. Both give the same bits (a transpose is a fixed permutation
/// of bits).
#[inline(always)]
pub fn transpose64_on(isa: Isa, a: &mut [u64; 64]) {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 && has_gfni() {
        // SAFETY: the CPU has the features `transpose64_gfni` enables
        // (checked by `has_gfni`).
        unsafe { transpose64_gfni(a) };
        return;
    }
    let _ = isa;
    transpose64(a);
}

/// Whether the CPU runs [`transpose64_gfni`].
#[cfg(target_arch = "x86_64")]
fn has_gfni() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vbmi")
        && std::arch::is_x86_feature_detected!("gfni")
}

/// `vpermb` indices that transpose the 8×8 bytes of a vector (byte `i` of
/// qword `j` goes to byte `j` of qword `i`); with `reversed`, byte `i` of
/// qword `j` goes to byte `7 − j` of qword `i`.
const fn byte_transpose(reversed: bool) -> [u8; 64] {
    let mut idx = [0u8; 64];
    let mut j = 0;
    while j < 8 {
        let mut i = 0;
        while i < 8 {
            let to = if reversed { 8 * i + 7 - j } else { 8 * i + j };
            idx[to] = (8 * j + i) as u8;
            i += 1;
        }
        j += 1;
    }
    idx
}

/// `vpermt2q` indices of one stage of the 8×8 qword transpose across
/// registers `r_a`, `r_b = r_{a+s}`: the new `r_a` keeps its elements
/// `k` with bit `s` clear and takes `r_b[k − s]` elsewhere; the new `r_b`
/// takes `r_a[k + s]` where bit `s` of `k` is clear and keeps the rest
/// (indices ≥ 8 select `r_b`).
const fn qword_stage(s: usize, high: bool) -> [u64; 8] {
    let mut idx = [0u64; 8];
    let mut k = 0;
    while k < 8 {
        idx[k] = match (high, k & s == 0) {
            (false, true) => k as u64,
            (false, false) => (8 + k - s) as u64,
            (true, true) => (k + s) as u64,
            (true, false) => (8 + k) as u64,
        };
        k += 1;
    }
    idx
}

const BYTES_PLAIN: [u8; 64] = byte_transpose(false);
const BYTES_REVERSED: [u8; 64] = byte_transpose(true);
const QWORD_STAGES: [(usize, [u64; 8], [u64; 8]); 3] = [
    (4, qword_stage(4, false), qword_stage(4, true)),
    (2, qword_stage(2, false), qword_stage(2, true)),
    (1, qword_stage(1, false), qword_stage(1, true)),
];

/// [`transpose64`] with AVX-512 and GFNI. View the matrix as 8×8 blocks
/// `B_IJ` of 8×8 bits: byte `J` of rows `8I … 8I+7`. The transpose moves
/// block `B_IJ`, itself transposed, to block `(J, I)`:
///
/// ```text
/// 1. vector I holds rows 8I…8I+7; one vpermb per vector gathers block
///    B_IJ into qword J (bytes in reverse row order, as step 2 wants);
/// 2. one gf2p8affineqb per vector transposes every qword as an 8×8 bit
///    matrix: with x = 0x8040201008040201 (byte b = bit b alone) and A the
///    qword, byte b of the result has bit i = parity(A.byte[7−i] & 2^b)
///    = bit b of A.byte[7−i] = bit b of row i of the block (rows reversed
///    in step 1): row b of the transposed block;
/// 3. an 8×8 transpose of qwords across the 8 vectors (three stages of
///    vpermt2q pairs) brings the transposed blocks (·, J) into vector J;
/// 4. one vpermb per vector turns its 8 blocks back into rows.
/// ```
///
/// # Safety
///
/// The CPU must have AVX-512 F, BW and VBMI, and GFNI.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi,gfni")]
unsafe fn transpose64_gfni(a: &mut [u64; 64]) {
    use std::arch::x86_64::*;
    // SAFETY (all loads and stores below): each pointer is to 64 bytes
    // inside a 64-byte array or inside `a` (rows 8v … 8v+7); unaligned
    // forms.
    let (plain, reversed) = unsafe {
        (
            _mm512_loadu_si512(BYTES_PLAIN.as_ptr().cast()),
            _mm512_loadu_si512(BYTES_REVERSED.as_ptr().cast()),
        )
    };
    let unit = _mm512_set1_epi64(0x8040_2010_0804_0201_u64 as i64);
    let mut v = [_mm512_setzero_si512(); 8];
    for (i, vi) in v.iter_mut().enumerate() {
        let rows = unsafe { _mm512_loadu_si512(a.as_ptr().add(8 * i).cast()) };
        let blocks = _mm512_permutexvar_epi8(reversed, rows);
        *vi = _mm512_gf2p8affine_epi64_epi8::<0>(unit, blocks);
    }
    for (s, low, high) in QWORD_STAGES {
        let (low, high) = unsafe {
            (
                _mm512_loadu_si512(low.as_ptr().cast()),
                _mm512_loadu_si512(high.as_ptr().cast()),
            )
        };
        for r in 0..8 {
            if r & s == 0 {
                let (x, y) = (v[r], v[r + s]);
                v[r] = _mm512_permutex2var_epi64(x, low, y);
                v[r + s] = _mm512_permutex2var_epi64(x, high, y);
            }
        }
    }
    for (j, vj) in v.iter().enumerate() {
        let rows = _mm512_permutexvar_epi8(plain, *vj);
        unsafe { _mm512_storeu_si512(a.as_mut_ptr().add(8 * j).cast(), rows) };
    }
}

/// One stage of [`transpose64`]: in rows `k` (with bit `J` of `k` clear)
/// and `k + J`, exchanges the high `J` bits of each `2J`-bit field of row `k`
/// (`m` selects the low ones) with the low `J` bits of row `k + J`.
#[inline(always)]
fn swap_blocks<const J: usize>(a: &mut [u64; 64], m: u64) {
    for block in a.chunks_exact_mut(2 * J) {
        let (low, high) = block.split_at_mut(J);
        for (x, y) in low.iter_mut().zip(high.iter_mut()) {
            let t = ((*x >> J) ^ *y) & m;
            *x ^= t << J;
            *y ^= t;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::stream;

    #[test]
    fn digits_reconstruct_q_exactly() {
        for q in [0.9, 0.5, 0.1, 1.0 / 3.0, 0.75, 1e-300, 1.0 - f64::EPSILON] {
            let bits = BernoulliBits::new(q).unwrap();
            // Σ bᵢ 2^-i, summed from the last digit up: every partial sum is a
            // dyadic fraction with at most 53 significant bits, so exact.
            let mut back = 0.0;
            for &b in bits.digits.iter().rev() {
                back = (back + if b != 0 { 1.0 } else { 0.0 }) / 2.0;
            }
            assert_eq!(back, q, "q = {q}");
        }
        assert_eq!(BernoulliBits::new(0.5).unwrap().digits(), 1);
        assert_eq!(BernoulliBits::new(1.0).unwrap().digits(), 0);
    }

    #[test]
    fn rejects_q_outside_0_1() {
        for q in [0.0, -0.5, 1.5, f64::NAN] {
            assert!(BernoulliBits::new(q).is_err(), "q = {q}");
        }
    }

    #[test]
    fn q_one_keeps_everything_and_draws_nothing() {
        let bits = BernoulliBits::new(1.0).unwrap();
        let mut a = stream(3, 0);
        let b = a.clone();
        assert_eq!(bits.word(&mut a), !0);
        assert_eq!(a, b);
    }

    #[test]
    fn half_uses_one_word_and_keeps_its_zero_bits() {
        let bits = BernoulliBits::new(0.5).unwrap();
        let mut a = stream(3, 0);
        let mut b = stream(3, 0);
        assert_eq!(bits.word(&mut a), !b.next_u64());
    }

    #[test]
    fn fill_clears_the_tail() {
        let bits = BernoulliBits::new(1.0).unwrap();
        let mut words = [0u64; 2];
        bits.fill(&mut stream(1, 0), &mut words, 70);
        assert_eq!(words, [!0, 0b11_1111]);
    }

    #[test]
    fn transpose_matches_the_definition() {
        let mut rng = stream(9, 0);
        let mut a = [0u64; 64];
        for w in a.iter_mut() {
            *w = rng.next_u64();
        }
        let before = a;
        for isa in [Isa::Portable, Isa::Avx512] {
            let mut a = before;
            transpose64_on(isa, &mut a);
            for (i, row) in a.iter().enumerate() {
                for (j, col) in before.iter().enumerate() {
                    assert_eq!((row >> j) & 1, (col >> i) & 1, "{isa:?} {i},{j}");
                }
            }
        }
    }
}
