//! `dropmc audit --activations FILE` on an `.npz` written here the way
//! `np.savez` writes one (stored zip members of `.npy` arrays): the CLI's
//! JSON is the library's audit of the same capture, and damaged files are
//! exit-2 errors naming the array (python/tests/test_audit.py checks the
//! round trip from `Audit.save` too).

mod common;

use std::io::Write;

use dropmc::audit::npz::{LAYOUT_VERSION, npy_member as npy};
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

const GAMMA: [f64; D] = [1.0, 0.5, 2.0, 1.5];
const BETA: [f64; D] = [0.0, 0.1, -0.2, 0.3];
const GAMMA2: [f64; D] = [0.8, 1.2, 1.0, 0.6];
const BETA2: [f64; D] = [0.2, 0.0, -0.1, 0.0];

/// The capture's arrays (site 0 bypass, site 1 compound) at layout
/// `version`, `skip` left out.
fn write_npz(path: &std::path::Path, version: i64, skip: Option<&str>) {
    write_npz_text(path, version, skip, None);
}

/// [`write_npz`] with the text member `text.0` holding `text.1` instead.
fn write_npz_text(
    path: &std::path::Path,
    version: i64,
    skip: Option<&str>,
    text: Option<(&str, &str)>,
) {
    let member = text.map(|(name, word)| {
        let bytes = npy("|u1", &format!("({},)", word.len()), word.as_bytes());
        (name, bytes)
    });
    write_npz_with(path, version, skip, member);
}

/// [`write_npz`] with the member `member.0` replaced by the `.npy` bytes
/// `member.1`.
fn write_npz_with(
    path: &std::path::Path,
    version: i64,
    skip: Option<&str>,
    member: Option<(&str, Vec<u8>)>,
) {
    let mat = format!("({TOKENS}, {D})");
    let vec = format!("({D},)");
    let members: Vec<(&str, Vec<u8>)> = vec![
        ("version", npy("<i8", "()", &version.to_le_bytes())),
        ("count", npy("<i8", "()", &2i64.to_le_bytes())),
        ("attention_count", npy("<i8", "()", &0i64.to_le_bytes())),
        ("site0_name", npy("|u1", "(5,)", b"drop1")),
        ("site0_form", npy("|u1", "(6,)", b"bypass")),
        ("site0_norm", npy("|u1", "(5,)", b"layer")),
        ("site0_p", npy("<f8", "()", &f64s(&[0.2]))),
        ("site0_eps", npy("<f8", "()", &f64s(&[1e-5]))),
        ("site0_v", npy("<f8", &mat, &f64s(&v()))),
        ("site0_h", npy("<f8", &mat, &f64s(&h()))),
        ("site0_gamma", npy("<f8", &vec, &f64s(&GAMMA))),
        ("site0_beta", npy("<f8", &vec, &f64s(&BETA))),
        ("site1_name", npy("|u1", "(5,)", b"drop2")),
        ("site1_form", npy("|u1", "(8,)", b"compound")),
        ("site1_norm", npy("|u1", "(5,)", b"layer")),
        ("site1_p", npy("<f8", "()", &f64s(&[0.3]))),
        ("site1_eps", npy("<f8", "()", &f64s(&[1e-5]))),
        ("site1_v", npy("<f8", &mat, &f64s(&v()))),
        ("site1_h", npy("<f8", &mat, &f64s(&[0.0; D * TOKENS]))),
        ("site1_gamma", npy("<f8", &vec, &f64s(&GAMMA))),
        ("site1_beta", npy("<f8", &vec, &f64s(&BETA))),
        ("site1_gamma2", npy("<f8", &vec, &f64s(&GAMMA2))),
        ("site1_beta2", npy("<f8", &vec, &f64s(&BETA2))),
        ("site1_eps2", npy("<f8", "()", &f64s(&[1e-6]))),
    ];
    let members = members
        .into_iter()
        .filter(|(name, _)| Some(*name) != skip)
        .map(|(name, bytes)| match &member {
            Some((replaced, replacement)) if *replaced == name => (name, replacement.clone()),
            _ => (name, bytes),
        });
    write_members(path, members);
}

