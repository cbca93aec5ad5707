//! Eight xoshiro256++ generators stepped in lock-step, and the bit walk of
//! [`super::BernoulliBits`] run on eight words at once.
//!
//! # Why a second generator
//!
//! Bit masks need several random words per 64 mask bits (about four per
//! word of output at `q = 0.9` with [`super::MaskBits`]), so the generator
//! is a large share of the fast kernels' time: ChaCha8's block function was
//! about an eighth of W1's profile before this module. xoshiro256++
//! (Blackman and Vigna 2021) needs a handful of adds, xors, shifts and
//! rotates per word, and eight of them advanced together are eight-wide
//! integer vector code that the compiler maps to AVX-512 or AVX2 registers.
//! The reference path and every claim keep reading ChaCha8; only the fast
//! kernels read these lanes.
//!
//! # Seeding, and why the chunk contract still holds
//!
//! Each chunk's lanes are seeded from that chunk's ChaCha8 stream
//! `(seed, chunk)`: lane `l` takes the next 32 bytes of the stream as its
//! 256-bit state (`Xoshiro256PlusPlus::from_rng`, which maps the all-zero
//! state, of probability 2^-256, to a fixed non-zero one). So a chunk's
//! random bits are a fixed function of `(seed, chunk)`, as on the reference
//! path, and results stay bit-identical on any number of threads. The eight
//! lanes start at independent uniform points of a period-`2^256 − 1` cycle;
//! a chunk reads at most a few hundred thousand words from each, so the
//! chance that two lanes (or two chunks) overlap is below 10^-60.
//!
//! # The walk on eight words
//!
//! [`walk8`] is the digit walk of [`super::BernoulliBits`] with word `l`
//! reading its random words from lane `l` only. The loop stops when all
//! eight words are decided, so a lane may draw a word its own output no
//! longer needs; that word is simply unused. Whether a lane reads its
//! `i`-th word depends only on words already drawn, so every word a lane
//! uses is fresh: each output bit is Bernoulli(q) exactly, independent of
//! every other, by the same three steps as for the single-word walk. For
//! `q` with a long expansion the eight words (512 lanes) need about
//! `log₂ 512 + 1.3 ≈ 10.3` digits before all are decided.

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::engine::Stream;

/// Number of generators stepped together.
pub const LANES: usize = 8;

/// Eight xoshiro256++ generators; `s[i][l]` is word `i` of lane `l`'s state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Xoshiro8 {
    s: [[u64; LANES]; 4],
}

impl Xoshiro8 {
    /// Eight generators seeded, in lane order, from the next 256 bytes of
    /// `rng` (see the module docs).
    pub fn from_stream(rng: &mut Stream) -> Self {
        let mut states = [[0u8; 32]; LANES];
        for state in states.iter_mut() {
            *state = Xoshiro256PlusPlus::from_rng(rng).state();
        }
        let mut s = [[0u64; LANES]; 4];
        for (i, row) in s.iter_mut().enumerate() {
            for (word, state) in row.iter_mut().zip(&states) {
                let mut b = [0u8; 8];
                b.copy_from_slice(&state[8 * i..8 * i + 8]);
                *word = u64::from_le_bytes(b);
            }
        }
        Xoshiro8 { s }
    }

    /// The next output of every lane: `rotl(s₀ + s₃, 23) + s₀`, then the
    /// xoshiro256 state update (the reference algorithm of Blackman and
    /// Vigna, the same as `rand_xoshiro`'s `Xoshiro256PlusPlus::next_u64`).
    #[inline(always)]
    pub fn next_words(&mut self) -> [u64; LANES] {
        let [s0, s1, s2, s3] = &mut self.s;
        let mut out = [0u64; LANES];
        for l in 0..LANES {
            out[l] = s0[l]
                .wrapping_add(s3[l])
                .rotate_left(23)
                .wrapping_add(s0[l]);
            let t = s1[l] << 17;
            s2[l] ^= s0[l];
            s3[l] ^= s1[l];
            s1[l] ^= s2[l];
            s0[l] ^= s3[l];
            s2[l] ^= t;
            s3[l] = s3[l].rotate_left(45);
        }
        out
    }
}

