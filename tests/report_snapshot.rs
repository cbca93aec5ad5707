//! The default report: every claim passes at the default budget and seed,
//! and the table is locked by an insta snapshot.

mod common;

use dropmc::Registry;
use dropmc::conformance::report::{Options, run, table};
use dropmc::ops::Subject;

#[test]
fn default_report_passes_and_matches_snapshot() {
    let report = run(
        &Registry::default(),
        &Subject::reference(),
        &Options::default(),
    )
    .expect("runs");
    for result in &report.results {
        common::assert_pass(result);
    }
    // With the in-crate example family (feature `example-family`) the
    // table has its rows too; the snapshot is the default build's.
    if cfg!(feature = "example-family") {
        return;
    }
    insta::with_settings!({snapshot_path => "../snapshots", prepend_module_to_snapshot => false}, {
        insta::assert_snapshot!("report_table", table(&report));
    });
}
