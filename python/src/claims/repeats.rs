//! `semantics.masks_never_repeat`: the keep masks of consecutive training
//! rows never recur, as they do under a generator with a short period or
//! one re-seeded alike on each call.
//!
//! # The rule
//!
//! Read each training row's keep mask off its output on the units that
//! carry one (`x_k` of normal magnitude, see [`super::rules`]): `k` bits a
//! row. A *window* is `w` consecutive rows, `B = w k` bits. The rule: no
//! window of the `N` rows equals another window that does not overlap it.
//!
//! # Its size, exactly bounded
//!
//! Under a correct dropout the bits are independent, each 1 with
//! probability `q`. Two non-overlapping windows are disjoint sets of bits,
//! so they are equal with probability `(p² + q²)^B` exactly (each bit pair
//! agrees with `p² + q²`). There are fewer than `N²/2` pairs of windows,
//! so by the union bound
//!
//! ```text
//! P(some pair equal) ≤ (N²/2)·(p² + q²)^B,
//! ```
//!
//! and choosing `B ≥ (ln(N²/2) + ln(1/α)) / (−ln(p² + q²))` makes the rule's
//! size at most the per-assertion `α` with no approximation (at `p = 0.1`,
//! `N = 20 000`, `α = 10⁻¹⁰`: `B = 212` bits, 36 rows of 6 bits).
//!
//! # What it catches
//!
//! A generator whose stream repeats with period `P` rows (an LCG mod 2¹⁶
//! drawing one number per unit of a row of `d` units: `P = 2¹⁶/d`) makes
//! the window at row `r` equal the one at `r + P` for every `r`: the rule
//! fails whenever `N ≥ P + w`. A generator re-seeded alike on every call
//! repeats its first call's rows in each later call. Before this rule an
//! LCG mod 2¹⁶ was caught in 7 of 10 runs, by `dropout.kept_count` alone
//! (issue 23).

use std::collections::HashMap;

use dropmc::stats::assertion_alpha;

use dropmc::ops::Rate;

use super::{PyClaim, RULE_SAMPLES, Setup, rule_claim};
use crate::forward::PyForward;

/// Rows per window for `n` rows of `bits_per_row` informative bits at keep
/// probability `q` (drop `p`): the smallest `w` with `w·k ≥ B` (module
/// docs); `None` when a row carries no bit or the masks carry no entropy
/// (`p = 0`).
pub(super) fn window_rows(n: u64, bits_per_row: usize, p: f64) -> Option<usize> {
    let q = 1.0 - p;
    let agree = p * p + q * q;
    if bits_per_row == 0 || agree >= 1.0 {
        return None;
    }
    let pairs = (n as f64).powi(2) / 2.0;
    let bits = (pairs.ln() - assertion_alpha().ln()) / -agree.ln();
    Some((bits / bits_per_row as f64).ceil().max(1.0) as usize)
}

/// The starts of the windows that equal an earlier, non-overlapping one,
/// for rows of keep bits `rows` (one `Vec<bool>` a row) and windows of `w`
/// rows.
///
/// Windows are hashed (a polynomial rolling hash over per-row hashes) and
/// an equal hash is confirmed bit for bit, so a hash collision cannot count
/// as a repeat. Each window is compared with its earliest candidates first
/// and counted once, which keeps the work linear in `N` even when every
/// window repeats.
fn repeated_windows(rows: &[Vec<bool>], w: usize) -> usize {
    if rows.len() < 2 * w {
        return 0;
    }
    const MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;
    let row_hash: Vec<u64> = rows
        .iter()
        .map(|bits| {
            bits.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
                (h ^ u64::from(b) ^ 0x100).wrapping_mul(0x0100_0000_01b3)
            })
        })
        .collect();
    // MULTIPLIER^w, to drop the row leaving the window.
    let leaving = (0..w).fold(1u64, |m, _| m.wrapping_mul(MULTIPLIER));
    let mut hash = row_hash[..w]
        .iter()
        .fold(0u64, |h, &r| h.wrapping_mul(MULTIPLIER).wrapping_add(r));
    let mut seen: HashMap<u64, Vec<usize>> = HashMap::new();
    let mut repeats = 0;
    for start in 0..=rows.len() - w {
        if start > 0 {
            hash = hash
                .wrapping_mul(MULTIPLIER)
                .wrapping_add(row_hash[start + w - 1])
                .wrapping_sub(leaving.wrapping_mul(row_hash[start - 1]));
        }
        let candidates = seen.entry(hash).or_default();
        let equal = |earlier: usize| rows[earlier..earlier + w] == rows[start..start + w];
        if candidates
            .iter()
            .take_while(|&&earlier| earlier + w <= start)
            .any(|&earlier| equal(earlier))
        {
            repeats += 1;
        }
        candidates.push(start);
    }
    repeats
}

/// Where a repeat rule reads its rows: the forward (whose calls make the
/// rows), its rate, the claim's id and its rows before the user's cap.
pub(crate) struct RowSource<'a> {
    pub id: &'static str,
    pub forward: &'a PyForward,
    pub rate: Rate,
    /// Rows at the default budget ([`RULE_SAMPLES`] in the large calls).
    pub rows: u64,
    /// The user's `samples` cap (`None`: none).
    pub cap: Option<u64>,
}

