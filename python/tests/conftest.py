"""Fixtures shared by the Python tests."""

import os
import pathlib
import shutil

import pytest


@pytest.fixture
def dropmc_binary():
    """The dropmc binary: DROPMC_BIN, target/release/dropmc, or on PATH
    (the test is skipped when there is none)."""
    root = pathlib.Path(__file__).resolve().parents[2]
    for candidate in (os.environ.get("DROPMC_BIN"), root / "target" / "release" / "dropmc", shutil.which("dropmc")):
        if candidate and pathlib.Path(candidate).is_file():
            return str(candidate)
    pytest.skip("no dropmc binary: run `cargo build --release` (or set DROPMC_BIN)")
