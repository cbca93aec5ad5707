//! The fast kernel of a dropout site followed by a norm: `y = h + Σ_j dropout_{p_j}(v_j)`,
//! then LayerNorm or RMSNorm, with masks as bits and every sum a table look-up (plain
//! dropout before a norm is the case `h = 0`, one term).
//!
//! # Per mask: `M`, `V`, `R²` from masked sums over units
//!
//! Work with `y' = y − c` for a fixed shift `c` (the clean mean
//! `c = mean_k x_k`, `x = h + Σ_j v_j`, before LayerNorm; `c = 0` before
//! RMSNorm), `h' = h − c`, `w_jk = v_jk/q_j`, `m_jk` the keep bits:
//!
//! ```text
//! y'_k   = h'_k + Σ_j m_jk w_jk
//! Σ y'   = Σ h' + Σ_j Σ_k m_jk w_jk                              (1)
//! Σ y'²  = Σ h'² + Σ_j Σ_k m_jk (2 h'_k w_jk + w_jk²)
//!                + Σ_{i<j} Σ_k (m_ik m_jk) 2 w_ik w_jk            (2)
//!          (expand the square; m² = m for a bit; the product of two
//!           terms' bits is the AND of their masks)
//! M' = Σ y'/d,  R'² = Σ y'²/d
//! M  = c + M'
//! V  = R'² − M'²          (V is shift-invariant: mean (y−M)² = mean (y'−M')²)
//! R² = R'² + c (c + 2M')  (mean (y' + c)²)
//! ```
//!
//! (1) and (2) are `Σ_k m_k col_k` for fixed columns, one look-up per 4
//! units in the nibble [`SubsetTables`] (per term the columns `w_j` and
//! `2 h' w_j + w_j²`; per pair of terms `2 w_i w_j`, read with the AND of
//! the two masks), made for 64 masks at once by
//! [`SubsetTables::block_sums`] (vector permutes on AVX-512).
//!
//! # Layout of a block
//!
//! As in [`super::blocks`]: masks come 64 at a time, and each term's
//! block of `64·⌈d/64⌉` iid Bernoulli(q_j) words is read *word-major* (word
//! `i` of mask `b` is `words[64 i + b]`), so the 64 masks' word `i` are
//! contiguous for the per-mask look-ups and form one 64×64 bit matrix for
//! the per-channel transpose. Masks past the last draw of a chunk are
//! all-dropped and add nothing.
//!
//! # Why the shift: the cancellation in `V = R'² − M'²`
//!
//! Unshifted, `V = R² − M²` loses `≈ ε · M²/V` of relative accuracy (ε the
//! unit roundoff), ruinous when the mean dominates the spread (a bypass
//! with large `h`). With `c = E[M]`, `M'` is of the size of the noise, so
//! `M'² ≈ Var M ≈ V/d` and nothing cancels. What is left is bounded a
//! priori: each masked sum adds at most `N = d (1 + J + J(J−1)/2)` terms, so
//! by the standard bound on recursive summation in any order
//!
//! ```text
//! |δ(Σ y')|  ≤ (N + 8) u A₁,   A₁ = Σ_k (|h'_k| + Σ_j |w_jk|)
//! |δ(Σ y'²)| ≤ (N + 8) u A₂,   A₂ = Σ_k (h'_k² + Σ_j (|2 h'_k w_jk| + w_jk²))
//!                                     + Σ_{i<j} Σ_k |2 w_ik w_jk|
//! |δV| ≤ κ = (N + 8) u (A₂ + 2 A₁²/d) / d        (u = 2^-53; |M'| ≤ A₁/d)
//! ```
//!
//! # Per channel: one masked sum over masks
//!
//! With `s = 1/√(V + ε)` (LayerNorm) or `s = 1/√(R² + ε)` (RMSNorm) per
//! mask `b`, over a block of at most 64 masks
//!
//! ```text
//! LN(y)_k = γ_k (y'_k − M') s + β_k                   (y − M = y' − M')
//! Σ_b (y'_bk − M'_b) s_b = h'_k Σ_b s_b + Σ_j w_jk Σ_{b: m_jbk = 1} s_b − Σ_b M'_b s_b
//! RMS(y)_k = γ_k y_k s:  Σ_b y_bk s_b = h_k Σ_b s_b + Σ_j w_jk Σ_{b: m_jbk = 1} s_b
//! ```
//!
//! The inner sums over the masks keeping `k` are [`super::blocks`]'
//! masked sums over masks (one per term): each 64×64 bit block of the term
//! is transposed so that one word holds channel `k`'s keep bits across the
//! 64 masks, and the sums of `s` over every subset of each 4 masks are
//! tabulated, 16 look-ups per channel per 64 masks. `γ`, `β` are applied after the
//! run: `E[γ L + β] = γ E[L] + β`, `SE(γ L) = |γ| SE(L)`. Standard errors are
//! batch means over the blocks of 64 ([`estimate_from_batches`]), and so are
//! those of fixed linear functionals `Σ_k a_k (out_k − β_k)` (the shrink
//! factors of `eval`): a functional's block sum is `Σ_k a_k γ_k` times the
//! channels' block sums.
//!
//! # The constant input (ε = 0) and ill-conditioned masks
//!
//! A mask giving a constant `y` gets the crate's rule exactly: `s = 0`, so
//! its LayerNorm output is `β` and its `V` is 0 (RMSNorm: `y = 0` gives 0).
//! For one dropped term those masks are recognised by bit patterns
//! ([`super::constant`]), so the function computed is the same as the
//! per-element path's. Every other mask must have `V + ε` (`R² + ε`) at
//! least
//!
//! ```text
//! floor = max(2^26 κ, (80 u B 2^26)²),   B = max_k (|h'_k| + Σ_j |w_jk|) + A₁/d
//! ```
//!
//! the first term making the relative error of `V + ε` at most `2^-26`,
//! the second making the rounding of a channel's per-mask term
//! (`≤ 80 u B s`: at most 72 additions in the tables and the block sum,
//! each of magnitude `≤ B s`) at most `2^-26` of an output of size one —
//! biases below the statistical resolution of any budget up to about
//! 10^15 masks. A mask below the floor is counted, and a run with any such
//! mask returns `None`: the caller falls back to the per-element path
//! (this is how a constant `y` with several dropped terms, which is not
//! detected, is handled). An input whose sums overflow returns `None` too.
//!
//! # `Var M` from pairs
//!
//! Consecutive masks `(2i, 2i+1)` of a block are independent, so
//! `(M_{2i} − M_{2i+1})²/2` has mean `Var M` exactly; `⌊n/2⌋` pairs from `n`
//! masks, with a per-pair standard error.

