//! Every bit-mask kernel behind the dropout, attention, mask-shape and
//! ensemble families and `eval moments|attn`, run on one instruction-set
//! level, as the bits of its sum vector (for the thread-count and ISA
//! bit-identity tests).

use dropmc::engine::Budget;
use dropmc::ops::fast::{
    ChunkKernel, Isa, attention_row, dropout, ensemble, mask_shape, run_chunks_on,
};

fn bits<K: ChunkKernel>(
    name: &'static str,
    kernel: Result<K, dropmc::Error>,
    budget: Budget,
    isa: Isa,
) -> (&'static str, Vec<u64>) {
    let sums = run_chunks_on(&kernel.expect("a kernel"), budget, isa).expect("runs");
    (name, sums.iter().map(|s| s.to_bits()).collect())
}

/// `(kernel name, bits of its sums)` for every family kernel, on inputs of
/// both mask layouts (packed short masks, and masks of several words).
pub fn family_kernel_bits(budget: Budget, isa: Isa) -> Vec<(&'static str, Vec<u64>)> {
    let short = [0.5, -1.2, 3.0, 0.0, 2.0];
    let long: Vec<f64> = (0..130)
        .map(|k| ((k * 7 % 11) as f64 - 5.0) / 3.0)
        .collect();
    let a = [0.1, 0.2, 0.3, 0.4];
    let v = [1.0, -2.0, 0.5, 3.0];
    let block = [
        1.0, 0.5, -1.0, 2.0, 0.5, 1.0, 1.5, -0.5, 2.0, 0.5, 1.0, -0.5,
    ];
    let w = [0.5, -1.0, 0.7, 0.2, -0.3];
    vec![
        bits(
            "unit keeps, d = 5",
            dropout::unit_keeps_kernel(&short, 0.3),
            budget,
            isa,
        ),
        bits(
            "unit keeps, d = 130",
            dropout::unit_keeps_kernel(&long, 0.1),
            budget,
            isa,
        ),
        bits("sum, d = 5", dropout::sum_kernel(&short, 0.3), budget, isa),
        bits("sum, d = 130", dropout::sum_kernel(&long, 0.5), budget, isa),
        bits(
            "kept count, d = 6",
            dropout::kept_count_kernel(6, 0.3),
            budget,
            isa,
        ),
        bits(
            "moments, d = 130",
            dropout::moments_kernel(&long, 0.3),
            budget,
            isa,
        ),
        bits(
            "attention sums",
            attention_row::row_sums_kernel(&a, &v, 0.1),
            budget,
            isa,
        ),
        bits(
            "attention row",
            attention_row::row_kernel(&a, &v, 0.5),
            budget,
            isa,
        ),
        bits(
            "attention histogram",
            attention_row::row_sum_histogram_kernel(&a, 0.5, 11, |r| {
                Some((r * 4.0).round() as usize)
            }),
            budget,
            isa,
        ),
        bits(
            "independent column sums",
            mask_shape::column_sums_kernel::<3>(&block, 4, false, 0.3),
            budget,
            isa,
        ),
        bits(
            "shared column sums",
            mask_shape::column_sums_kernel::<3>(&block, 4, true, 0.3),
            budget,
            isa,
        ),
        bits(
            "independent zero columns",
            mask_shape::zero_column_kernel(4, 3, false, 0.3),
            budget,
            isa,
        ),
        bits(
            "shared zero columns",
            mask_shape::zero_column_kernel(4, 3, true, 0.3),
            budget,
            isa,
        ),
        bits(
            "affine gap",
            ensemble::affine_gap_kernel(&short, &w, -1.0, 0.3),
            budget,
            isa,
        ),
        bits(
            "ReLU gap",
            ensemble::relu_gap_kernel(&short, &w, -1.0, 0.3),
            budget,
            isa,
        ),
        bits(
            "log-sum-exp gap",
            ensemble::log_sum_exp_gap_kernel(&short, 0.3),
            budget,
            isa,
        ),
    ]
}
