//! One claim, one place: a claim id the crate's registry defines is not
//! defined again by the Python binding (`python/src/`), which builds its
//! claims from the Rust ones at the user's input
//! ([`dropmc::claims::dropout::at`]) and names a claim through the family's
//! `ids` constants.
//!
//! The scan: no source file of the binding holds an id of the registry's
//! claims, of any family, as a string literal (`"family.name"`).

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("reads the folder") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The binding's source files the scan reads, with their text.
fn binding_sources() -> Vec<(PathBuf, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/src");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("reads the file");
            (p, text)
        })
        .collect()
}

/// `(file, id)` for every registry id written as a string literal in
/// `sources`.
fn restated_ids(sources: &[(PathBuf, String)]) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for claim in dropmc::claims::registry() {
        let literal = format!("\"{}\"", claim.id());
        for (path, text) in sources {
            if text.contains(&literal) {
                found.push((path.display().to_string(), claim.id().to_string()));
            }
        }
    }
    found
}

#[test]
fn the_binding_defines_no_claim_id_the_crate_defines() {
    let sources = binding_sources();
    assert!(
        sources
            .iter()
            .any(|(p, _)| p.ends_with("claims/moments.rs")),
        "the scan reads the binding's claim files"
    );
    let found = restated_ids(&sources);
    assert!(
        found.is_empty(),
        "claim ids of the crate's registry written again in the binding (name them through \
         dropmc::claims::<family>::ids, build the claim from the Rust one): {found:?}"
    );
}

#[test]
fn the_scan_sees_a_restated_id() {
    for id in [
        "dropout.sum_variance",
        "attention.row_sum_mean",
        "batchnorm.running_stats",
    ] {
        let planted = vec![(PathBuf::from("planted.rs"), format!("let id = \"{id}\";"))];
        assert_eq!(
            restated_ids(&planted),
            [("planted.rs".to_string(), id.to_string())]
        );
    }
}