use super::blocks::{block_sizes, channel_sums_over_masks, fill_block};
use super::compact::MaskBits;
use super::conditioning::{ill_conditioned, site_floor};
use super::constant::{ConstantPattern, constant_patterns};
use super::lanes::Xoshiro8;
use super::run::{ChunkKernel, Isa, estimate_from_batches, estimate_from_sums, run_chunks};
use super::surrogate::{ControlVariate, Surrogate};
use super::tables::SubsetTables;
use crate::engine::{Budget, Stream};
use crate::error::Error;
use crate::ops::{AnyNorm, Site};
use crate::stats::Estimate;
use crate::stats::tolerance;

/// Per draw Σ M', Σ M'², Σ V, Σ V², Σ R², Σ (R²)²; per pair Σ t, Σ t²;
/// Σ n_b² over blocks; the count of ill-conditioned masks.
const SCALARS: usize = 10;
const ILL: usize = 9;

/// Estimates of a site's normalization statistics.
#[derive(Debug, Clone, PartialEq)]
pub struct SiteEstimates {
    /// `E[M]`.
    pub mean: Estimate,
    /// `Var M`, from `⌊n/2⌋` pairs of masks.
    pub var_of_mean: Estimate,
    /// `E[V]`.
    pub var: Estimate,
    /// `E[R²]`.
    pub r2: Estimate,
    /// `E[norm(y)_k]` per channel, with `γ`, `β` (empty unless asked).
    pub out: Vec<Estimate>,
    /// `E[Σ_k a_k (norm(y)_k − β_k)]`, one per functional asked for.
    pub functionals: Vec<Estimate>,
}

/// The fast kernel of a site and its norm (see the module docs).
#[derive(Debug, Clone)]
pub struct FastSite {
    d: usize,
    nw: usize,
    shift: f64,
    centred: Vec<f64>,
    sum_centred: f64,
    sum_centred_sq: f64,
    scaled: Vec<Vec<f64>>,
    bits: Vec<MaskBits>,
    tables: Vec<SubsetTables<2>>,
    pairs: Vec<(usize, usize, SubsetTables<1>)>,
    patterns: Vec<ConstantPattern>,
    layer: bool,
    eps: f64,
    gamma: Vec<f64>,
    beta: Vec<f64>,
    per_channel: bool,
    functionals: Vec<Vec<f64>>,
    /// The control variate ([`super::surrogate`]) and its `P_b` tables.
    surrogate: Option<ControlVariate>,
    kappa: f64,
    floor: f64,
    usable: bool,
}