/// An `.npz` of the `.npy` members `members`, stored as `np.savez` does.
fn write_members<'a>(path: &std::path::Path, members: impl Iterator<Item = (&'a str, Vec<u8>)>) {
    let mut zip = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    let stored =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, bytes) in members {
        zip.start_file(format!("{name}.npy"), stored).unwrap();
        zip.write_all(&bytes).unwrap();
    }
    zip.finish().unwrap();
}

/// A capture of one plain LayerNorm site of width `d` (too wide to
/// enumerate above 16, so its truth is sampled) on [`TOKENS`] tokens.
fn write_wide_site(path: &std::path::Path, d: usize) {
    let v: Vec<f64> = (0..d * TOKENS)
        .map(|i| ((i * 7 % 11) as f64 - 5.0) / 3.0)
        .collect();
    let mat = format!("({TOKENS}, {d})");
    let vec = format!("({d},)");
    let members = [
        ("version", npy("<i8", "()", &LAYOUT_VERSION.to_le_bytes())),
        ("count", npy("<i8", "()", &1i64.to_le_bytes())),
        ("attention_count", npy("<i8", "()", &0i64.to_le_bytes())),
        ("site0_name", npy("|u1", "(4,)", b"wide")),
        ("site0_form", npy("|u1", "(5,)", b"plain")),
        ("site0_norm", npy("|u1", "(5,)", b"layer")),
        ("site0_p", npy("<f8", "()", &f64s(&[0.1]))),
        ("site0_eps", npy("<f8", "()", &f64s(&[1e-5]))),
        ("site0_v", npy("<f8", &mat, &f64s(&v))),
        ("site0_h", npy("<f8", &mat, &f64s(&vec![0.0; d * TOKENS]))),
        ("site0_gamma", npy("<f8", &vec, &f64s(&vec![1.0; d]))),
        ("site0_beta", npy("<f8", &vec, &f64s(&vec![0.0; d]))),
    ];
    write_members(path, members.into_iter());
}

fn temp(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("dropmc-audit-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn the_cli_audit_of_a_saved_capture_is_the_librarys() {
    let path = temp("capture.npz");
    write_npz(&path, LAYOUT_VERSION, None);
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
        GAMMA.to_vec(),
        BETA.to_vec(),
        1e-5,
    )
    .unwrap();
    let compound = SiteCapture::new(
        "drop2".into(),
        Form::Plain,
        0.3,
        D,
        v(),
        vec![],
        true,
        GAMMA.to_vec(),
        BETA.to_vec(),
        1e-5,
    )
    .and_then(|c| c.into_compound(GAMMA2.to_vec(), BETA2.to_vec(), 1e-6))
    .unwrap();
    let expected = audit_sites(&[capture, compound], dropmc::audit::DEFAULT_SAMPLES, 3).unwrap();
    assert_eq!(out.trim_end(), report::audit_json(&expected, &[]));
    assert_eq!(expected[1].form, Form::Compound);
    assert!(expected[1].second_order.is_none() && expected[1].c1_only.is_some());
}

#[test]
fn a_damaged_capture_is_an_exit_2_error_naming_the_array() {
    let partial = temp("partial.npz");
    write_npz(&partial, LAYOUT_VERSION, Some("site0_h"));
    let no_ln2 = temp("no_ln2.npz");
    write_npz(&no_ln2, LAYOUT_VERSION, Some("site1_gamma2"));
    let old = temp("old.npz");
    write_npz(&old, 1, None);
    let text = temp("text.npz");
    std::fs::write(&text, "not a zip").unwrap();
    let form = temp("form.npz");
    write_npz_text(&form, LAYOUT_VERSION, None, Some(("site1_form", "bypas")));
    let norm = temp("norm.npz");
    write_npz_text(&norm, LAYOUT_VERSION, None, Some(("site0_norm", "batch")));
    for (path, message) in [
        (partial, "array site0_h: missing"),
        (no_ln2, "array site1_gamma2: missing"),
        (
            old,
            "layout version 1; this dropmc reads version 2 (an older dropmc's capture",
        ),
        (text, "not an .npz"),
        (
            form,
            r#"array site1_form: "bypas", expected "plain", "bypass" or "compound""#,
        ),
        (
            norm,
            r#"array site0_norm: "batch", expected "layer" or "rms""#,
        ),
        (temp("absent.npz"), "cannot open"),
    ] {
        let (code, _, err) = common::dropmc(&["audit", "--activations", path.to_str().unwrap()]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(message), "{err}");
    }
}

