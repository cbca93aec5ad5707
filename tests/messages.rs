//! The messages issue 24 found misleading, each with the text it now says.

mod common;

use common::dropmc;

fn stderr_of(args: &[&str]) -> String {
    let (code, _, stderr) = dropmc(args);
    assert_eq!(code, 2, "{args:?}: {stderr}");
    stderr
}

#[test]
fn a_deterministic_output_at_p_zero_shows_no_z() {
    let (code, stdout, stderr) = dropmc(&[
        "eval",
        "ln",
        "--x",
        "1,2,3",
        "--p",
        "0",
        "--samples",
        "1000",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("no z is shown"), "{stdout}");
    let z_column = |line: &str| {
        // Rows of E[LN(z)]: no z, whatever the rounding spread.
        !line.starts_with("E[LN(z)]") || !line.contains("41.65")
    };
    assert!(stdout.lines().all(z_column), "{stdout}");
    // At p > 0 the z column is back.
    let (_, stdout, _) = dropmc(&[
        "eval",
        "ln",
        "--x",
        "1,2,3",
        "--p",
        "0.1",
        "--samples",
        "1000",
    ]);
    assert!(!stdout.contains("no z is shown"), "{stdout}");
}

#[test]
fn an_underflowing_variance_is_not_called_constant() {
    let e = stderr_of(&["eval", "ln", "--x", "1e-310,2e-310,0", "--p", "0.1"]);
    assert!(e.contains("σ² of x underflows f64"), "{e}");
    assert!(!e.contains("x is constant"), "{e}");
    // A constant x still is.
    let e = stderr_of(&["eval", "ln", "--x", "2,2,2", "--p", "0.1"]);
    assert!(e.contains("x is constant"), "{e}");
}

#[test]
fn one_unit_and_an_overflowing_variance_name_their_own_cause() {
    // d = 1: a LayerNorm of one unit is constant (issue 33).
    let e = stderr_of(&["eval", "ln", "--x", "5", "--p", "0.1"]);
    assert!(e.contains("d = 1") && !e.contains("underflows"), "{e}");
    // The deviations square above the largest f64: σ² overflows.
    let e = stderr_of(&["eval", "ln", "--x", "1e308,-1e308,1", "--p", "0.1"]);
    assert!(
        e.contains("σ² of x overflows f64") && !e.contains("underflows"),
        "{e}"
    );
}

#[test]
fn counts_below_two_name_their_own_flag() {
    let e = stderr_of(&["stack", "--replicates", "1"]);
    assert!(
        e.contains("--replicates 1 is too few") && !e.contains("samples"),
        "{e}"
    );
    let e = stderr_of(&["bench", "--masks", "0"]);
    assert!(
        e.contains("--masks 0 is too few") && !e.contains("samples"),
        "{e}"
    );
}

#[test]
fn a_negative_sample_count_is_a_bad_value_not_an_unknown_argument() {
    let e = stderr_of(&["eval", "ln", "--x", "1,2", "--p", "0.1", "--samples", "-5"]);
    assert!(!e.contains("unexpected argument"), "{e}");
    assert!(e.contains("\"-5\" is not a whole number >= 0"), "{e}");
}

#[test]
fn the_p_equals_1_remark_only_for_p_equals_1() {
    let e = stderr_of(&["eval", "ln", "--x", "1,2", "--p", "1"]);
    assert!(e.contains("p = 1 would divide"), "{e}");
    for p in ["1.5", "-0.1"] {
        let e = stderr_of(&["eval", "ln", "--x", "1,2", "--p", p]);
        assert!(e.contains("0 <= p < 1"), "{e}");
        assert!(!e.contains("p = 1 would divide"), "{p}: {e}");
    }
}

#[test]
fn one_value_is_singular() {
    let e = stderr_of(&["eval", "ln", "--x", "1,2", "--p", "0.1", "--gamma", "1"]);
    assert!(e.contains("has 1 value but 2 were expected"), "{e}");
}

#[test]
fn a_quantity_one_letter_off_gets_a_suggestion() {
    let e = stderr_of(&["eval", "lm"]);
    assert!(e.contains("tip: did you mean 'ln'?"), "{e}");
    let e = stderr_of(&["eval", "zzzz"]);
    assert!(!e.contains("did you mean"), "{e}");
}

#[test]
fn list_files_take_comments_and_an_empty_one_is_named() {
    let dir = std::env::temp_dir().join(format!("dropmc-messages-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("x.txt");
    std::fs::write(&file, "# header from numpy.savetxt\n1\n2\n4\n").unwrap();
    let arg = format!("@{}", file.display());
    let (code, stdout, stderr) = dropmc(&[
        "eval",
        "ln",
        "--x",
        &arg,
        "--p",
        "0.1",
        "--samples",
        "0",
        "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("\"d\": 3"), "{stdout}");
    std::fs::write(&file, "").unwrap();
    let e = stderr_of(&["eval", "ln", "--x", &arg, "--p", "0.1"]);
    assert!(
        e.contains("the file holds no numbers") && !e.contains("\"\""),
        "{e}"
    );
    let e = stderr_of(&["eval", "ln", "--x", "", "--p", "0.1"]);
    assert!(e.contains("--x is empty") && !e.contains("\"\""), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_quantitys_help_has_the_same_layout() {
    // The short layout: each option's help on the flag's own line.
    for quantity in ["moments", "ln", "rms"] {
        let (code, stdout, _) = dropmc(&["eval", quantity, "--help"]);
        assert_eq!(code, 0);
        let samples = stdout
            .lines()
            .find(|l| l.contains("--samples <SAMPLES>"))
            .unwrap_or_else(|| panic!("{quantity}: {stdout}"));
        assert!(
            samples.contains("Monte Carlo draws"),
            "{quantity}: {stdout}"
        );
    }
}

#[test]
fn a_large_z_against_a_first_order_formula_is_labelled_the_o_1_over_d_gap() {
    // d = 512 is past exact enumeration: E[LN(z)] is z-tested against its
    // first-order formula, whose O(1/d) gap 10^6 draws resolve at p = 0.5.
    let x: Vec<String> = (0..512)
        .map(|k| format!("{}", (k % 7) as f64 - 3.0 + 0.01 * k as f64))
        .collect();
    let x = x.join(",");
    let (code, stdout, stderr) = dropmc(&["eval", "ln", "--x", &x, "--p", "0.5"]);
    assert_eq!(code, 0, "{stderr}");
    let text = stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(text.contains("the formula's O(1/d) gap"), "{stdout}");
    // Where every row has an exact value (d = 3), no such label.
    let (_, small, _) = dropmc(&["eval", "ln", "--x", "1,2,4", "--p", "0.5"]);
    assert!(!small.contains("O(1/d) gap"), "{small}");
}