impl FastSite {
    /// The kernel for `site` followed by `norm` (of the site's width), with
    /// the per-channel outputs when `per_channel`.
    pub fn new(site: &Site, norm: &AnyNorm, per_channel: bool) -> Result<Self, Error> {
        let d = site.dim();
        let layer = norm.kind().centres();
        let (eps, gamma) = (norm.eps(), norm.gamma().to_vec());
        let beta = norm.beta().map_or_else(|| vec![0.0; d], <[f64]>::to_vec);
        crate::error::check_len("norm parameters", &gamma, d)?;
        let x = site.clean();
        let shift = if layer {
            x.iter().sum::<f64>() / d as f64
        } else {
            0.0
        };
        let centred: Vec<f64> = site.h().iter().map(|h| h - shift).collect();
        let terms = site.terms();
        let scaled: Vec<Vec<f64>> = terms
            .iter()
            .map(|(v, rate)| v.iter().map(|a| a / rate.q()).collect())
            .collect();
        let mut tables = Vec::with_capacity(terms.len());
        let mut bits = Vec::with_capacity(terms.len());
        for (w, (_, rate)) in scaled.iter().zip(terms) {
            let square: Vec<f64> = w
                .iter()
                .zip(&centred)
                .map(|(w, h)| 2.0 * h * w + w * w)
                .collect();
            tables.push(SubsetTables::new([w, &square]));
            bits.push(MaskBits::new(rate.q())?);
        }
        let mut pairs = Vec::new();
        for i in 0..scaled.len() {
            for j in i + 1..scaled.len() {
                let cross: Vec<f64> = (0..d).map(|k| 2.0 * scaled[i][k] * scaled[j][k]).collect();
                pairs.push((i, j, SubsetTables::new([&cross])));
            }
        }
        let patterns = match terms {
            [(v, rate)] => {
                let zero = [0.0];
                let candidates = if layer { None } else { Some(&zero[..]) };
                constant_patterns(site.h(), v, rate.q(), candidates)
            }
            _ => Vec::new(),
        };
        let columns: Vec<&[f64]> = scaled.iter().map(|w| &w[..]).collect();
        let (floor, kappa) = site_floor(site.h(), &columns, shift);
        Ok(FastSite {
            d,
            nw: d.div_ceil(64),
            shift,
            sum_centred: centred.iter().sum(),
            sum_centred_sq: centred.iter().map(|h| h * h).sum(),
            centred,
            scaled,
            bits,
            tables,
            pairs,
            patterns,
            layer,
            eps,
            gamma,
            beta,
            per_channel,
            functionals: Vec::new(),
            surrogate: None,
            kappa,
            floor,
            usable: floor.is_finite(),
        })
    }

    /// Also estimates `E[Σ_k a_k (out_k − β_k)]` (`a` of the site's width).
    pub fn with_functional(mut self, a: &[f64]) -> Result<Self, Error> {
        crate::error::check_len("functional weights", a, self.d)?;
        crate::error::check_all_finite("functional weights", a)?;
        self.functionals
            .push(a.iter().zip(&self.gamma).map(|(a, g)| a * g).collect());
        Ok(self)
    }

    /// Estimates the outputs and functionals with the first-order control
    /// variate of `ops::fast::surrogate` (unbiased whatever the input; a
    /// site whose every mask is constant, with `ε = 0`, runs without it).
    pub fn with_control_variate(mut self, site: &Site) -> Self {
        let x = site.clean();
        let noise: f64 = site
            .terms()
            .iter()
            .map(|(v, rate)| rate.odds() * v.iter().map(|a| a * a).sum::<f64>() / self.d as f64)
            .sum();
        let s = Surrogate::new(&x, &self.centred, self.shift, self.layer, self.eps, noise);
        self.surrogate = s.map(|s| ControlVariate::new(s, &self.scaled));
        self
    }

    /// Whether per-mask scales `s` are needed (outputs or functionals).
    fn scales(&self) -> bool {
        self.per_channel || !self.functionals.is_empty()
    }