/// Eight words of independent Bernoulli(q) bits (1 = keep) by the digit
/// walk, `digits` being `q`'s binary digits as all-ones / all-zeros words
/// (empty for `q = 1`: every bit kept, nothing drawn).
#[inline(always)]
pub fn walk8(digits: &[u64], lanes: &mut Xoshiro8) -> [u64; LANES] {
    if digits.is_empty() {
        return [!0; LANES];
    }
    let mut keep = [0u64; LANES];
    let mut open = [!0u64; LANES];
    for &b in digits {
        digit_step(&mut keep, &mut open, &lanes.next_words(), b);
        if open.iter().fold(0, |any, o| any | o) == 0 {
            break;
        }
    }
    keep
}

/// One digit of the walk on eight words: `w` holds each lane's next random
/// bit, `b` the digit (all ones or all zeros). A lane still open keeps if
/// its bit is 0 where the digit is 1, and stays open only while its bit
/// equals the digit.
#[inline(always)]
pub fn digit_step(keep: &mut [u64; LANES], open: &mut [u64; LANES], w: &[u64; LANES], b: u64) {
    for l in 0..LANES {
        keep[l] |= open[l] & !w[l] & b;
        open[l] &= !(w[l] ^ b);
    }
}

/// Fills `out` with Bernoulli(q) words, eight at a time (a last partial
/// group is walked whole and cut).
#[inline(always)]
pub fn fill_walk(digits: &[u64], lanes: &mut Xoshiro8, out: &mut [u64]) {
    let mut groups = out.chunks_exact_mut(LANES);
    for group in &mut groups {
        *whole(group) = walk8(digits, lanes);
    }
    let rest = groups.into_remainder();
    if !rest.is_empty() {
        store_lanes(rest, &walk8(digits, lanes));
    }
}

/// A group of [`LANES`] words as an array (for fixed-size stores that the
/// compiler keeps in vector registers instead of calling `memcpy`).
#[inline(always)]
pub fn whole(group: &mut [u64]) -> &mut [u64; LANES] {
    group.try_into().expect("a whole group of lanes")
}

/// Copies eight lane words into `dst` (at most eight long): a fixed-size
/// copy for a whole group, so no call to `memcpy` in the hot loops.
#[inline(always)]
pub fn store_lanes(dst: &mut [u64], src: &[u64; LANES]) {
    if let Some(whole) = dst.first_chunk_mut::<LANES>() {
        *whole = *src;
    } else {
        let len = dst.len();
        dst.copy_from_slice(&src[..len]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::stream;
    use rand::Rng;

    /// Lane `l` is exactly the `rand_xoshiro` generator seeded from the
    /// stream's `l`-th 32 bytes: the vector code is the named algorithm.
    #[test]
    fn lanes_are_the_reference_xoshiro256plusplus() {
        let mut a = stream(4, 7);
        let mut lanes = Xoshiro8::from_stream(&mut a);
        let mut b = stream(4, 7);
        let mut scalar: Vec<Xoshiro256PlusPlus> = (0..LANES)
            .map(|_| Xoshiro256PlusPlus::from_rng(&mut b))
            .collect();
        // Both consumed the same 256 bytes of the stream.
        assert_eq!(a.next_u64(), b.next_u64());
        for _ in 0..1000 {
            let out = lanes.next_words();
            for (l, g) in scalar.iter_mut().enumerate() {
                assert_eq!(out[l], g.next_u64());
            }
        }
    }

    #[test]
    fn q_one_draws_nothing_and_q_half_keeps_the_zero_bits() {
        let mut lanes = Xoshiro8::from_stream(&mut stream(1, 0));
        let copy = lanes.clone();
        assert_eq!(walk8(&[], &mut lanes), [!0; LANES]);
        assert_eq!(lanes, copy);
        let mut other = copy.clone();
        let w = other.next_words();
        let mut again = copy;
        assert_eq!(walk8(&[!0], &mut again), w.map(|v| !v));
    }
}
