//! Never green by accident (issue 24): a report that ran claims below their
//! minimum budget exits 3 naming that budget, unless a claim failed (1) or
//! the input was bad (2); such rows show no z, p or MDE.

mod common;

use common::dropmc;
use dropmc::claims::registry;

#[test]
fn a_report_below_the_minimum_budget_is_inconclusive_not_green() {
    let (code, stdout, stderr) = dropmc(&["report", "--samples", "2", "--wide"]);
    assert_eq!(code, 3, "stderr: {stderr}");
    let below: Vec<u64> = registry()
        .iter()
        .map(|c| c.min_samples())
        .filter(|&m| m > 2)
        .collect();
    let largest = below
        .iter()
        .max()
        .copied()
        .expect("some claim needs > 2 draws");
    assert!(
        stderr.contains(&format!(
            "inconclusive: {} claims below their minimum budget (the largest is {largest} draws)",
            below.len()
        )),
        "{stderr}"
    );
    for line in stdout.lines().filter(|l| l.contains("below min")) {
        assert!(!line.contains("inf"), "{line}");
        assert!(!line.contains("0.0e0"), "{line}");
    }
    assert!(stdout.contains("below min"), "{stdout}");
}

#[test]
fn a_report_at_every_claims_minimum_budget_exits_0() {
    // The dropout family at the largest minimum among its claims: decided.
    let min = registry()
        .iter()
        .filter(|c| c.family() == "dropout")
        .map(|c| c.min_samples())
        .max()
        .unwrap();
    let (code, stdout, stderr) = dropmc(&[
        "report",
        "--family",
        "dropout",
        "--samples",
        &min.to_string(),
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(!stdout.contains("below min"), "{stdout}");
}

#[test]
fn bad_input_takes_precedence_over_inconclusive() {
    let (code, _, _) = dropmc(&["report", "--samples", "2", "--family", "nope"]);
    assert_eq!(code, 2);
}

#[test]
fn help_documents_the_exit_statuses_and_the_default_seed() {
    for args in [&["--help"][..], &["report", "--help"][..]] {
        let (code, stdout, _) = dropmc(args);
        assert_eq!(code, 0);
        assert!(stdout.contains("Exit status:"), "{stdout}");
        assert!(stdout.contains("3  inconclusive"), "{stdout}");
    }
    let (_, stdout, _) = dropmc(&["report", "--help"]);
    assert!(
        stdout.contains(&format!("[default: {}]", dropmc::engine::DEFAULT_SEED)),
        "{stdout}"
    );
}