    /// Runs `budget.samples` masks; `None` when the fast path does not
    /// apply (fewer than 129 masks with outputs, fewer than 4 without; an
    /// overflowing input; an ill-conditioned mask; rounding of `V` not
    /// negligible against its standard error): the caller then uses the
    /// per-element path.
    pub fn estimate(&self, budget: Budget) -> Result<Option<SiteEstimates>, Error> {
        let needed = if self.scales() { 2 * 64 + 1 } else { 4 };
        if !self.usable || budget.samples < needed {
            return Ok(None);
        }
        let sums = run_chunks(self, budget)?;
        if sums[ILL] > 0.0 {
            return Ok(None);
        }
        let n = budget.samples;
        let d = self.d;
        let mut mean = estimate_from_sums(sums[0], sums[1], n);
        mean.value += self.shift;
        let var = estimate_from_sums(sums[2], sums[3], n);
        if self.kappa > tolerance::ROUNDING_BIAS_SHARE_OF_STDERR * var.stderr {
            return Ok(None);
        }
        let batches = |at: usize, count: usize| -> Vec<Estimate> {
            (0..count)
                .map(|k| {
                    let (s, sq, w) = (sums[at + k], sums[at + count + k], sums[at + 2 * count + k]);
                    estimate_from_batches(s, sq, w, sums[8], n)
                })
                .collect()
        };
        let known = self.surrogate.as_ref().map(|cv| cv.surrogate.known_mean());
        let known_at = |k: usize| known.as_ref().map_or(0.0, |m| m[k]);
        let out = if self.per_channel {
            batches(SCALARS, d)
                .into_iter()
                .enumerate()
                .zip(self.gamma.iter().zip(&self.beta))
                .map(|((k, e), (g, b))| Estimate {
                    value: b + g * (known_at(k) + e.value),
                    stderr: g.abs() * e.stderr,
                    ..e
                })
                .collect()
        } else {
            Vec::new()
        };
        let at = SCALARS + if self.per_channel { 3 * d } else { 0 };
        Ok(Some(SiteEstimates {
            mean,
            var_of_mean: estimate_from_sums(sums[6], sums[7], n / 2),
            var,
            r2: estimate_from_sums(sums[4], sums[5], n),
            out,
            functionals: batches(at, self.functionals.len())
                .into_iter()
                .zip(&self.functionals)
                .map(|(e, a)| Estimate {
                    value: e.value + (0..d).map(|k| a[k] * known_at(k)).sum::<f64>(),
                    ..e
                })
                .collect(),
        }))
    }

    /// `(M', s)` of mask `b` of the block `words` (term `j`'s 64 masks,
    /// word-major, at `words[j · 64 nw..]`), from its shifted sums
    /// `lin = Σ y'`, `sq = Σ y'²`, adding its scalar statistics into
    /// `scalars`.
    #[inline(always)]
    fn one_mask(
        &self,
        words: &[u64],
        b: usize,
        lin: f64,
        sq: f64,
        scalars: &mut [f64],
    ) -> (f64, f64) {
        let inv_d = 1.0 / self.d as f64;
        let m = lin * inv_d;
        let r2_shifted = sq * inv_d;
        let mut v = r2_shifted - m * m;
        let mut r2 = r2_shifted + self.shift * (self.shift + 2.0 * m);
        let first = &words[..64 * self.nw];
        let constant = self.patterns.iter().any(|p| p.matches_in_block(first, b));
        if constant {
            if self.layer {
                v = 0.0;
            } else {
                r2 = 0.0;
            }
        }
        scalars[0] += m;
        scalars[1] += m * m;
        scalars[2] += v;
        scalars[3] += v * v;
        scalars[4] += r2;
        scalars[5] += r2 * r2;
        let denom = if self.layer { v } else { r2 } + self.eps;
        let s = if constant || !self.scales() {
            0.0
        } else {
            if ill_conditioned(denom, self.floor) {
                scalars[ILL] += 1.0;
            }
            1.0 / denom.sqrt()
        };
        (m, s)
    }
}

impl ChunkKernel for FastSite {
    fn width(&self) -> usize {
        SCALARS + 3 * if self.per_channel { self.d } else { 0 } + 3 * self.functionals.len()
    }

    #[inline(always)]
    fn chunk(&self, rng: &mut Stream, draws: usize, sums: &mut [f64]) {
        self.chunk_on(Isa::Portable, rng, draws, sums);
    }

