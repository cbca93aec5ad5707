//! Hostile arguments at the command line: every one exits with status 2 and
//! one line on stderr, never a panic. The arguments are fixed hostile cases
//! (NaN, ±inf, overflow, subnormals, empty lists, mismatched lengths, p at
//! 1, sample and seed counts of 0 and 1, unknown families) plus a small
//! proptest over the `--x`/`--p` text of `eval ln`. Each case runs the
//! binary with at most a handful of draws, so the file takes about a second.

mod common;

use common::{assert_rejected, dropmc};

use proptest::prelude::*;

#[test]
fn hostile_eval_arguments_are_rejected_on_one_line() {
    let cases: &[&[&str]] = &[
        &[
            "eval",
            "ln",
            "--x",
            "1e308,1e308",
            "--p",
            "0.5",
            "--samples",
            "4",
        ],
        &[
            "eval",
            "ln",
            "--x",
            "1,-1e308,1e308",
            "--p",
            "0.5",
            "--samples",
            "4",
        ],
        &["eval", "ln", "--x", "1,2", "--p", "1", "--samples", "4"],
        &["eval", "ln", "--x", "nan,1", "--p", "0.5", "--samples", "4"],
        &["eval", "ln", "--x", "inf,1", "--p", "0.5", "--samples", "4"],
        &["eval", "ln", "--x", "", "--p", "0.5", "--samples", "4"],
        &["eval", "ln", "--x", "3", "--p", "0.5", "--samples", "4"],
        &["eval", "ln", "--x", "0,0,0", "--p", "0.5", "--samples", "4"],
        &[
            "eval",
            "ln",
            "--x",
            "1,2",
            "--p",
            "0.5",
            "--gamma",
            "1",
            "--samples",
            "4",
        ],
        &[
            "eval",
            "ln",
            "--x",
            "1,2",
            "--p",
            "0.5",
            "--eps",
            "nan",
            "--samples",
            "4",
        ],
        &["eval", "ln", "--x", "1,2", "--p", "0.5", "--samples", "1"],
        &["eval", "rms", "--x", "0,0", "--p", "0.5", "--samples", "4"],
        &[
            "eval",
            "rms",
            "--x",
            "1e200,1e200",
            "--p",
            "0.5",
            "--samples",
            "4",
        ],
        &["eval", "rms", "--x", "1,2", "--p", "-inf", "--samples", "4"],
        &[
            "eval",
            "bypass",
            "--h",
            "0,0",
            "--v",
            "1",
            "--p",
            "0.5",
            "--samples",
            "4",
        ],
        &[
            "eval",
            "bypass",
            "--h",
            "1,1",
            "--v",
            "0,0",
            "--p",
            "0.5",
            "--samples",
            "4",
        ],
        &[
            "eval",
            "compound",
            "--x",
            "1,2,3",
            "--p",
            "0.5",
            "--gamma1",
            "1e308,1e308,1e308",
            "--beta1",
            "0,0,0",
            "--samples",
            "4",
        ],
        &[
            "eval",
            "compound",
            "--x",
            "1,2,3",
            "--p",
            "0.5",
            "--gamma1",
            "1,1",
            "--beta1",
            "0,0,0",
            "--samples",
            "4",
        ],
        &[
            "eval",
            "attn",
            "--a",
            "0.5,0.5",
            "--p",
            "0.3",
            "--values",
            "1e300,1",
            "--samples",
            "3",
        ],
        &[
            "eval",
            "attn",
            "--a",
            "0.7,0.7",
            "--p",
            "0.3",
            "--samples",
            "3",
        ],
        &[
            "eval",
            "attn",
            "--a",
            "1",
            "--p",
            "0.9999999999999999",
            "--samples",
            "1",
        ],
        &[
            "eval",
            "bn",
            "--running-mean",
            "0",
            "--running-var",
            "0",
            "--p",
            "0.5",
            "--samples",
            "4",
        ],
        &[
            "eval",
            "bn",
            "--running-mean",
            "0,1",
            "--running-var",
            "1",
            "--p",
            "0.5",
            "--samples",
            "4",
        ],
        &[
            "eval",
            "bn",
            "--running-mean",
            "1,2",
            "--running-var",
            "1,-1",
            "--p",
            "0.5",
            "--samples",
            "4",
        ],
        &[
            "eval",
            "moments",
            "--x",
            "1e300",
            "--p",
            "0.5",
            "--samples",
            "4",
        ],
    ];
    for args in cases {
        assert_rejected(args);
    }
}

#[test]
fn hostile_command_options_are_rejected_on_one_line() {
    let cases: &[&[&str]] = &[
        &["calibrate", "--seeds", "0"],
        &["calibrate", "--seeds", "1"],
        &[
            "calibrate",
            "--seeds",
            "2",
            "--family",
            "no_such_family",
            "--samples",
            "4",
        ],
        &["power", "--seeds", "0"],
        &[
            "power",
            "--seeds",
            "1",
            "--family",
            "no_such_family",
            "--samples",
            "4",
        ],
        &["stack", "--depth", "0"],
        &["stack", "--p", "1"],
        &["stack", "--p", "nan"],
        &["stack", "--replicates", "0"],
        &["stack", "--replicates", "1"],
    ];
    for args in cases {
        assert_rejected(args);
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 24,
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::Direct("proptest-regressions/hostile_cli.txt"))),
        ..ProptestConfig::default()
    })]

    /// Any text for `--x` and `--p`: exit 0 with output, or exit 2 with one
    /// stderr line; never a panic.
    #[test]
    fn eval_ln_never_panics_on_any_text(x in "[-0-9eE.,naifNI ]{0,16}", p in "[-0-9.einf]{0,6}") {
        let (code, _, stderr) = dropmc(&["eval", "ln", "--x", &x, "--p", &p, "--samples", "4", "--json"]);
        prop_assert!(!stderr.contains("panicked"), "{}", stderr);
        prop_assert!(code == 0 || code == 2, "code {} {}", code, stderr);
        if code == 2 {
            prop_assert_eq!(stderr.trim_end().lines().count(), 1, "{}", stderr);
        }
    }
}
