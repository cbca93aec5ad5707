//! Bernoulli(q) words in bulk with *compaction*: walk the first few digits
//! of `q` on every word, then spend random words only on the lanes still
//! undecided.
//!
//! # Why
//!
//! The digit walk ([`super::lanes::walk8`]) decides most lanes within two
//! digits, but a group of 512 lanes runs until its slowest lane is decided,
//! about `log₂ 512 + 1.3 ≈ 10.3` digits for a `q` with a long expansion. Most
//! of those steps serve a handful of lanes. Compaction stops every word
//! after `K` digits and gathers the open lanes of a whole batch of words,
//! so the long tail is walked once per batch, on `2^-K` as many words.
//!
//! # The algorithm (`K = min(3, digits of q)`)
//!
//! ```text
//! 1. Every word walks the first K digits of q (eight words at a time, no
//!    early exit): keep_w, and open_w = the lanes whose K bits equal
//!    b₁…b_K (2^-K of them on average).
//! 2. P = Σ_w popcount(open_w) lanes are open. Draw ⌈P/64⌉ words of
//!    Bernoulli(q_K) bits, q_K = frac(2^K q) = 0.b_{K+1}b_{K+2}…, by the
//!    plain walk.
//! 3. Read those bits as one stream, in order: word w takes the next
//!    popcount(open_w) bits and deposits them on its open lanes,
//!    keep_w |= pdep(bits, open_w).
//! ```
//!
//! # Why it is exact
//!
//! ```text
//! An open lane has matched b₁…b_K; whether U < q then depends only on the
//! rest of its bits, U' = 0.u_{K+1}…, uniform and independent of the first
//! K: it keeps iff U' < q_K. Step 3 gives it one Bernoulli(q_K) bit, exact
//! (the plain walk is exact), made from random words drawn after step 1's
//! and used by no other lane; which bit a lane gets depends only on step
//! 1's words, which are independent of step 2's. So
//!     P(keep) = Σ_{i ≤ K, bᵢ = 1} 2^-i + 2^-K q_K = Σ_i bᵢ 2^-i = q,
//! and lanes stay independent. Unused bits of the last tail word are
//! dropped. When q has at most K digits the walk of step 1 is already
//! complete (open lanes drop) and steps 2-3 are skipped.
//! ```
//!
//! Cost per eight words, for `q` with a long expansion: 3 head steps, about
//! `8 · 2^-3 / 8 · 10.3 ≈ 1.3` tail steps, and eight bit deposits, against
//! about 10.3 steps for the plain walk alone.

use super::bits::BernoulliBits;
use super::lanes::{LANES, Xoshiro8, digit_step, fill_walk, store_lanes, whole};
use crate::error::Error;

/// How many leading digits of `q` every word walks before compaction.
const HEAD: usize = 3;

/// Bernoulli(q) words in bulk, by walking `q`'s first digits and compacting
/// the open lanes (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct MaskBits {
    q: f64,
    /// The first `min(HEAD, digits)` digits, as words.
    head: Vec<u64>,
    /// The digits after the head (of `frac(2^K q)`), when there are any.
    tail: Option<BernoulliBits>,
    bmi2: bool,
}

impl MaskBits {
    /// Bits that are 1 with probability exactly `q` (`0 < q ≤ 1`).
    pub fn new(q: f64) -> Result<Self, Error> {
        let full = BernoulliBits::new(q)?;
        let digits = full.digit_words();
        let k = digits.len().min(HEAD);
        let tail = if digits.len() > k {
            // 2^K q is exact, and so is its fractional part; it is > 0
            // because q has digits after the K-th.
            let scaled = q * (1u64 << k) as f64;
            Some(BernoulliBits::new(scaled - scaled.floor())?)
        } else {
            None
        };
        Ok(MaskBits {
            q,
            head: digits[..k].to_vec(),
            tail,
            bmi2: has_bmi2(),
        })
    }

    /// The keep probability.
    pub fn q(&self) -> f64 {
        self.q
    }

    /// Step 1 on eight words: the first `K` digits, no early exit; returns
    /// `(keep, open)`.
    #[inline(always)]
    fn head_step(&self, lanes: &mut Xoshiro8) -> ([u64; LANES], [u64; LANES]) {
        let mut keep = [0u64; LANES];
        let mut open = [!0u64; LANES];
        for &b in &self.head {
            digit_step(&mut keep, &mut open, &lanes.next_words(), b);
        }
        (keep, open)
    }

    /// Uses the portable bit deposit even where the CPU has BMI2 (for
    /// testing that both give the same bits).
    pub fn portable(mut self) -> Self {
        self.bmi2 = false;
        self
    }

