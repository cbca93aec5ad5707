//! Ctrl-C on a long command: it stops at once, and every line its journal
//! had written is still there, whole (each is flushed as it is written).

#![cfg(unix)]

mod common;

use std::io::BufRead;
use std::time::{Duration, Instant};

#[test]
fn sigint_stops_a_journaled_calibration_promptly_keeping_its_lines() {
    let journal = std::env::temp_dir().join(format!("dropmc-sigint-{}.jsonl", std::process::id()));
    let mut child = common::binary_with_default_sigint()
        .args([
            "calibrate",
            "--seeds",
            "100000",
            "--family",
            "dropout",
            "--samples",
            "4000",
            "--json",
            "--out",
        ])
        .arg(&journal)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("runs");
    let lines = |path: &std::path::Path| -> Vec<String> {
        std::fs::File::open(path)
            .map(|f| {
                std::io::BufReader::new(f)
                    .lines()
                    .map_while(Result::ok)
                    .collect()
            })
            .unwrap_or_default()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while lines(&journal).len() < 3 {
        assert!(Instant::now() < deadline, "no journal lines after 60 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = lines(&journal);
    let sent = Instant::now();
    // SAFETY: sends SIGINT to the child this test spawned and still owns.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGINT);
    }
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(5),
            "still running 5 s after SIGINT"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    let waited = sent.elapsed();
    assert!(!status.success());
    assert!(
        waited < Duration::from_secs(1),
        "stopped {waited:?} after SIGINT"
    );
    let after = lines(&journal);
    assert!(after.len() >= before.len());
    assert_eq!(
        after[..before.len()],
        before[..],
        "journaled lines were lost"
    );
    for line in &after {
        serde_json::from_str::<serde_json::Value>(line)
            .unwrap_or_else(|e| panic!("torn journal line {line:?}: {e}"));
    }
    let _ = std::fs::remove_file(&journal);
}