/// `semantics.masks_never_repeat` on the semantics input `x` (already in
/// the dtype), or the reason it cannot run at this budget.
pub(super) fn repeat_claim<'a>(
    setup: &Setup<'a>,
    x: Vec<f64>,
    informative: Vec<bool>,
) -> Result<PyClaim<'a>, String> {
    let source = RowSource {
        id: "semantics.masks_never_repeat",
        forward: setup.forward,
        rate: setup.rate,
        rows: RULE_SAMPLES,
        cap: setup.samples,
    };
    repeat_rule(source, x, informative)
}

/// The repeat rule on the rows `source` serves for input `x`: no window of
/// consecutive rows' keep masks (on the `informative` units) equals an
/// earlier, non-overlapping one. Whether two windows come from one call
/// or from two is the forward's batching: the large calls put thousands of
/// rows in a call, one-row calls ([`crate::small_calls`]) one, so there
/// every window spans calls and a mask reused from call to call recurs.
pub(crate) fn repeat_rule<'a>(
    source: RowSource<'a>,
    x: Vec<f64>,
    informative: Vec<bool>,
) -> Result<PyClaim<'a>, String> {
    let RowSource {
        id,
        forward,
        rate,
        rows,
        cap,
    } = source;
    let n = cap.map_or(rows, |cap| rows.min(cap.max(2)));
    let bits = informative.iter().filter(|&&b| b).count();
    let Some(w) = window_rows(n, bits, rate.p()) else {
        return Err(format!(
            "needs p > 0 and an input with a unit of normal magnitude (got p = {}, {bits} such units)",
            rate.p()
        ));
    };
    if n < 2 * w as u64 {
        return Err(format!(
            "needs at least {} rows to compare two windows of {w} rows (samples = {n})",
            2 * w
        ));
    }
    let mut claim = rule_claim(
        id,
        "no window of consecutive training rows' keep masks recurs: 0 repeats \
         (size <= (N^2/2)(p^2+q^2)^bits <= alpha)",
        Some(format!(
            "windows of {w} rows x {bits} mask bits, rows of {} per call; detects a generator \
             period up to N - {w} rows",
            forward.call_rows(x.len())
        )),
        move |budget| {
            let mut rows = Vec::with_capacity(budget.samples as usize);
            for _ in 0..budget.samples {
                rows.push(forward.train_row(&x, |row| {
                    row.out
                        .iter()
                        .zip(&informative)
                        .filter(|(_, keep)| **keep)
                        .map(|(z, _)| *z != 0.0)
                        .collect::<Vec<bool>>()
                })?);
            }
            // The union bound is over the run's own N²/2 window pairs, so
            // the window is sized for the budget the run gets (the note's
            // `w` above is for the card's budget, which a caller may change).
            let w = window_rows(budget.samples, bits, rate.p()).unwrap_or(usize::MAX);
            Ok(repeated_windows(&rows, w) as f64)
        },
    );
    claim.card.samples = rows;
    Ok(claim)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_meets_the_union_bound_and_no_more_than_one_row_past_it() {
        let (n, k, p) = (20_000u64, 6usize, 0.1f64);
        let w = window_rows(n, k, p).unwrap();
        let agree = p * p + (1.0 - p) * (1.0 - p);
        let bound = |rows: usize| (n as f64).powi(2) / 2.0 * agree.powi((rows * k) as i32);
        assert!(bound(w) <= assertion_alpha(), "{}", bound(w));
        assert!(bound(w - 1) > assertion_alpha());
        assert_eq!(window_rows(n, 0, p), None);
        assert_eq!(window_rows(n, k, 0.0), None);
    }

    /// Rows from a xorshift stream with period `period` rows.
    fn periodic_rows(n: usize, k: usize, period: usize) -> Vec<Vec<bool>> {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let base: Vec<Vec<bool>> = (0..period)
            .map(|_| {
                (0..k)
                    .map(|_| {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        !state.is_multiple_of(10)
                    })
                    .collect()
            })
            .collect();
        (0..n).map(|r| base[r % period].clone()).collect()
    }

    #[test]
    fn a_periodic_stream_repeats_and_a_long_one_does_not() {
        let w = window_rows(20_000, 6, 0.1).unwrap();
        let short = periodic_rows(20_000, 6, 8_192);
        assert_eq!(repeated_windows(&short, w), 20_000 - w + 1 - 8_192);
        let long = periodic_rows(20_000, 6, 20_000);
        assert_eq!(repeated_windows(&long, w), 0);
        // Identical rows everywhere: every window after the first w repeats.
        let constant = vec![vec![true; 6]; 1_000];
        assert_eq!(repeated_windows(&constant, w), 1_000 - w + 1 - w);
    }

    #[test]
    fn overlapping_windows_are_not_compared() {
        // Period 3 rows, windows of 5: the window at s equals those at
        // s − 3, s − 6, …, but s − 3 overlaps it, so the first repeat
        // counted is at 6 (against 0), then 7 (against 1): starts run to 7.
        let rows = periodic_rows(12, 4, 3);
        assert_eq!(repeated_windows(&rows, 5), 2);
    }
}
