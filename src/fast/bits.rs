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
/// what bit `i` of `a[j]` was. Recursive block swap (six stages of 32 word
/// pairs), as in Warren's *Hacker's Delight* §7-3.
pub fn transpose64(a: &mut [u64; 64]) {
    let mut j = 32;
    let mut m: u64 = 0x0000_0000_FFFF_FFFF;
    while j != 0 {
        let mut k = 0;
        while k < 64 {
            let t = ((a[k] >> j) ^ a[k + j]) & m;
            a[k] ^= t << j;
            a[k + j] ^= t;
            k = (k + j + 1) & !j;
        }
        j >>= 1;
        m ^= m << j;
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
        transpose64(&mut a);
        for (i, row) in a.iter().enumerate() {
            for (j, col) in before.iter().enumerate() {
                assert_eq!((row >> j) & 1, (col >> i) & 1, "{i},{j}");
            }
        }
    }
}

/// Random words read from a stream in bulk (2 KiB at a time), so the bit
/// walk pays no per-word bookkeeping of the generator. Words are read
/// little-endian, the same on every platform.
pub struct WordSource<'a, R: Rng + ?Sized> {
    rng: &'a mut R,
    buf: [u8; 2048],
    pos: usize,
}

impl<'a, R: Rng + ?Sized> WordSource<'a, R> {
    /// A source over `rng` (nothing is read until the first word).
    pub fn new(rng: &'a mut R) -> Self {
        WordSource {
            rng,
            buf: [0; 2048],
            pos: 2048,
        }
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_word(&mut self) -> u64 {
        if self.pos == self.buf.len() {
            self.rng.fill_bytes(&mut self.buf);
            self.pos = 0;
        }
        let mut w = [0u8; 8];
        w.copy_from_slice(&self.buf[self.pos..self.pos + 8]);
        self.pos += 8;
        u64::from_le_bytes(w)
    }
}

/// How many leading digits of `q` every lane walks before the open lanes
/// are compacted.
const HEAD: usize = 2;

/// Tail words at or below this count are drawn by the plain walk.
const PLAIN_TAIL: usize = 2;

/// Bernoulli(q) words in bulk with *compaction*: about
/// `2 (1 + 1/4 + 1/16 + …) ≈ 2.7` random words per 64 lanes instead of
/// about 7.3 for the plain walk of [`BernoulliBits`].
///
/// # The algorithm
///
/// ```text
/// 1. Every word walks the first K = 2 digits of q (as BernoulliBits, no
///    early exit): keep_w and open_w (the lanes whose two bits equal b₁b₂;
///    a quarter of them on average).
/// 2. Count the open lanes of all words, P = Σ_w popcount(open_w), and draw
///    ⌈P/64⌉ words of Bernoulli(q_K) bits, q_K = frac(2^K q) = 0.b_{K+1}b_{K+2}…,
///    by this same algorithm (recursively; the plain walk once at most
///    PLAIN_TAIL words are needed).
/// 3. Read those bits as one stream, in order: word w takes the next
///    popcount(open_w) bits and deposits them on its open lanes,
///    keep_w |= pdep(bits, open_w).
/// ```
///
/// # Why it is exact
///
/// ```text
/// An open lane has matched b₁…b_K; its comparison U < q then depends only on
/// the rest of its bits, U' = 0.u_{K+1}…, uniform and independent of the first
/// K: it keeps iff U' < q_K. Step 3 gives it one Bernoulli(q_K) bit, exact by
/// induction on the recursion (the plain walk is exact, see BernoulliBits),
/// made from random words drawn after step 1's and used by no other lane;
/// which bit a lane gets depends only on step 1's words, which are
/// independent of step 2's. So
///     P(keep) = Σ_{i ≤ K, bᵢ = 1} 2^-i + 2^-K q_K = Σ_i bᵢ 2^-i = q,
/// and lanes stay independent. Unused bits of the last tail word are dropped.
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct MaskBits {
    q: f64,
    /// The whole expansion (the plain walk).
    full: BernoulliBits,
    /// Bits for the lanes still open after K digits, when q has more than K.
    tail: Option<Box<MaskBits>>,
    bmi2: bool,
}

impl MaskBits {
    /// Bits that are 1 with probability exactly `q` (`0 < q ≤ 1`).
    pub fn new(q: f64) -> Result<Self, Error> {
        let full = BernoulliBits::new(q)?;
        let tail = if full.digits() > HEAD {
            // 2^K q is exact, and so is its fractional part; it is > 0
            // because q has digits after the K-th.
            let scaled = q * (1u64 << HEAD) as f64;
            Some(Box::new(MaskBits::new(scaled - scaled.floor())?))
        } else {
            None
        };
        Ok(MaskBits {
            q,
            full,
            tail,
            bmi2: has_bmi2(),
        })
    }

    /// The keep probability.
    pub fn q(&self) -> f64 {
        self.q
    }

