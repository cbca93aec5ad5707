//! The next-order corrections (issue 9) against exact enumeration: on random
//! inputs with d ≤ 16 the second-order estimate is closer to the exact value
//! than the paper's first-order estimate, for LayerNorm, RMSNorm and the
//! bypass site. (Exact comparisons: no sampling, no false-alarm budget.)

use dropmc::engine::stream;
use dropmc::exact::enumerate_masks;
use dropmc::formulas::second_order::{NoisyUnits, layer_norm_expectation, rms_norm_expectation};
use dropmc::ops::Rate;
use rand_distr::{Distribution, Normal};

/// Exact `E[(y_k − M)/sqrt(V + ε)]` and `E[y_k / sqrt(A + ε)]` by enumeration,
/// written out here independently of the crate's norm ops.
fn exact(h: &[f64], v: &[f64], rate: Rate, eps: f64) -> (Vec<f64>, Vec<f64>) {
    let d = v.len();
    let o = enumerate_masks(d, rate, 2 * d, |mask, out| {
        let y: Vec<f64> = (0..d)
            .map(|k| h[k] + if mask[k] { v[k] / rate.q() } else { 0.0 })
            .collect();
        let m = y.iter().sum::<f64>() / d as f64;
        let a = y.iter().map(|t| t * t).sum::<f64>() / d as f64;
        let var = y.iter().map(|t| (t - m) * (t - m)).sum::<f64>() / d as f64;
        for k in 0..d {
            out[k] = (y[k] - m) / (var + eps).sqrt();
            out[d + k] = y[k] / (a + eps).sqrt();
        }
    })
    .unwrap();
    (o.values[..d].to_vec(), o.values[d..].to_vec())
}

fn max_abs_diff(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

/// Errors (first order, second order) of LayerNorm and RMSNorm at one input.
fn errors(h: &[f64], v: &[f64], rate: Rate, eps: f64) -> [(f64, f64); 2] {
    let d = v.len();
    let (ln, rms) = exact(h, v, rate, eps);
    let units = NoisyUnits::bypass(h, v, rate).unwrap();
    let (ones, zeros) = (vec![1.0; d], vec![0.0; d]);
    let x: Vec<f64> = h.iter().zip(v).map(|(a, b)| a + b).collect();
    let mu = x.iter().sum::<f64>() / d as f64;
    let sigma2 = x.iter().map(|t| (t - mu) * (t - mu)).sum::<f64>() / d as f64;
    let vbar2 = v.iter().map(|b| b * b).sum::<f64>() / d as f64;
    // The paper's leading order: E[V] ≈ σ² + (p/q) mean v² (h = 0 gives
    // (σ² + p μ²)/q), E[R²] = mean x²/q (no bypass) or mean(x²) + (p/q) mean v².
    let lead_v = sigma2 + rate.odds() * vbar2;
    let lead_a = x.iter().map(|t| t * t).sum::<f64>() / d as f64 + rate.odds() * vbar2;
    let ln1: Vec<f64> = x.iter().map(|t| (t - mu) / (lead_v + eps).sqrt()).collect();
    let rms1: Vec<f64> = x.iter().map(|t| t / (lead_a + eps).sqrt()).collect();
    let ln2 = layer_norm_expectation(&units, &ones, &zeros, eps).unwrap();
    let rms2 = rms_norm_expectation(&units, &ones, eps).unwrap();
    [
        (max_abs_diff(&ln1, &ln), max_abs_diff(&ln2, &ln)),
        (max_abs_diff(&rms1, &rms), max_abs_diff(&rms2, &rms)),
    ]
}

#[test]
fn second_order_beats_first_order_on_random_inputs() {
    let normal = Normal::new(0.7, 1.3).unwrap();
    let mut worst_ratio: f64 = 0.0;
    for (case, (d, p, bypass)) in [
        (10, 0.1, false),
        (12, 0.3, false),
        (14, 0.1, true),
        (16, 0.2, true),
        (16, 0.1, false),
    ]
    .into_iter()
    .enumerate()
    {
        for seed in 0..3u64 {
            let mut rng = stream(seed, case as u64);
            let v: Vec<f64> = (0..d).map(|_| normal.sample(&mut rng)).collect();
            let h: Vec<f64> = (0..d)
                .map(|_| if bypass { normal.sample(&mut rng) } else { 0.0 })
                .collect();
            let rate = Rate::new(p).unwrap();
            for (name, (first, second)) in ["LN", "RMS"].iter().zip(errors(&h, &v, rate, 1e-5)) {
                assert!(
                    second < first,
                    "{name} d={d} p={p} bypass={bypass} seed={seed}: second {second:e} vs first {first:e}"
                );
                worst_ratio = worst_ratio.max(second / first);
            }
        }
    }
    println!("largest second/first error ratio: {worst_ratio:.3}");
}

#[test]
fn zz_probe() {
    use dropmc::claims::norm::{SWEEP_D, gap_curve};
    use dropmc::claims::second_order;
    for claim in second_order::norm_claims() {
        let t = std::time::Instant::now();
        let c = gap_curve(claim, &SWEEP_D).unwrap();
        println!("{} {:?}\n gaps {:?}\n rounding {:?}\n local {:?}\n slope {} tol {} A {} B {}", claim.id, t.elapsed(), c.gap, c.rounding, c.local_slopes, c.slope, c.tolerance, c.a, c.b);
    }
}
