//! What the command line and the bindings read (a module of its own so that
//! `eval`'s argument structs use it without depending on the CLI): counts written as `1000000` or `1e6`, lists
//! of numbers given inline or from a file (`@PATH`, `@-` for stdin), and
//! LayerNorm/RMSNorm ε by value or by framework name.

use crate::error::Error;

/// A whole count such as `--samples`: digits (`1000000`, `1_000_000`) or a
/// power-of-ten form (`1e6`, `2.5e6`) whose value is a whole number.
///
/// The power-of-ten form is read as a decimal mantissa times `10^k`, in
/// integer arithmetic: `2.5e6` is `25 · 10^5`, so no count is rounded
/// through a float. A value that is not whole (`1.5e0`), negative, or beyond
/// `u64` is refused with a message naming the forms that are accepted.
pub fn parse_count(text: &str) -> Result<u64, String> {
    let cleaned: String = text.trim().chars().filter(|c| *c != '_').collect();
    let refuse =
        || format!("{text:?} is not a whole number >= 0 (write it as 1000000, 1_000_000 or 1e6)");
    let too_large = || format!("{text:?} is too large: the largest count is {}", u64::MAX);
    let (mantissa, exponent) = match cleaned.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.parse::<u32>().map_err(|_| refuse())?),
        None => (cleaned.as_str(), 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits_ok = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    if whole.is_empty() && fraction.is_empty() || !digits_ok(whole) || !digits_ok(fraction) {
        return Err(refuse());
    }
    // mantissa = digits · 10^(−fraction.len()), so the value is
    // digits · 10^(exponent − fraction.len()); whole only when the fraction's
    // digits beyond the exponent are zeros.
    let digits = format!("{whole}{fraction}");
    let shift = i64::from(exponent) - fraction.len() as i64;
    let (kept, dropped) = if shift >= 0 {
        (digits.as_str(), "")
    } else {
        let cut = digits.len().saturating_sub((-shift) as usize);
        digits.split_at(cut)
    };
    if dropped.chars().any(|c| c != '0') {
        return Err(refuse());
    }
    let base: u64 = if kept.is_empty() {
        0
    } else {
        // Only digits remain here: a parse error is an overflow.
        kept.parse().map_err(|_| too_large())?
    };
    if base == 0 {
        return Ok(0);
    }
    let scale = 10u64
        .checked_pow(shift.max(0) as u32)
        .ok_or_else(too_large)?;
    base.checked_mul(scale).ok_or_else(too_large)
}

/// A list of finite numbers: inline (`1,2,3`), or from a file with `@PATH`
/// (`@-` reads standard input). In a file, numbers may be separated by
/// commas, spaces, tabs or newlines, so a column written by numpy's
/// `savetxt` or a JSON-free dump of `d = 10⁶` values works as it is.
pub fn read_list(flag: &str, text: &str) -> Result<Vec<f64>, Error> {
    let Some(path) = text.strip_prefix('@') else {
        if text.trim().is_empty() {
            return Err(Error::InvalidOption {
                what: format!("{flag} is empty: give at least one number"),
            });
        }
        return crate::error::parse_list(flag, text);
    };
    let contents = if path == "-" {
        let mut buf = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut buf).map_err(|e| {
            Error::InvalidOption {
                what: format!("{flag} @-: cannot read standard input: {e}"),
            }
        })?;
        buf
    } else {
        std::fs::read_to_string(path).map_err(|e| Error::InvalidOption {
            what: format!("{flag} @{path}: cannot read the file: {e}"),
        })?
    };
    let tokens = file_tokens(&contents);
    if tokens.is_empty() {
        return Err(Error::InvalidOption {
            what: format!("{flag} @{path}: the file holds no numbers"),
        });
    }
    crate::error::parse_list(&format!("{flag} (from @{path})"), &tokens.join(","))
}

/// The numbers' tokens of a list file: split at commas and whitespace, with
/// everything from a `#` to the end of its line a comment (the header
/// `numpy.savetxt(..., header=...)` writes).
fn file_tokens(contents: &str) -> Vec<&str> {
    contents
        .lines()
        .map(|line| line.split_once('#').map_or(line, |(numbers, _)| numbers))
        .flat_map(|line| line.split(|c: char| c == ',' || c.is_whitespace()))
        .filter(|t| !t.is_empty())
        .collect()
}

/// `n` when it is at least 2 (a standard error needs two draws), else an
/// error naming `flag` and what it counts (`--replicates`, "replicates").
#[cfg(feature = "cli")]
pub fn at_least_two(flag: &str, what: &str, n: u64) -> Result<u64, Error> {
    if n < 2 {
        return Err(Error::InvalidOption {
            what: format!("{flag} {n} is too few: a standard error needs at least 2 {what}"),
        });
    }
    Ok(n)
}