    /// Fills `out` with independent Bernoulli(q) words drawn from `lanes`,
    /// using `scratch` (resized as needed, so it can be kept across calls).
    #[inline(always)]
    pub fn fill(&self, lanes: &mut Xoshiro8, out: &mut [u64], scratch: &mut Vec<u64>) {
        let Some(tail) = &self.tail else {
            // q = 1 (no digits) or q has at most HEAD digits: the plain walk.
            fill_walk(&self.head, lanes, out);
            return;
        };
        // `open` (one word per output word), then the tail bits (at most one
        // per output word, plus two words of padding for `deposit`). Stale
        // words from an earlier call may follow the tail bits: `deposit`
        // reads them but never uses them, so they are not cleared.
        if scratch.len() < 2 * out.len() + 2 {
            scratch.resize(2 * out.len() + 2, 0);
        }
        let (open, bits) = scratch[..2 * out.len() + 2].split_at_mut(out.len());
        let mut need = 0usize;
        let mut keep_groups = out.chunks_exact_mut(LANES);
        let mut open_groups = open.chunks_exact_mut(LANES);
        for (keep_group, open_group) in (&mut keep_groups).zip(&mut open_groups) {
            let (keep, op) = self.head_step(lanes);
            *whole(keep_group) = keep;
            *whole(open_group) = op;
            need += op.iter().map(|o| o.count_ones() as usize).sum::<usize>();
        }
        let (keep_rest, open_rest) = (keep_groups.into_remainder(), open_groups.into_remainder());
        if !keep_rest.is_empty() {
            let (keep, op) = self.head_step(lanes);
            store_lanes(keep_rest, &keep);
            store_lanes(open_rest, &op);
            need += op[..open_rest.len()]
                .iter()
                .map(|o| o.count_ones() as usize)
                .sum::<usize>();
        }
        let words = need.div_ceil(64);
        fill_walk(tail.digit_words(), lanes, &mut bits[..words]);
        #[cfg(target_arch = "x86_64")]
        if self.bmi2 {
            // SAFETY: the CPU has BMI2 and POPCNT (checked at construction).
            unsafe { deposit_bmi2(bits, out, open) };
            return;
        }
        deposit(bits, out, open, soft_pdep);
    }
}

/// Step 3: deposits the tail bits, read as one stream, on the open lanes.
/// Word `k` reads the 64 stream bits from its position on (a funnel shift
/// of two words); `pdep` uses only the lowest `popcount(open_k)` of them.
#[inline(always)]
fn deposit(bits: &[u64], out: &mut [u64], open: &[u64], pdep: impl Fn(u64, u64) -> u64) {
    let mut pos = 0usize;
    for (k, &o) in out.iter_mut().zip(open) {
        let (i, off) = (pos >> 6, (pos & 63) as u32);
        // `bits[i + 1]` exists: `pos ≤ need ≤ 64 · out.len()`, so
        // `i ≤ out.len()`, and `bits` has `out.len() + 2` words.
        let pair = u128::from(bits[i]) | (u128::from(bits[i + 1]) << 64);
        *k |= pdep((pair >> off) as u64, o);
        pos += o.count_ones() as usize;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "bmi2,popcnt")]
unsafe fn deposit_bmi2(bits: &[u64], out: &mut [u64], open: &[u64]) {
    // The closure inherits this function's `bmi2` feature, and the
    // position count its `popcnt` (without it, `count_ones` is a dozen
    // shifts and adds per word).
    deposit(bits, out, open, |s, m| std::arch::x86_64::_pdep_u64(s, m));
}

fn has_bmi2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("bmi2") && std::arch::is_x86_feature_detected!("popcnt")
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
mod tests {
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
            let mut a = Xoshiro8::from_stream(&mut stream(5, 1));
            let mut b = a.clone();
            let (mut oa, mut ob) = (vec![0u64; 999], vec![0u64; 999]);
            let mut scratch = Vec::new();
            fast.fill(&mut a, &mut oa, &mut scratch);
            soft.fill(&mut b, &mut ob, &mut scratch);
            assert_eq!(oa, ob, "q = {q}");
            assert_eq!(a, b);
        }
    }

    #[test]
    fn head_and_tail_split_q_exactly() {
        // 0.9 = 0.111 0011 0011…: head 111, tail frac(8 · 0.9) = 0.2.
        let m = MaskBits::new(0.9).unwrap();
        assert_eq!(m.head, vec![!0; 3]);
        assert_eq!(m.tail.as_ref().map(|t| t.q()), Some(8.0 * 0.9 - 7.0));
        // 0.75 = 0.11: two digits, no tail.
        let m = MaskBits::new(0.75).unwrap();
        assert_eq!(m.head, vec![!0, !0]);
        assert!(m.tail.is_none());
    }
}
