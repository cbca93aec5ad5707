//! Issue 49: the network family's planted faults. Each wrong rule, put into
//! the ledger the family's claims compose ([`Rules`]), makes a claim fail
//! where the real rules pass:
//!
//! * the ledger without the residual accumulation (the skip path's noise
//!   not carried through the add): `network.residual_variance` disagrees
//!   with its enumerated oracle and its z-test rejects, and
//!   `network.norm_output` fails its order check;
//! * a norm's noise not rescaled by `γ/σ`: `network.norm_output` fails its
//!   order check;
//! * the mean-shift term with the wrong sign: `network.mean_shift` fails
//!   its order check.
//!
//! The order checks are exact arithmetic on exact oracles; the z-tests are
//! at the suite's per-assertion level ([`critical_z`]), the real ledger's
//! recorded by `common::assert_consistent`, the plant's an expected
//! rejection.

mod common;

use dropmc::claims::Claim;
use dropmc::claims::network::{LEDGER, NetworkClaim, Rules, network_claims};
use dropmc::engine::{Budget, DEFAULT_SEED};
use dropmc::formulas::mean_and_variance;
use dropmc::formulas::network::{self as f, Elementwise, Noisy};
use dropmc::ops::{LayerNorm, Subject};
use dropmc::stats::critical_z;

fn claim(id: &str) -> &'static NetworkClaim {
    network_claims()
        .iter()
        .find(|c| c.id() == id)
        .expect("a claim of the family")
}

/// Rule 3 without the accumulation: only the branch's noise survives the add.
fn no_accumulation(skip: &Noisy, branch: &Noisy, _cross: &[f64]) -> Noisy {
    let zero = vec![0.0; skip.mean.len()];
    f::residual_add(&Noisy::clean(&skip.mean), branch, &zero)
}

/// Rule 4 with the output noise left at the projected input noise, not
/// rescaled by `(γ/σ)²`.
fn not_rescaled(y: &Noisy, ln: &LayerNorm) -> Noisy {
    let mut out = f::layernorm(y, ln);
    let sigma2 = mean_and_variance(&y.mean).1 + f::centred_mean_noise(&y.var) + ln.eps();
    for (s, g) in out.var.iter_mut().zip(ln.gamma()) {
        *s *= sigma2 / (g * g);
    }
    out
}

/// Rule 5 with the mean shift subtracted.
fn wrong_sign(y: &Noisy, phi: Elementwise) -> Noisy {
    let mut out = f::elementwise(y, phi);
    for ((m, &v), &s) in out.mean.iter_mut().zip(&y.mean).zip(&y.var) {
        *m -= 2.0 * f::mean_shift(phi, v, s);
    }
    out
}

fn order_passes(id: &str, rules: &Rules) -> bool {
    let check = claim(id).order_check_with(rules).expect("measured");
    println!("{id}: {}", check.summary());
    check.passed()
}

#[test]
fn the_residual_variance_without_accumulation_fails_its_oracle_and_its_z_test() {
    let claim = claim("network.residual_variance");
    let oracle = claim.oracle().expect("enumerates").expect("an oracle");
    let real = claim.closed_and_rival(&LEDGER).expect("closed form").0;
    assert!(oracle.agrees_with(&real), "{real:?} vs {oracle:?}");
    let planted = Rules {
        residual_add: no_accumulation,
        ..LEDGER
    };
    let wrong = claim.closed_and_rival(&planted).expect("closed form").0;
    assert!(!oracle.agrees_with(&wrong), "{wrong:?} vs {oracle:?}");
    let budget = Budget::new(claim.default_samples(), DEFAULT_SEED).expect("a budget");
    let estimate = claim
        .estimate(&Subject::reference(), budget)
        .expect("samples");
    for (k, (e, r)) in estimate.iter().zip(&real).enumerate() {
        common::assert_consistent(&format!("{}[{k}]", claim.id()), *e, *r);
    }
    let z = estimate
        .iter()
        .zip(&wrong)
        .map(|(e, c)| ((e.value - c) / e.stderr).abs())
        .fold(0.0, f64::max);
    assert!(z > critical_z(), "the plant: max |z| = {z}");
}

#[test]
fn the_norm_output_fails_its_order_check_without_accumulation_or_without_the_rescaling() {
    let id = "network.norm_output";
    assert!(order_passes(id, &LEDGER));
    for planted in [
        Rules {
            residual_add: no_accumulation,
            ..LEDGER
        },
        Rules {
            layernorm: not_rescaled,
            ..LEDGER
        },
    ] {
        assert!(!order_passes(id, &planted));
    }
}

#[test]
fn the_mean_shift_with_the_wrong_sign_fails_its_order_check() {
    let id = "network.mean_shift";
    assert!(order_passes(id, &LEDGER));
    let planted = Rules {
        elementwise: wrong_sign,
        ..LEDGER
    };
    assert!(!order_passes(id, &planted));
}

/// The order checks' grouped oracles (by kept counts) agree with the full
/// enumeration of every mask at the claims' own widths, within both
/// rounding bounds.
#[test]
fn the_grouped_oracles_agree_with_full_enumeration() {
    use dropmc::claims::network::stacks;
    let cases = [
        (
            "network.norm_output",
            stacks::pre_ln(stacks::PRE_LN_D).grouped(),
        ),
        ("network.mean_shift", {
            let stack = stacks::mean_shift(stacks::MEAN_SHIFT_D);
            stack.grouped(stacks::mean_shift_sup(&stack))
        }),
    ];
    for (id, grouped) in cases {
        let grouped = grouped.expect("grouped");
        let full = claim(id).oracle().expect("enumerates").expect("an oracle");
        let d = full.values.len();
        for k in 0..d {
            let g = usize::from(k >= d / 2);
            let gap = (full.values[k] - grouped.values[g]).abs();
            assert!(
                gap <= full.rounding[k] + grouped.rounding[g],
                "{id} unit {k}: full {} vs grouped {}",
                full.values[k],
                grouped.values[g]
            );
        }
    }
}
