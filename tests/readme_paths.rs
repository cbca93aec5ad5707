//! Every path the README names is in the repository (CI runs on a fresh
//! clone, so a path that exists there is tracked by git).

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

/// The repository paths the README names: code spans and link targets that
/// start with one of [`ROOTS`], placeholders (`<family>`) and globs left out.
fn cited_paths(readme: &str) -> Vec<String> {
    let mut cited = Vec::new();
    for (i, piece) in readme.split('`').enumerate() {
        let in_code = i % 2 == 1;
        let candidates: Vec<&str> = if in_code {
            vec![piece]
        } else {
            piece
                .split("](")
                .skip(1)
                .filter_map(|rest| rest.split(')').next())
                .collect()
        };
        for c in candidates {
            let c = c.trim().trim_end_matches([',', '.', ':']);
            let c = c.split(':').next().unwrap_or(c); // `file.rs:12`
            if ROOTS.iter().any(|r| c.starts_with(r))
                && !c.contains(['<', '*', ' ', '='])
                && !c.ends_with("::")
            {
                cited.extend(expand(c));
            }
        }
    }
    cited.sort();
    cited.dedup();
    cited
}

#[test]
fn every_path_the_readme_names_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let cited = cited_paths(&readme);
    assert!(cited.len() > 20, "found only {cited:?}");
    let missing: Vec<_> = cited.iter().filter(|p| !root.join(p).exists()).collect();
    assert!(
        missing.is_empty(),
        "the README names missing paths: {missing:?}"
    );
}

#[test]
fn the_path_finder_reads_code_spans_links_and_braces() {
    let text = "see `src/a/{b,c}.rs` and [doc](docs/x.md), not `src/<f>.rs` or `cargo test`";
    assert_eq!(cited_paths(text), ["docs/x.md", "src/a/b.rs", "src/a/c.rs"]);
}
