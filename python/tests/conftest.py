"""Fixtures shared by the Python tests."""

import os
import pathlib
import shutil
import signal

import pytest

# A pytest started in the background by a non-interactive shell (`pytest &`)
# inherits SIGINT ignored, and exec keeps an ignored signal ignored: the
# Ctrl-C tests' child interpreters would never raise KeyboardInterrupt and
# fail whatever the package does. A *caught* signal is reset to its default
# at exec, so catching it here gives every child a terminal's disposition.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def dropmc_binary():
    """The dropmc binary: DROPMC_BIN, target/release/dropmc, or on PATH
    (the test is skipped when there is none)."""
    root = pathlib.Path(__file__).resolve().parents[2]
    for candidate in (os.environ.get("DROPMC_BIN"), root / "target" / "release" / "dropmc", shutil.which("dropmc")):
        if candidate and pathlib.Path(candidate).is_file():
            return str(candidate)
    pytest.skip("no dropmc binary: run `cargo build --release` (or set DROPMC_BIN)")
