//! `dropmc audit --activations FILE` on an `.npz` written here the way
//! `np.savez` writes one (stored zip members of `.npy` arrays): the CLI's
//! JSON is the library's audit of the same capture, and damaged files are
//! exit-2 errors naming the array (python/tests/test_audit.py checks the
//! round trip from `Audit.save` too).

mod common;

use std::io::Write;

use dropmc::audit::npz::npy_member as npy;
use dropmc::audit::{Form, SiteCapture, audit_sites, report};

fn f64s(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

const D: usize = 4;
const TOKENS: usize = 3;

fn v() -> Vec<f64> {
    (0..D * TOKENS)
        .map(|i| ((i * 7 % 5) as f64 - 2.0) / 1.5)
        .collect()
}

fn h() -> Vec<f64> {
    (0..D * TOKENS)
        .map(|i| ((i * 3 % 4) as f64 - 1.5) / 2.0)
        .collect()
}

/// The capture's arrays, `skip` left out.
fn write_npz(path: &std::path::Path, skip: Option<&str>) {
    let mut zip = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    let stored =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    let mat = format!("({TOKENS}, {D})");
    let vec = format!("({D},)");
    let members: Vec<(&str, Vec<u8>)> = vec![
        ("version", npy("<i8", "()", &1i64.to_le_bytes())),
        ("count", npy("<i8", "()", &1i64.to_le_bytes())),
        ("site0_name", npy("|u1", "(5,)", b"drop1")),
        ("site0_form", npy("|u1", "(6,)", b"bypass")),
        ("site0_norm", npy("|u1", "(5,)", b"layer")),
        ("site0_p", npy("<f8", "()", &f64s(&[0.2]))),
        ("site0_eps", npy("<f8", "()", &f64s(&[1e-5]))),
        ("site0_v", npy("<f8", &mat, &f64s(&v()))),
        ("site0_h", npy("<f8", &mat, &f64s(&h()))),
        (
            "site0_gamma",
            npy("<f8", &vec, &f64s(&[1.0, 0.5, 2.0, 1.5])),
        ),
        (
            "site0_beta",
            npy("<f8", &vec, &f64s(&[0.0, 0.1, -0.2, 0.3])),
        ),
    ];
    for (name, bytes) in members {
        if Some(name) == skip {
            continue;
        }
        zip.start_file(format!("{name}.npy"), stored).unwrap();
        zip.write_all(&bytes).unwrap();
    }
    zip.finish().unwrap();
}

fn temp(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("dropmc-audit-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn the_cli_audit_of_a_saved_capture_is_the_librarys() {
    let path = temp("capture.npz");
    write_npz(&path, None);
    let (code, out, err) = common::dropmc(&[
        "audit",
        "--activations",
        path.to_str().unwrap(),
        "--json",
        "--seed",
        "3",
    ]);
    assert_eq!(code, 0, "{err}");
    let capture = SiteCapture::new(
        "drop1".into(),
        Form::Bypass,
        0.2,
        D,
        v(),
        h(),
        true,
        vec![1.0, 0.5, 2.0, 1.5],
        vec![0.0, 0.1, -0.2, 0.3],
        1e-5,
    )
    .unwrap();
    let expected = audit_sites(&[capture], dropmc::audit::DEFAULT_SAMPLES, 3).unwrap();
    assert_eq!(out.trim_end(), report::audit_json(&expected, &[]));
}

#[test]
fn a_damaged_capture_is_an_exit_2_error_naming_the_array() {
    let partial = temp("partial.npz");
    write_npz(&partial, Some("site0_h"));
    let text = temp("text.npz");
    std::fs::write(&text, "not a zip").unwrap();
    for (path, message) in [
        (partial, "array site0_h: missing"),
        (text, "not an .npz"),
        (temp("absent.npz"), "cannot open"),
    ] {
        let (code, _, err) = common::dropmc(&["audit", "--activations", path.to_str().unwrap()]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(message), "{err}");
    }
}
