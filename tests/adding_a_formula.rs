//! `docs/architecture.md`, "Adding a formula", lists the places a formula
//! touches; the in-crate example family (cargo feature `example-family`) is
//! added in exactly those places. Its files are `src/formulas/example.rs`
//! and `src/claims/example.rs`, and every other file of `src/` it touches
//! carries its `feature = "example-family"` gate; read with `example` as
//! `<family>`, they must be the files the guide names, and the guide must
//! name no file of `src/` the example did not need (but the optional ones:
//! `src/registry.rs`, which a family with an `eval` quantity or figures also
//! touches, and `src/exact/`, which a family with an oracle of its own
//! does). No sampling, no statistical assertion.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The guide's section, up to the next heading or paragraph in bold.
fn guide() -> String {
    let doc = std::fs::read_to_string(Path::new(ROOT).join("docs/architecture.md")).unwrap();
    let start = doc
        .find("## Adding a formula")
        .expect("docs/architecture.md has an \"Adding a formula\" section");
    let rest = &doc[start + 2..];
    let end = [rest.find("\n## "), rest.find("\n**")]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(rest.len());
    rest[..end].to_string()
}

/// The paths the guide names in backticks, under `src/`, `snapshots/` or
/// `docs/` (the example's own files read as `<family>`'s).
fn named_paths(guide: &str) -> BTreeSet<String> {
    guide
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|t| {
            ["src/", "snapshots/", "docs/"]
                .iter()
                .any(|root| t.starts_with(root))
                && !t.contains(' ')
        })
        .map(|t| t.replace("/example.rs", "/<family>.rs"))
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The files of `src/` the example family touches, with `example` read as
/// `<family>`.
fn example_touch_points() -> BTreeSet<String> {
    let mut files = Vec::new();
    rust_files(&Path::new(ROOT).join("src"), &mut files);
    files
        .into_iter()
        .filter_map(|path| {
            let relative = path
                .strip_prefix(ROOT)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            let text = std::fs::read_to_string(&path).unwrap();
            if relative.ends_with("/example.rs") {
                Some(relative.replace("/example.rs", "/<family>.rs"))
            } else if text.contains("feature = \"example-family\"") {
                Some(relative)
            } else {
                None
            }
        })
        .collect()
}

#[test]
fn the_example_family_touches_the_files_the_guide_names() {
    let guide = guide();
    let named = named_paths(&guide);
    let touched = example_touch_points();
    assert!(
        touched.contains("src/formulas/<family>.rs") && touched.contains("src/claims/<family>.rs"),
        "{touched:?}"
    );
    let unnamed: Vec<_> = touched.difference(&named).collect();
    assert!(
        unnamed.is_empty(),
        "the example family touches {unnamed:?}, which docs/architecture.md does not name"
    );
    let needed: BTreeSet<String> = named
        .iter()
        .filter(|p| {
            p.starts_with("src/") && *p != "src/registry.rs" && !p.starts_with("src/exact/")
        })
        .cloned()
        .collect();
    let unneeded: Vec<_> = needed.difference(&touched).collect();
    assert!(
        unneeded.is_empty(),
        "docs/architecture.md names {unneeded:?}, which the example family did not need"
    );
    for path in named.iter().filter(|p| !p.contains('<')) {
        assert!(Path::new(ROOT).join(path).exists(), "{path} does not exist");
    }
}

/// Under the feature the example's claims are in the registry and every
/// one declares a law ([`dropmc::claims::Claim::law`]).
#[cfg(feature = "example-family")]
#[test]
fn the_example_family_is_registered_with_its_laws() {
    use dropmc::claims::{Law, example, registry};
    let claims: Vec<_> = registry()
        .into_iter()
        .filter(|c| c.family() == example::FAMILY)
        .collect();
    assert!(!claims.is_empty());
    for claim in claims {
        assert!(
            !matches!(claim.law(), Law::Undeclared),
            "{} declares no law",
            claim.id()
        );
    }
}
