//! Long runs lose nothing: `calibrate` and `power` journal each finished
//! seed, and a run resumed from a cut journal ends with the same bits as one
//! that was never interrupted.
//!
//! Budget: none. No verdict of any run is asserted, only that interrupted
//! and uninterrupted runs agree bit for bit (which holds whatever the
//! verdicts are), and that wrong input is rejected. The mutant run asserts
//! flags on a wrong layer (power, stated beside it).

mod common;

use dropmc::Registry;
use std::path::PathBuf;

use common::{assert_rejected, dropmc};
use dropmc::Error;
use dropmc::claims::Claim;
use dropmc::conformance::verify::Replication;
use dropmc::conformance::verify::calibrate::{CalibrationOptions, calibrate_claims};
use dropmc::conformance::verify::journal::Mode;
use dropmc::ops::Subject;

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("dropmc-resume-{}-{name}", std::process::id()))
}

/// Keeps the header and the first `keep` records of `from`, plus the first
/// half of the next record without its newline (a kill in mid-write), in
/// `to`.
fn cut(from: &PathBuf, to: &PathBuf, keep: usize) {
    let text = std::fs::read_to_string(from).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() > keep + 1, "{} lines", lines.len());
    let mut out: String = lines[..=keep].iter().map(|l| format!("{l}\n")).collect();
    let next = lines[keep + 1];
    out.push_str(&next[..next.len() / 2]);
    std::fs::write(to, out).unwrap();
}

fn dropout_claims() -> Vec<&'static dyn Claim> {
    dropmc::claims::registry()
        .into_iter()
        .filter(|c| c.family() == "dropout")
        .collect()
}

#[test]
fn a_resumed_calibration_ends_with_the_same_bits() {
    let claims = dropout_claims();
    let options = CalibrationOptions {
        replication: Replication {
            seeds: 4,
            first_seed: 6100,
            family: None,
        },
        samples: Some(3_000),
        flag_alpha: 0.01,
    };
    let subject = Subject::reference();
    let whole = temp("calibrate-whole.jsonl");
    let resumed = temp("calibrate-resumed.jsonl");
    let run = |mode: Option<&Mode>| {
        calibrate_claims(&claims, &subject, &options, mode, |_, _| {}).unwrap()
    };
    let plain = serde_json::to_string(&run(None)).unwrap();
    let journaled = serde_json::to_string(&run(Some(&Mode::Create(whole.clone())))).unwrap();
    assert_eq!(plain, journaled);
    // Header plus one line per seed.
    let text = std::fs::read_to_string(&whole).unwrap();
    assert_eq!(text.lines().count(), 1 + 4);
    for keep in [0, 2] {
        cut(&whole, &resumed, keep);
        let mut ticks = Vec::new();
        let again = calibrate_claims(
            &claims,
            &subject,
            &options,
            Some(&Mode::Resume(resumed.clone())),
            |done, total| ticks.push((done, total)),
        )
        .unwrap();
        assert_eq!(serde_json::to_string(&again).unwrap(), plain, "keep {keep}");
        // The journal is whole again, byte for byte.
        assert_eq!(std::fs::read_to_string(&resumed).unwrap(), text);
        // Progress advances per claim: one tick at the resume point, then
        // one per claim of each remaining seed, ending at K · claims.
        let total = 4 * claims.len() as u64;
        assert_eq!(ticks.len(), 1 + (4 - keep) * claims.len(), "{ticks:?}");
        assert_eq!(ticks[0], (keep as u64 * claims.len() as u64, total));
        assert_eq!(*ticks.last().unwrap(), (total, total));
    }
    // A journal of other options is refused.
    let mut other = options.clone();
    other.replication.seeds = 5;
    let err = calibrate_claims(
        &claims,
        &subject,
        &other,
        Some(&Mode::Resume(whole.clone())),
        |_, _| {},
    )
    .unwrap_err();
    assert!(matches!(err, Error::Journal { .. }), "{err:?}");
    for path in [whole, resumed] {
        std::fs::remove_file(path).unwrap();
    }
}

