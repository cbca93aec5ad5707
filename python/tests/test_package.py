"""The package says what it is (issue 36 item 6): its version is the crate's, its licence
files ship with it, and its install text names the Rust toolchain it compiles with."""

import importlib.metadata
import pathlib
import re

import dropmc

ROOT = pathlib.Path(__file__).resolve().parents[2]


def manifest_field(path: pathlib.Path, field: str) -> str:
    """A top-level string field of a manifest's first table (`version = "0.1.0"`)."""
    m = re.search(rf'^{field}\s*=\s*"([^"]+)"', path.read_text(), re.M)
    assert m is not None, f"{path} has no {field}"
    return m.group(1)


def test_the_version_is_the_crates_and_the_wheels():
    crate = manifest_field(ROOT / "Cargo.toml", "version")
    assert dropmc.__version__ == crate
    assert manifest_field(ROOT / "python" / "Cargo.toml", "version") == crate
    assert manifest_field(ROOT / "python" / "pyproject.toml", "version") == crate
    assert importlib.metadata.version("dropmc") == crate


def test_the_declared_licences_ship_with_the_source_and_the_wheel():
    declared = manifest_field(ROOT / "Cargo.toml", "license")
    assert declared == "MIT OR Apache-2.0"
    assert "Permission is hereby granted" in (ROOT / "LICENSE-MIT").read_text()
    assert "Apache License" in (ROOT / "LICENSE-APACHE").read_text()
    shipped = {pathlib.PurePath(str(f)).name for f in importlib.metadata.files("dropmc") or []}
    assert {"LICENSE-MIT", "LICENSE-APACHE"} <= shipped, sorted(shipped)


def test_the_install_text_names_the_minimum_rust():
    minimum = manifest_field(ROOT / "Cargo.toml", "rust-version")
    assert manifest_field(ROOT / "python" / "Cargo.toml", "rust-version") == minimum
    for doc in ("README.md", "docs/python.md"):
        text = (ROOT / doc).read_text()
        assert f"Rust {minimum}" in text, f"{doc} does not name Rust {minimum} (rust-version)"
