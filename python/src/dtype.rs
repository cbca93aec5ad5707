//! The floating-point formats a Python dropout can be checked in, and
//! rounding to them.
//!
//! # The formats
//!
//! A binary format with `t` significand bits (the leading one included)
//! and smallest normal exponent `e_min` holds the numbers `m·2^(e−t+1)`
//! with integer `|m| < 2^t` and `e ≥ e_min`; below `2^e_min` the spacing
//! stays `2^(e_min−t+1)` (the subnormals). The four formats:
//!
//! | dtype    | `t`  | `e_min` | largest finite            |
//! |----------|------|---------|---------------------------|
//! | float64  | 53   | −1022   | `(2 − 2⁻⁵²)·2¹⁰²³`        |
//! | float32  | 24   | −126    | `(2 − 2⁻²³)·2¹²⁷`         |
//! | float16  | 11   | −14     | `(2 − 2⁻¹⁰)·2¹⁵ = 65504`  |
//! | bfloat16 | 8    | −126    | `(2 − 2⁻⁷)·2¹²⁷`          |
//!
//! numpy has no bfloat16; the Python side takes it from `ml_dtypes`.
//!
//! # Rounding
//!
//! [`Dtype::round`] is IEEE round-to-nearest, ties to even, from a float64
//! value, step by step:
//!
//! 1. `e = max(⌊log₂|v|⌋, e_min)`, read off the float64 exponent bits;
//! 2. the spacing at `v` is `u = 2^(e−t+1)`, a power of two, so `v/u` is
//!    exact in float64 (for these formats `u ≥ 2⁻¹⁴⁹`, far above float64's
//!    subnormals);
//! 3. `round_ties_even(v/u)·u` is the nearest format number (exact again);
//! 4. a result above the largest finite number is `±∞` (at float16's
//!    boundary `65520 = 2047.5·32` ties to `2048·32`, which overflows, as
//!    IEEE's rule says).
//!
//! # Arithmetic in a format
//!
//! The survivor rule needs `fl(a/b)` and `fl(a·b)` for format numbers `a`,
//! `b`. Computed in float64 and then rounded, they are the format's own
//! correctly rounded results: a product of two `t ≤ 24`-bit significands
//! is exact in float64's 53 bits, and a quotient rounded twice (to 53 and
//! then to `t` bits) equals the quotient rounded once whenever
//! `53 ≥ 2t + 2` (Figueroa's double-rounding theorem for `+ − × ÷ √`),
//! which holds for `t ≤ 24`.
//!
//! # The arrays the callables see
//!
//! Float64 and float32 batches are exchanged as such. A float16 or
//! bfloat16 batch travels as float32, which holds every value of both
//! exactly; the Python wrapper casts it to the dtype before the user's
//! callable sees it and casts the output back (exact again), after checking
//! that the callable returned that dtype.

/// The element type of the arrays handed to the user's callables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    F64,
    F32,
    F16,
    BF16,
}

/// The dtypes by numpy's names, for parsing and for messages.
const NAMES: [(&str, Dtype); 4] = [
    ("float64", Dtype::F64),
    ("float32", Dtype::F32),
    ("float16", Dtype::F16),
    ("bfloat16", Dtype::BF16),
];

/// The names the checks accept, for error messages.
pub const ACCEPTED: &str = "float64, float32, float16 or bfloat16";

impl Dtype {
    /// Parses numpy's name of the dtype.
    pub fn from_name(name: &str) -> Option<Dtype> {
        NAMES.iter().find(|(n, _)| *n == name).map(|&(_, d)| d)
    }