    /// Uses the portable bit deposit even where the CPU has BMI2 (for
    /// testing that both give the same bits).
    pub fn portable(mut self) -> Self {
        self.bmi2 = false;
        if let Some(t) = self.tail.take() {
            self.tail = Some(Box::new(t.portable()));
        }
        self
    }

    /// Fills `out` with independent Bernoulli(q) words, using `open` (same
    /// length) as scratch.
    pub fn fill<R: Rng + ?Sized>(
        &self,
        src: &mut WordSource<'_, R>,
        out: &mut [u64],
        open: &mut [u64],
    ) {
        let Some(tail) = &self.tail else {
            for w in out.iter_mut() {
                *w = walk(&self.full.digits, || src.next_word());
            }
            return;
        };
        let b = &self.full.digits;
        let mut need = 0usize;
        for (k, o) in out.iter_mut().zip(open.iter_mut()) {
            let mut keep = 0u64;
            let mut op = !0u64;
            for &bi in &b[..HEAD] {
                let w = src.next_word();
                keep |= op & !w & bi;
                op &= !(w ^ bi);
            }
            *k = keep;
            *o = op;
            need += op.count_ones() as usize;
        }
        let words = need.div_ceil(64);
        // One zero word of padding for the two-word window below.
        let mut bits = vec![0u64; words + 1];
        if words <= PLAIN_TAIL {
            for w in &mut bits[..words] {
                *w = walk(&tail.full.digits, || src.next_word());
            }
        } else {
            let mut scratch = vec![0u64; words];
            tail.fill(src, &mut bits[..words], &mut scratch);
        }
        #[cfg(target_arch = "x86_64")]
        if self.bmi2 {
            // SAFETY: the CPU has BMI2 (checked at construction).
            unsafe { deposit_bmi2(&bits, out, open) };
            return;
        }
        deposit(&bits, out, open, soft_pdep);
    }
}

#[inline(always)]
fn walk(digits: &[u64], mut next: impl FnMut() -> u64) -> u64 {
    if digits.is_empty() {
        return !0;
    }
    let mut keep = 0u64;
    let mut open = !0u64;
    for &b in digits {
        let w = next();
        keep |= open & !w & b;
        open &= !(w ^ b);
        if open == 0 {
            break;
        }
    }
    keep
}

/// Step 3 of [`MaskBits`]: deposits the tail bits, read as one stream, on
/// the open lanes.
#[inline(always)]
fn deposit(bits: &[u64], out: &mut [u64], open: &[u64], pdep: impl Fn(u64, u64) -> u64) {
    let mut pos = 0usize;
    for (k, &o) in out.iter_mut().zip(open) {
        if o == 0 {
            continue;
        }
        let (i, off) = (pos >> 6, (pos & 63) as u32);
        // `bits[i + 1]` exists: a word with open lanes starts before the
        // last needed bit, and one padding word follows.
        let hi = if off == 0 {
            0
        } else {
            bits[i + 1] << (64 - off)
        };
        *k |= pdep((bits[i] >> off) | hi, o);
        pos += o.count_ones() as usize;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "bmi2")]
unsafe fn deposit_bmi2(bits: &[u64], out: &mut [u64], open: &[u64]) {
    // The closure inherits this function's `bmi2` feature.
    deposit(bits, out, open, |s, m| std::arch::x86_64::_pdep_u64(s, m));
}

fn has_bmi2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("bmi2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Parallel bit deposit in portable code: the low bits of `src`, in order,
/// placed on the set bits of `mask`.
#[inline]
pub fn soft_pdep(mut src: u64, mut mask: u64) -> u64 {
    let mut out = 0u64;
    while mask != 0 {
        let low = mask & mask.wrapping_neg();
        if src & 1 == 1 {
            out |= low;
        }
        src >>= 1;
        mask &= mask - 1;
    }
    out
}

#[cfg(test)]
mod mask_tests {
    use super::*;
    use crate::engine::stream;

    #[test]
    fn soft_pdep_matches_its_definition() {
        assert_eq!(soft_pdep(0b101, 0b1111_0000), 0b0101_0000);
        assert_eq!(soft_pdep(!0, 0x8000_0000_0000_0001), 0x8000_0000_0000_0001);
        assert_eq!(
            soft_pdep(0b10, 0x8000_0000_0000_0001),
            0x8000_0000_0000_0000
        );
    }

    #[test]
    fn hardware_and_portable_deposit_give_the_same_bits() {
        for q in [0.9, 0.6, 0.5, 0.25, 1.0] {
            let fast = MaskBits::new(q).unwrap();
            let soft = fast.clone().portable();
            let (mut a, mut b) = (stream(5, 1), stream(5, 1));
            let (mut wa, mut wb) = (WordSource::new(&mut a), WordSource::new(&mut b));
            let (mut oa, mut ob) = (vec![0u64; 999], vec![0u64; 999]);
            let mut scratch = vec![0u64; 999];
            fast.fill(&mut wa, &mut oa, &mut scratch);
            soft.fill(&mut wb, &mut ob, &mut scratch);
            assert_eq!(oa, ob, "q = {q}");
            assert_eq!(wa.next_word(), wb.next_word());
        }
    }
}
