//! The experiment's table rows as data: [`LayerRow`] (one layer at one
//! rate) and [`RateRow`] (one rate, after its layers). Each is a struct
//! whose field order is the column order: the sampler writes a row's values
//! in that order, the JSON lists the field names once
//! ([`super::StackTable::layer_fields`]) and every row as an array in the
//! same order, and a column is read by its field name, never by a number.

use serde::Serialize;

use super::replicate::Replicate;

/// Declares a row type: a struct with one field of type `T` per column,
/// the columns in field order, with
///
/// * `FIELDS`, the field names in order (the JSON's column names);
/// * `values()` / `from_values()`, the row as values in column order (what
///   the sampler writes and the estimates come back as);
/// * `get(name)`, a column by its field name;
/// * `Serialize` as the sequence of its values (the names are listed once,
///   beside the rows, rather than repeated in every row).
macro_rules! columns {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$field_meta:meta])* $field:ident, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq)]
        pub struct $name<T> {
            $( $(#[$field_meta])* pub $field: T, )*
        }

        impl<T: Copy> $name<T> {
            /// The column names: the field names, in field order.
            pub const FIELDS: &'static [&'static str] = &[$(stringify!($field)),*];

            /// The values, in column order.
            pub fn values(self) -> impl Iterator<Item = T> {
                [$(self.$field),*].into_iter()
            }

            /// A row from values in column order; `None` if they run out.
            pub fn from_values(values: &mut impl Iterator<Item = T>) -> Option<Self> {
                Some($name { $($field: values.next()?,)* })
            }

            /// The column named `field`; `None` for an unknown name.
            pub fn get(&self, field: &str) -> Option<T> {
                match field {
                    $(stringify!($field) => Some(self.$field),)*
                    _ => None,
                }
            }
        }

        impl<T: Copy + Serialize> Serialize for $name<T> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_seq(self.values())
            }
        }
    };
}

columns! {
    /// The statistics of one layer at one rate: eval/train variance ratios
    /// unless said otherwise; "null" is the same network at `p = 0`, and a
    /// "gap" is `|1 − ratio|`.
    pub struct LayerRow {
        /// Dropout before every BN, buffers as trained.
        base,
        /// `base`'s buffers folded once (`rv ← q rv − p rm²`).
        fold,
        /// `base`'s buffers reset and re-estimated with dropout off.
        reestimate,
        /// Dropout only after the last BN.
        after_last,
        /// LayerNorm in place of every BN.
        layer_norm,
        /// LayerNorm's eval/train ratio of mean squares.
        layer_norm_mean_square,
        /// `gap(base) − gap(fold)`: how much closer to 1 the fold brings it.
        fold_gain,
        /// `gap(base) − gap(layer_norm)`.
        layer_norm_gain,
        /// `base` at this layer minus `base` at the next (0 at the last).
        depth_step,
        /// `base` at the previous rate minus `base` at this one (0 at the
        /// first rate, the null).
        rate_step,
        /// `fold − null`.
        fold_minus_null,
        /// `reestimate − null`.
        reestimate_minus_null,
        /// `after_last − null`.
        after_last_minus_null,
        /// `(fold − null) + ½(null − base)`: positive iff the fold leaves
        /// `fold` above `null − ½ shift` (at least half the shrinkage
        /// removed).
        fold_half_lo,
        /// `½(null − base) − (fold − null)`: positive iff the fold does not
        /// overshoot by half the shift.
        fold_half_hi,
    }
}

columns! {
    /// The statistics of one rate beyond its layers.
    pub struct RateRow {
        /// Readout eval/train variance ratio, `base`.
        readout_base,
        /// Readout eval/train variance ratio, `fold`.
        readout_fold,
        /// Readout eval/train variance ratio, `reestimate`.
        readout_reestimate,
        /// Readout `(E_eval r − E_train r) / sd_train r`, `base`.
        readout_mean_shift,
        /// First layer's `base` ratio minus the formula's `mean_k c_k²`.
        first_shift_minus_formula,
        /// First layer's `base` ratio minus the last layer's.
        first_minus_last,
        /// `gap(readout_base) − gap(readout_fold)`.
        readout_fold_gain,
    }
}

/// `|1 − ratio|`: how far a ratio is from no shift.
fn gap(ratio: f64) -> f64 {
    (1.0 - ratio).abs()
}

impl LayerRow<f64> {
    /// Layer `l` (0-based) of one replicate `rep`, given the same network at
    /// the previous rate (`None` at the first rate) and at `p = 0` (`null`).
    pub(super) fn measure(
        rep: &Replicate,
        previous: Option<&Replicate>,
        null: &Replicate,
        l: usize,
    ) -> Self {
        let base = &rep.base.variance_ratio;
        let null_l = null.base.variance_ratio[l];
        let fold = rep.fold.variance_ratio[l];
        let reestimate = rep.reestimate.variance_ratio[l];
        let after_last = rep.after_last.variance_ratio[l];
        let layer_norm = rep.layer_norm.variance_ratio[l];
        let fold_minus_null = fold - null_l;
        // The fold leaves less than half the shift iff both halves are > 0.
        let half_shift = 0.5 * (null_l - base[l]);
        LayerRow {
            base: base[l],
            fold,
            reestimate,
            after_last,
            layer_norm,
            layer_norm_mean_square: rep.layer_norm.mean_square_ratio[l],
            fold_gain: gap(base[l]) - gap(fold),
            layer_norm_gain: gap(base[l]) - gap(layer_norm),
            depth_step: base.get(l + 1).map_or(0.0, |next| base[l] - next),
            rate_step: previous.map_or(0.0, |prev| prev.base.variance_ratio[l] - base[l]),
            fold_minus_null,
            reestimate_minus_null: reestimate - null_l,
            after_last_minus_null: after_last - null_l,
            fold_half_lo: fold_minus_null + half_shift,
            fold_half_hi: half_shift - fold_minus_null,
        }
    }
}

impl RateRow<f64> {
    /// The rate's statistics from one replicate `rep`.
    pub(super) fn measure(rep: &Replicate) -> Self {
        let base = &rep.base.variance_ratio;
        let first = base[0];
        let last = base[base.len() - 1];
        RateRow {
            readout_base: rep.base.readout_variance_ratio,
            readout_fold: rep.fold.readout_variance_ratio,
            readout_reestimate: rep.reestimate.readout_variance_ratio,
            readout_mean_shift: rep.base.readout_mean_shift,
            first_shift_minus_formula: first - rep.predicted_first_shift,
            first_minus_last: first - last,
            readout_fold_gain: gap(rep.base.readout_variance_ratio)
                - gap(rep.fold.readout_variance_ratio),
        }
    }
}
