//! Which keep masks make a one-term site's `y` exactly constant, as bit
//! patterns, so the fast kernels apply the crate's rule for a constant input
//! (`LN_0(y) = β`, `RMS_0(0) = 0`, see [`crate::ops::LayerNorm`]) to exactly
//! the masks the per-element path applies it to.
//!
//! # Derivation
//!
//! ```text
//! y_k = h_k            if unit k is dropped
//!     = h_k ⊕ (v_k ⊘ q) if it is kept            (⊕, ⊘: f64 operations, in the
//!                                                 order Site::draw makes them)
//! 1. y is constant with value c  ⇔  every unit k has its own value equal to c:
//!    dropped and h_k = c, or kept and h_k ⊕ (v_k ⊘ q) = c.
//! 2. Unit 0 has one of two values, so c ∈ {h_0, h_0 ⊕ (v_0 ⊘ q)}: at most two
//!    candidates (one when they coincide).
//! 3. For one candidate c, unit k is
//!      forced kept     if only its kept value equals c,
//!      forced dropped  if only its dropped value equals c,
//!      free            if both do,
//!      impossible      if neither does (then no mask gives c).
//! 4. So the masks giving c are exactly those with
//!      mask & (forced kept | forced dropped) = forced kept,
//!    a test of one AND and one comparison per mask word.
//! 5. Two different candidates never match the same mask (its y has one
//!    value), so "y is constant" is the OR of at most two such tests.
//! ```
//!
//! RMSNorm's rule fires on `y = 0` only: the one candidate `c = 0`.
//!
//! With several dropped terms a unit has `2^J` values and the masks giving a
//! constant are not a product of per-unit choices; there the kernels do not
//! detect constants and rely on their conditioning check instead (see
//! [`super::site`]).

/// The masks (bit `k` of word `k / 64` = unit `k` kept) that give one
/// constant value.
#[derive(Debug, Clone, PartialEq)]
pub struct ConstantPattern {
    care: Vec<u64>,
    want: Vec<u64>,
}

impl ConstantPattern {
    /// Whether `mask` gives this pattern's constant (the tests' reference
    /// for [`Self::matches_in_block`]).
    #[cfg(test)]
    fn matches(&self, mask: &[u64]) -> bool {
        self.matches_words(mask.iter().copied())
    }

    /// Whether mask `b` of a word-major block (word `j` of mask `b` at
    /// `block[64 j + b]`, the layout of [`super::blocks`]) gives
    /// this pattern's constant.
    #[inline(always)]
    pub fn matches_in_block(&self, block: &[u64], b: usize) -> bool {
        self.matches_words(block.iter().skip(b).step_by(64).copied())
    }

    #[inline(always)]
    fn matches_words(&self, mask: impl Iterator<Item = u64>) -> bool {
        mask.zip(&self.care)
            .zip(&self.want)
            .all(|((m, c), w)| m & c == *w)
    }
}

/// The patterns of the masks that make `y_k = h_k + m_k v_k/q` equal to one
/// of `candidates` (all of them when `None`: every constant), computed with
/// the same `f64` operations as [`crate::ops::Site::draw`].
pub fn constant_patterns(
    h: &[f64],
    v: &[f64],
    q: f64,
    candidates: Option<&[f64]>,
) -> Vec<ConstantPattern> {
    let kept = |k: usize| h[k] + v[k] / q;
    let all = [h[0], kept(0)];
    let mut values: Vec<f64> = candidates.map_or(all.to_vec(), |c| c.to_vec());
    values.dedup();
    let words = h.len().div_ceil(64);
    let mut patterns = Vec::new();
    'candidate: for c in values {
        let mut care = vec![0u64; words];
        let mut want = vec![0u64; words];
        for k in 0..h.len() {
            let (dropped_ok, kept_ok) = (h[k] == c, kept(k) == c);
            let bit = 1u64 << (k % 64);
            match (dropped_ok, kept_ok) {
                (false, false) => continue 'candidate,
                (true, false) => care[k / 64] |= bit,
                (false, true) => {
                    care[k / 64] |= bit;
                    want[k / 64] |= bit;
                }
                (true, true) => {}
            }
        }
        patterns.push(ConstantPattern { care, want });
    }
    patterns
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every one of the 2^10 masks: the patterns match exactly the masks
    /// whose `y` (computed here element by element) is constant.
    #[test]
    fn patterns_match_exactly_the_constant_masks() {
        let q = 0.5;
        // Free units (v = 0, h = c), forced-dropped units, and a case where
        // only the all-kept first group gives a constant.
        let cases: [(Vec<f64>, Vec<f64>); 3] = [
            (vec![1.0; 10], [vec![0.0; 4], vec![0.5; 6]].concat()),
            (vec![0.0; 10], [vec![0.0; 4], vec![3.0; 6]].concat()),
            (
                [vec![0.5; 5], vec![1.0; 5]].concat(),
                [vec![0.25; 5], vec![0.0; 5]].concat(),
            ),
        ];
        for (h, v) in cases {
            let patterns = constant_patterns(&h, &v, q, None);
            let mut constant = 0;
            for mask in 0u64..1 << 10 {
                let y: Vec<f64> = (0..10)
                    .map(|k| {
                        if mask >> k & 1 == 1 {
                            h[k] + v[k] / q
                        } else {
                            h[k]
                        }
                    })
                    .collect();
                let is_constant = y.iter().all(|&a| a == y[0]);
                let hits = patterns.iter().filter(|p| p.matches(&[mask])).count();
                assert_eq!(hits, usize::from(is_constant), "mask {mask:b}");
                constant += usize::from(is_constant);
            }
            assert!(constant > 1, "the case must have constant masks");
        }
    }

    /// Two-word masks (d = 100) in a word-major block: mask `b` matches in
    /// the block exactly when its gathered words match.
    #[test]
    fn block_matches_are_the_gathered_matches() {
        let d = 100;
        let h = vec![1.0; d];
        let v: Vec<f64> = (0..d).map(|k| if k % 3 == 0 { 0.0 } else { 0.5 }).collect();
        let patterns = constant_patterns(&h, &v, 0.5, None);
        assert!(!patterns.is_empty());
        let mut block = [0u64; 128];
        // Mask b: units kept at random-looking positions; every fourth mask
        // keeps only the free units (v = 0), a constant y.
        for b in 0..64 {
            let (lo, hi) = if b % 4 == 0 {
                (0x9249_2492_4924_9249u64, 0x9_2492_4924u64 & ((1 << 36) - 1))
            } else {
                let r = (b as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                (r, (r >> 7) & ((1 << 36) - 1))
            };
            block[b] = lo;
            block[64 + b] = hi;
        }
        let mut hits = 0;
        for b in 0..64 {
            for p in &patterns {
                let gathered = p.matches(&[block[b], block[64 + b]]);
                assert_eq!(p.matches_in_block(&block, b), gathered, "mask {b}");
                hits += usize::from(gathered);
            }
        }
        assert!(hits >= 16, "the free-unit masks are constant");
    }
}