#[test]
fn the_cli_resumes_a_cut_calibration_and_rejects_a_mismatched_one() {
    let whole = temp("cli-whole.jsonl");
    let resumed = temp("cli-resumed.jsonl");
    let args = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = [
            "calibrate",
            "--seeds",
            "3",
            "--first-seed",
            "6200",
            "--samples",
            "2000",
            "--family",
            "dropout",
            "--json",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let call = |a: Vec<String>| dropmc(&a.iter().map(String::as_str).collect::<Vec<_>>());
    let (code, first, err) = call(args(&["--out", whole.to_str().unwrap()]));
    assert!(code == 0 || code == 1, "exit {code}: {err}");
    cut(&whole, &resumed, 1);
    let (code2, second, err2) = call(args(&["--resume", resumed.to_str().unwrap()]));
    assert_eq!(code2, code, "{err2}");
    assert!(!first.is_empty());
    assert_eq!(second, first);
    assert_eq!(
        std::fs::read_to_string(&resumed).unwrap(),
        std::fs::read_to_string(&whole).unwrap()
    );
    // Other options, --out with --resume, an unknown subject: exit 2, one line.
    let w = whole.to_str().unwrap();
    for extra in [
        vec!["--resume", w, "--subject", "divide_by_p"],
        vec!["--resume", w, "--out", w],
        vec!["--subject", "no_such_subject"],
    ] {
        let a = args(&extra);
        assert_rejected(&a.iter().map(String::as_str).collect::<Vec<_>>());
    }
    // A record with one digit changed fails its checksum: exit 2, the
    // message names the journal and the line.
    let tampered = temp("cli-tampered.jsonl");
    let text = std::fs::read_to_string(&whole).unwrap();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    // The record's last digit (a statistic's, not the seed's: the seed is
    // checked on its own).
    let at = lines[1].rfind(|c: char| c.is_ascii_digit()).unwrap();
    let digit = if &lines[1][at..=at] == "7" { "8" } else { "7" };
    lines[1].replace_range(at..=at, digit);
    std::fs::write(&tampered, lines.join("\n") + "\n").unwrap();
    let (code3, _, err3) = call(args(&["--resume", tampered.to_str().unwrap()]));
    assert_eq!(code3, 2, "{err3}");
    assert!(
        err3.contains(tampered.to_str().unwrap())
            && err3.contains("line 2")
            && err3.contains("checksum"),
        "{err3}"
    );
    assert_eq!(err3.trim().lines().count(), 1, "{err3}");
    for path in [whole, resumed, tampered] {
        std::fs::remove_file(path).unwrap();
    }
}

#[test]
fn calibrate_flags_the_claims_a_mutant_breaks() {
    // divide_by_p scales survivors by 1/p instead of 1/q: E[z_k] = x_k q/p
    // = 2.33 x_k at p = 0.3. At 2 000 draws dropout.mean's unit x = 3 has
    // SE ≈ 3/0.7 · √(0.21/2000) ≈ 0.044 against an effect of 4 (z ≈ 90 at
    // the mutant's own spread): it fails both seeds with probability ≈ 1,
    // and two failures of two are flagged (tail ≤ 10⁻¹⁸). Power, no budget.
    let (code, out, err) = dropmc(&[
        "calibrate",
        "--seeds",
        "2",
        "--first-seed",
        "6300",
        // Above dropout.mean's minimum budget (3 571 draws), below which its
        // verdict is inconclusive rather than a failure.
        "--samples",
        "20000",
        "--family",
        "dropout",
        "--subject",
        "divide_by_p",
        "--json",
    ]);
    assert_eq!(code, 1, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["subject"], "divide_by_p");
    let mean = v["claims"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "dropout.mean")
        .expect("dropout.mean");
    assert_eq!(mean["failure"]["failures"], 2, "{mean}");
    assert_eq!(mean["failure"]["rate"], 1.0, "{mean}");
    assert_eq!(mean["flagged"], true, "{mean}");
}

#[test]
fn a_resumed_power_run_ends_with_the_same_bits() {
    use dropmc::conformance::verify::power::{PowerOptions, mutant_candidates, power, power_with};
    let candidates: Vec<_> = mutant_candidates().into_iter().take(2).collect();
    let options = PowerOptions {
        replication: Replication {
            seeds: 2,
            first_seed: 6400,
            family: Some("dropout".into()),
        },
        samples: Some(500),
    };
    let whole = temp("power-whole.jsonl");
    let resumed = temp("power-resumed.jsonl");
    let plain = serde_json::to_string(
        &power(&Registry::default(), &candidates, &options, |_, _| {}).unwrap(),
    )
    .unwrap();
    let create = Mode::Create(whole.clone());
    let journaled = power_with(
        &Registry::default(),
        &candidates,
        &options,
        Some(&create),
        |_, _| {},
    )
    .unwrap();
    assert_eq!(serde_json::to_string(&journaled).unwrap(), plain);
    let text = std::fs::read_to_string(&whole).unwrap();
    // Header plus (reference + 2 candidates) × 2 seeds.
    assert_eq!(text.lines().count(), 1 + 3 * 2);
    for keep in [1, 4] {
        cut(&whole, &resumed, keep);
        let resume = Mode::Resume(resumed.clone());
        let again = power_with(
            &Registry::default(),
            &candidates,
            &options,
            Some(&resume),
            |_, _| {},
        )
        .unwrap();
        assert_eq!(serde_json::to_string(&again).unwrap(), plain, "keep {keep}");
        assert_eq!(std::fs::read_to_string(&resumed).unwrap(), text);
    }
    let other = PowerOptions {
        samples: Some(501),
        ..options.clone()
    };
    let resume = Mode::Resume(whole.clone());
    let err = power_with(
        &Registry::default(),
        &candidates,
        &other,
        Some(&resume),
        |_, _| {},
    )
    .unwrap_err();
    assert!(matches!(err, Error::Journal { .. }), "{err:?}");
    for path in [whole, resumed] {
        std::fs::remove_file(path).unwrap();
    }
}
