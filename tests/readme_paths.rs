//! Every path the README and the pages of `docs/` name is in the repository
//! (CI runs on a fresh clone, so a path that exists there is tracked by git),
//! and every page the README links to exists.
//!
//! A code span names a path from the repository's root (`src/ops/fast/site.rs`);
//! a Markdown link is resolved from the folder of the page it is in, as a
//! Markdown viewer resolves it (`[x](figures/a.svg)` in `docs/python.md` is
//! `docs/figures/a.svg`).

use std::path::Path;

/// The top-level folders whose paths the README cites.
const ROOTS: [&str; 9] = [
    "src/",
    "tests/",
    "docs/",
    "examples/",
    "benches/",
    "snapshots/",
    "python/",
    ".ci/",
    "Cargo",
];

/// Splits `a/{b,c}.rs` into `a/b.rs`, `a/c.rs` (one brace group at most).
fn expand(path: &str) -> Vec<String> {
    match (path.find('{'), path.find('}')) {
        (Some(open), Some(close)) if open < close => path[open + 1..close]
            .split(',')
            .map(|alt| format!("{}{}{}", &path[..open], alt, &path[close + 1..]))
            .collect(),
        _ => vec![path.to_string()],
    }
}

/// The repository paths a page names in code spans that start with one of
/// [`ROOTS`], placeholders (`<family>`) and globs left out.
fn cited_paths(page: &str) -> Vec<String> {
    let mut cited = Vec::new();
    // Odd pieces of a split on backticks are the code spans.
    for span in page.split('`').skip(1).step_by(2) {
        let c = span.trim().trim_end_matches([',', '.', ':']);
        let c = c.split(':').next().unwrap_or(c); // `file.rs:12`
        if ROOTS.iter().any(|r| c.starts_with(r))
            && !c.contains(['<', '*', ' ', '='])
            && !c.ends_with("::")
        {
            cited.extend(expand(c));
        }
    }
    cited.sort();
    cited.dedup();
    cited
}

/// The relative link targets of a page (`[text](target)`, anchors and
/// web addresses left out), as written.
fn link_targets(page: &str) -> Vec<String> {
    let mut targets: Vec<String> = page
        .split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .map(|t| t.split('#').next().unwrap_or(t).trim().to_string())
        .filter(|t| !t.is_empty() && !t.contains("://"))
        .collect();
    targets.sort();
    targets.dedup();
    targets
}

/// The README and every Markdown page under `docs/`, as paths from the root.
fn pages(root: &Path) -> Vec<String> {
    let mut pages = vec!["README.md".to_string()];
    for entry in std::fs::read_dir(root.join("docs")).expect("docs/") {
        let name = entry.expect("docs/ entry").file_name();
        let name = name.to_string_lossy();
        if name.ends_with(".md") {
            pages.push(format!("docs/{name}"));
        }
    }
    pages.sort();
    pages
}

#[test]
fn every_path_the_readme_and_docs_name_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut missing = Vec::new();
    let mut cited_in_readme = 0;
    for page in pages(root) {
        let text = std::fs::read_to_string(root.join(&page)).expect("page");
        let cited = cited_paths(&text);
        if page == "README.md" {
            cited_in_readme = cited.len() + link_targets(&text).len();
        }
        for path in cited {
            if !root.join(&path).exists() {
                missing.push(format!("{page}: `{path}`"));
            }
        }
        let folder = Path::new(&page).parent().unwrap_or(Path::new(""));
        for target in link_targets(&text) {
            if !root.join(folder).join(&target).exists() {
                missing.push(format!("{page}: link ({target})"));
            }
        }
    }
    assert!(
        cited_in_readme > 8,
        "the README cites only {cited_in_readme} paths"
    );
    assert!(missing.is_empty(), "missing paths: {missing:?}");
}

#[test]
fn the_path_finder_reads_code_spans_and_braces() {
    let text = "see `src/a/{b,c}.rs` and [doc](docs/x.md), not `src/<f>.rs` or `cargo test`";
    assert_eq!(cited_paths(text), ["src/a/b.rs", "src/a/c.rs"]);
}

#[test]
fn the_link_finder_drops_anchors_and_web_addresses() {
    let text = "[a](x.md#s) [b](../y.md) [c](https://e.org/z) [d](#top)";
    assert_eq!(link_targets(text), ["../y.md", "x.md"]);
}