    #[inline(always)]
    fn chunk_on(&self, isa: Isa, rng: &mut Stream, draws: usize, sums: &mut [f64]) {
        let (d, nw, terms) = (self.d, self.nw, self.bits.len());
        let stride = 64 * nw;
        let mut lanes = Xoshiro8::from_stream(rng);
        // Per term, a block of 64 masks, word-major (see super::blocks).
        let mut words = vec![0u64; terms * stride];
        let mut both = vec![0u64; if self.pairs.is_empty() { 0 } else { stride }];
        let mut scratch = Vec::new();
        let (mut centre, mut scale) = ([0.0f64; 64], [0.0f64; 64]);
        let mut per_term = [[0.0f64; 64]; 2];
        let mut per_pair = [[0.0f64; 64]; 1];
        let mut mask_tables = SubsetTables::new([&scale[..]]);
        let channels = self.scales();
        let mut kept = vec![0.0f64; if channels { terms * d } else { 0 }];
        let mut block = vec![0.0f64; if channels { d } else { 0 }];
        let (scalars, rest) = sums.split_at_mut(SCALARS);
        let (per_channel, functionals) =
            rest.split_at_mut(if self.per_channel { 3 * d } else { 0 });
        for nb in block_sizes(draws) {
            for (bits, w) in self.bits.iter().zip(words.chunks_exact_mut(stride)) {
                fill_block(bits, &mut lanes, w, &mut scratch, d, nb);
            }
            // Per mask Σ y' and Σ y'²: the constants, then term by term
            // (1), (2), then the pairs of terms, the order of the module docs.
            let mut lin = [self.sum_centred; 64];
            let mut sq = [self.sum_centred_sq; 64];
            for (t, w) in self.tables.iter().zip(words.chunks_exact(stride)) {
                t.block_sums(isa, w, &mut per_term);
                for b in 0..64 {
                    lin[b] += per_term[0][b];
                    sq[b] += per_term[1][b];
                }
            }
            for (i, j, t) in &self.pairs {
                let (wi, wj) = (
                    &words[i * stride..][..stride],
                    &words[j * stride..][..stride],
                );
                for ((o, a), b) in both.iter_mut().zip(wi).zip(wj) {
                    *o = a & b;
                }
                t.block_sums(isa, &both, &mut per_pair);
                for (s, p) in sq.iter_mut().zip(&per_pair[0]) {
                    *s += p;
                }
            }
            for b in 0..nb {
                (centre[b], scale[b]) = self.one_mask(&words, b, lin[b], sq[b], scalars);
            }
            // The control variate: s_b → s_b − s0, and its per-block constant.
            let residual = self
                .surrogate
                .as_ref()
                .map(|cv| cv.block(isa, &words, nb, &mut scale));
            for pair in centre[..nb].chunks_exact(2) {
                let t = 0.5 * (pair[0] - pair[1]) * (pair[0] - pair[1]);
                scalars[6] += t;
                scalars[7] += t * t;
            }
            if channels {
                scale[nb..].fill(0.0);
                let (mut total, mut offset) = (0.0, 0.0);
                for (&m, &s) in centre.iter().zip(&scale).take(nb) {
                    total += s;
                    offset += m * s;
                }
                if !self.layer {
                    offset = 0.0;
                }
                mask_tables.refill([&scale[..]]);
                for (w, k) in words.chunks_exact(stride).zip(kept.chunks_exact_mut(d)) {
                    channel_sums_over_masks(isa, w, &mask_tables, k);
                }
                let n = nb as f64;
                // Term by term, so each pass is one vector loop over channels
                // (the same additions in the same order for every channel).
                for (t, h) in block.iter_mut().zip(&self.centred) {
                    *t = h * total - offset;
                }
                if let (Some(cv), Some(r)) = (&self.surrogate, residual) {
                    cv.add(r, &mut block);
                }
                for (w, a) in self.scaled.iter().zip(kept.chunks_exact(d)) {
                    for ((t, w), a) in block.iter_mut().zip(w).zip(a) {
                        *t += w * a;
                    }
                }
                if self.per_channel {
                    let (sum, rest) = per_channel.split_at_mut(d);
                    let (sum_sq, sum_weighted) = rest.split_at_mut(d);
                    for (k, &t) in block.iter().enumerate() {
                        sum[k] += t;
                        sum_sq[k] += t * t;
                        sum_weighted[k] += n * t;
                    }
                }
                let count = self.functionals.len();
                for (f, a) in self.functionals.iter().enumerate() {
                    let t: f64 = a.iter().zip(&block).map(|(a, b)| a * b).sum();
                    functionals[f] += t;
                    functionals[count + f] += t * t;
                    functionals[2 * count + f] += n * t;
                }
                scalars[8] += n * n;
            }
        }
    }
}