/// Issue 52: a `gamma` of the wrong length was reported as "beta has 4
/// values but 3 were expected" (the other array, no file, no site), and a
/// NaN in `v` named neither file nor site. Each error now names the file,
/// the array, the site and what is wrong with it.
#[test]
fn a_wrong_length_or_a_nan_names_the_file_the_array_and_the_site() {
    let short_gamma = temp("short_gamma.npz");
    let three = npy("<f8", "(3,)", &f64s(&GAMMA[..3]));
    write_npz_with(
        &short_gamma,
        LAYOUT_VERSION,
        None,
        Some(("site0_gamma", three)),
    );
    let nan_v = temp("nan_v.npz");
    let mut values = v();
    values[D + 2] = f64::NAN;
    let mat = npy("<f8", &format!("({TOKENS}, {D})"), &f64s(&values));
    write_npz_with(&nan_v, LAYOUT_VERSION, None, Some(("site1_v", mat)));
    for (path, message) in [
        (
            &short_gamma,
            format!(
                "array site0_gamma: has 3 entries, but site0_v has d = {D} columns (one entry \
                 per channel) (site \"drop1\")"
            ),
        ),
        (
            &nan_v,
            format!(
                "array site1_v: holds NaN at index [1, 2] of shape [{TOKENS}, {D}]: a capture \
                 must be finite (site \"drop2\")"
            ),
        ),
    ] {
        let file = path.to_str().unwrap();
        let (code, _, err) = common::dropmc(&["audit", "--activations", file]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(&format!("{file}: {message}")), "{err}");
    }
}

/// Issue 52: `audit --samples 1e12` ran silently for ever on a site too
/// wide to enumerate. It is refused up front with the estimate and the
/// option named; on a site whose truth is enumerated (d = 4), where the
/// draw count changes nothing, the same request runs.
#[test]
fn an_audit_estimated_beyond_an_hour_is_refused_up_front() {
    let wide = temp("wide.npz");
    write_wide_site(&wide, 32);
    let file = wide.to_str().unwrap();
    let start = std::time::Instant::now();
    let (code, _, err) = common::dropmc(&["audit", "--activations", file, "--samples", "1e12"]);
    assert!(start.elapsed().as_secs_f64() < 5.0, "{:?}", start.elapsed());
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "the audit of {file} at --samples 1000000000000 takes about"
        )) && err.contains("more than the 60 min a run may take"),
        "{err}"
    );
    let exact = temp("exact.npz");
    write_npz(&exact, LAYOUT_VERSION, None);
    let exact = exact.to_str().unwrap();
    let (code, _, err) = common::dropmc(&["audit", "--activations", exact, "--samples", "1e12"]);
    assert_eq!(code, 0, "{err}");
}

/// Issue 52: the JSON of a site whose truth is enumerated reported the
/// samples asked for (10¹²) though none was drawn; it reports 0, and the
/// table "exact".
#[test]
fn an_enumerated_site_reports_no_mask_drawn() {
    let exact = temp("drawn.npz");
    write_npz(&exact, LAYOUT_VERSION, None);
    let exact = exact.to_str().unwrap();
    let (code, out, err) = common::dropmc(&[
        "audit",
        "--activations",
        exact,
        "--samples",
        "1e12",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    let sites = json["sites"].as_array().unwrap();
    assert_eq!(sites.len(), 2);
    for site in sites {
        assert_eq!(site["exact"], true, "{site}");
        assert_eq!(site["samples"], 0, "{site}");
    }
}

/// Ctrl-C stops a long audit within a second (the command line keeps the
/// signal's default action).
#[cfg(unix)]
#[test]
fn sigint_stops_a_long_audit_within_a_second() {
    let wide = temp("wide_sigint.npz");
    write_wide_site(&wide, 32);
    // Above the default budget but under the hour: runs for a while.
    let args = [
        "audit",
        "--activations",
        wide.to_str().unwrap(),
        "--samples",
        "1e7",
    ];
    let waited = common::stopped_after_sigint(&args, std::time::Duration::from_millis(300));
    assert!(waited.as_secs_f64() < 1.0, "{waited:?}");
}