/// One finite number.
pub fn read_number(flag: &str, text: &str) -> Result<f64, Error> {
    match crate::error::parse_list(flag, text)?.as_slice() {
        [v] => Ok(*v),
        _ => Err(Error::Parse {
            what: flag.to_string(),
            token: text.to_string(),
        }),
    }
}

/// PyTorch's default ε of `nn.LayerNorm` (`eps=1e-05`).
pub const TORCH_EPS: f64 = 1e-5;
/// Flax's default ε of `nn.LayerNorm` and `nn.RMSNorm` (`epsilon=1e-6`).
pub const FLAX_EPS: f64 = 1e-6;

/// A normalization ε: a number, or `torch` (1e-5) / `flax` (1e-6) for the
/// frameworks' defaults.
pub fn read_eps(flag: &str, text: &str) -> Result<f64, Error> {
    match text.trim() {
        "torch" | "pytorch" => Ok(TORCH_EPS),
        "flax" | "jax" => Ok(FLAX_EPS),
        other => read_number(flag, other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_in_every_accepted_form() {
        assert_eq!(parse_count("1000000"), Ok(1_000_000));
        assert_eq!(parse_count("1_000_000"), Ok(1_000_000));
        assert_eq!(parse_count("1e6"), Ok(1_000_000));
        assert_eq!(parse_count("2.5e6"), Ok(2_500_000));
        assert_eq!(parse_count("1E10"), Ok(10_000_000_000));
        assert_eq!(parse_count("0"), Ok(0));
        assert_eq!(parse_count("1.50e1"), Ok(15));
    }

    #[test]
    fn counts_that_are_not_whole_or_too_large_are_refused() {
        for bad in ["-1", "1.5", "1.5e0", "e6", "", "1e", "1e-3", "0x10", "nan"] {
            let err = parse_count(bad).expect_err(bad);
            assert!(err.contains("1e6"), "{bad}: {err}");
        }
        for huge in ["1e20", "1e30", "18446744073709551616"] {
            let err = parse_count(huge).expect_err(huge);
            assert!(err.contains("too large"), "{huge}: {err}");
        }
    }

    #[test]
    fn lists_come_from_files_with_any_separator() {
        let path = std::env::temp_dir().join(format!("dropmc-list-{}.txt", std::process::id()));
        std::fs::write(&path, "1, 2\n3\t4  5\n\n").unwrap();
        let arg = format!("@{}", path.display());
        assert_eq!(
            read_list("--x", &arg).unwrap(),
            vec![1.0, 2.0, 3.0, 4.0, 5.0]
        );
        std::fs::remove_file(&path).unwrap();
        let missing = read_list("--x", &arg).unwrap_err().to_string();
        assert!(
            missing.contains("--x") && missing.contains("cannot read"),
            "{missing}"
        );
    }

    #[test]
    fn list_files_may_carry_comment_lines_and_an_empty_one_is_named() {
        let dir = std::env::temp_dir().join(format!("dropmc-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("savetxt.txt");
        // What numpy.savetxt(path, [1.5, -2, 3e-3], header="x values") writes.
        std::fs::write(&path, "# x values\n1.5\n-2 # inline\n3e-3\n").unwrap();
        let arg = format!("@{}", path.display());
        assert_eq!(read_list("--x", &arg).unwrap(), vec![1.5, -2.0, 3e-3]);
        std::fs::write(&path, "# only a header\n").unwrap();
        let e = read_list("--x", &arg).unwrap_err().to_string();
        assert!(e.ends_with("the file holds no numbers"), "{e}");
        assert!(!e.contains("\"\""), "{e}");
        let e = read_list("--x", " ").unwrap_err().to_string();
        assert!(e.ends_with("--x is empty: give at least one number"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn counts_below_two_name_what_they_count() {
        let e = at_least_two("--replicates", "replicates", 1)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--replicates 1") && !e.contains("samples"),
            "{e}"
        );
        assert_eq!(at_least_two("--masks", "masks", 2).unwrap(), 2);
    }

    #[test]
    fn eps_by_framework_name() {
        assert_eq!(read_eps("--eps", "torch").unwrap(), TORCH_EPS);
        assert_eq!(read_eps("--eps", "flax").unwrap(), FLAX_EPS);
        assert_eq!(read_eps("--eps", "1e-3").unwrap(), 1e-3);
        assert!(read_eps("--eps", "tf").is_err());
    }
}
