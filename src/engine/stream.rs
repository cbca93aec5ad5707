//! Seeded, portable random streams and the keep rule.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The generator every sampler draws from: ChaCha with 8 rounds, from
/// `rand_chacha`. It is portable (the same bits on every platform, unlike
/// `StdRng`, whose algorithm may change) and has 2^64 independent streams
/// per seed, which the engine uses as one stream per chunk.
pub type Stream = ChaCha8Rng;

/// The random stream of chunk `chunk` under `seed`.
///
/// The seed is expanded to ChaCha's 256-bit key by `seed_from_u64` (a PCG32
/// expansion fixed by `rand_core`), and the chunk index is ChaCha's 64-bit
/// stream number, so distinct chunks read disjoint keystreams.
pub fn stream(seed: u64, chunk: u64) -> Stream {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(chunk);
    rng
}

/// The reference keep rule: draw `u ~ U[0, 1)` (53 random bits) and keep the
/// unit iff `u >= p`, so `P(keep) = 1 - p` up to the 2^-53 grid.
#[inline]
pub fn keep<R: rand::Rng + ?Sized>(rng: &mut R, p: f64) -> bool {
    rng.random::<f64>() >= p
}

/// A seed for the sub-experiment named `label` under the run seed `seed`:
/// 64-bit FNV-1a over the label's bytes, started from the seed's bytes.
/// Distinct claims thus read unrelated streams, while one run seed still fixes
/// every bit of a report.
pub fn derive_seed(seed: u64, label: &str) -> u64 {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in seed.to_le_bytes().iter().chain(label.as_bytes()) {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(PRIME);
    }
    hash
}