    /// numpy's name of the dtype.
    pub fn name(self) -> &'static str {
        NAMES
            .iter()
            .find(|(_, d)| *d == self)
            .map_or("?", |(n, _)| n)
    }

    /// Significand bits `t`, the leading one included.
    fn precision(self) -> i32 {
        match self {
            Dtype::F64 => 53,
            Dtype::F32 => 24,
            Dtype::F16 => 11,
            Dtype::BF16 => 8,
        }
    }

    /// The exponent of the smallest positive normal number.
    fn min_exponent(self) -> i32 {
        match self {
            Dtype::F64 => -1022,
            Dtype::F32 | Dtype::BF16 => -126,
            Dtype::F16 => -14,
        }
    }

    /// The exponent of the largest finite number.
    fn max_exponent(self) -> i32 {
        match self {
            Dtype::F64 => 1023,
            Dtype::F32 | Dtype::BF16 => 127,
            Dtype::F16 => 15,
        }
    }

    /// The largest finite number, `(2 − 2^(1−t))·2^e_max`.
    pub fn max_finite(self) -> f64 {
        match self {
            Dtype::F64 => f64::MAX,
            _ => (2.0 - 2f64.powi(1 - self.precision())) * 2f64.powi(self.max_exponent()),
        }
    }

    /// The unit roundoff's double, `ε = 2^(1−t)`: the spacing at 1.
    pub fn epsilon(self) -> f64 {
        2f64.powi(1 - self.precision())
    }

    /// The smallest positive normal number, `2^e_min`.
    pub fn smallest_normal(self) -> f64 {
        2f64.powi(self.min_exponent())
    }

    /// The smallest positive subnormal number, `2^(e_min − t + 1)`.
    pub fn smallest_subnormal(self) -> f64 {
        match self {
            Dtype::F64 => f64::from_bits(1),
            _ => 2f64.powi(self.min_exponent() - self.precision() + 1),
        }
    }

    /// Whether the batches travel as float32 (float16 and bfloat16, see the
    /// module docs) rather than float64.
    pub fn travels_as_f32(self) -> bool {
        self != Dtype::F64
    }

    /// `v` rounded to this dtype, to nearest with ties to even (and back to
    /// `f64`, exactly); see the module docs.
    pub fn round(self, v: f64) -> f64 {
        match self {
            Dtype::F64 => v,
            Dtype::F32 => v as f32 as f64,
            Dtype::F16 | Dtype::BF16 => {
                round_to_format(v, self.precision(), self.min_exponent(), self.max_finite())
            }
        }
    }

    /// `fl(a/b)` in this dtype, for `a`, `b` of this dtype (see the module
    /// docs: exact for float64 and float32 too).
    pub fn div(self, a: f64, b: f64) -> f64 {
        match self {
            Dtype::F64 => a / b,
            _ => self.round(a / b),
        }
    }

    /// `fl(a·b)` in this dtype, for `a`, `b` of this dtype.
    pub fn mul(self, a: f64, b: f64) -> f64 {
        match self {
            Dtype::F64 => a * b,
            _ => self.round(a * b),
        }
    }
}

/// `v` rounded to nearest, ties to even, in the binary format of
/// `precision` significand bits, smallest normal exponent `min_exponent`
/// and largest finite number `max_finite` (steps 1–4 of the module docs).
fn round_to_format(v: f64, precision: i32, min_exponent: i32, max_finite: f64) -> f64 {
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    let biased = ((v.to_bits() >> 52) & 0x7ff) as i32;
    let exponent = (biased - 1023).max(min_exponent);
    let spacing = 2f64.powi(exponent - precision + 1);
    let rounded = (v / spacing).round_ties_even() * spacing;
    if rounded.abs() > max_finite {
        f64::INFINITY.copysign(v)
    } else {
        rounded
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The generic rounding at float32's parameters against the hardware
    /// cast: checks steps 1–4 on a format whose hardware exists.
    fn generic_f32(v: f64) -> f64 {
        round_to_format(v, 24, -126, f32::MAX as f64)
    }

    #[test]
    fn the_generic_rounding_is_the_hardware_cast_on_float32() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // Random bits over float32's whole range and past it.
            let exponent = (state % 300) as i32 - 160;
            let mantissa = 1.0 + (state >> 11) as f64 / (1u64 << 53) as f64;
            let v = mantissa * 2f64.powi(exponent) * if state & 1 == 0 { 1.0 } else { -1.0 };
            assert_eq!(
                generic_f32(v).to_bits(),
                (v as f32 as f64).to_bits(),
                "{v:e}"
            );
        }
    }

    #[test]
    fn float16_boundaries_round_as_ieee_says() {
        let h = Dtype::F16;
        assert_eq!(h.max_finite(), 65504.0);
        assert_eq!(h.round(65519.0), 65504.0);
        assert_eq!(h.round(65520.0), f64::INFINITY);
        assert_eq!(h.round(-65520.0), f64::NEG_INFINITY);
        assert_eq!(h.smallest_subnormal(), 2f64.powi(-24));
        // Half the smallest subnormal ties to 0 (even); a little more rounds up.
        assert_eq!(h.round(2f64.powi(-25)), 0.0);
        assert_eq!(h.round(2f64.powi(-25) * 1.0001), 2f64.powi(-24));
        // 1 + 2⁻¹¹ is halfway between 1 and 1 + 2⁻¹⁰: ties to 1 (even).
        assert_eq!(h.round(1.0 + 2f64.powi(-11)), 1.0);
        assert_eq!(
            h.round(1.0 + 3.0 * 2f64.powi(-11)),
            1.0 + 2.0 * 2f64.powi(-10)
        );
    }

    #[test]
    fn the_scales_torch_uses_in_half_precision_are_the_rounded_reciprocals() {
        // Measured from torch 2.15's CPU dropout at p = 0.1 (issue 23):
        // survivors are x·1.111328 in float16 and x·1.109375 in bfloat16.
        assert_eq!(Dtype::F16.round(1.0 / 0.9), 1.111328125);
        assert_eq!(Dtype::BF16.round(1.0 / 0.9), 1.109375);
        assert_eq!(Dtype::BF16.epsilon(), 2f64.powi(-7));
    }

    #[test]
    fn names_round_trip() {
        for (name, d) in NAMES {
            assert_eq!(Dtype::from_name(name), Some(d));
            assert_eq!(d.name(), name);
        }
        assert_eq!(Dtype::from_name("int8"), None);
    }
}
