"""Issue 24: the Python surface speaks Python, and is never green by accident."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import dropmc

from implementations import Correct, Tutorial

P = 0.3


# --- never green by accident -------------------------------------------------


def test_below_the_minimum_budget_a_correct_dropout_is_undecided_not_passed():
    result = dropmc.check_dropout(Correct(P, seed=40).forward, P, samples=1000, backward=False)
    assert not result.failed()
    assert not result.decided and not result.passed and not bool(result)
    minimum = result.minimum_budget()
    assert minimum == max(c["min_samples"] for c in result.inconclusive())
    assert minimum > 1000
    assert "inconclusive:" in str(result) and str(minimum) in str(result)
    with pytest.raises(AssertionError, match=rf"undecided: .* minimum budget .*samples >= {minimum}"):
        dropmc.testing.assert_dropout(Correct(P, seed=40).forward, P, samples=1000, backward=False)


def test_at_the_minimum_budget_a_correct_dropout_is_decided_and_passes():
    probe = dropmc.check_dropout(Correct(P, seed=41).forward, P, samples=1000, backward=False)
    result = dropmc.check_dropout(Correct(P, seed=41).forward, P, samples=probe.minimum_budget(), backward=False)
    assert result.decided and result.passed, str(result)
    assert result.minimum_budget() is None


def test_the_mde_power_in_the_docstring_is_the_suites():
    power = dropmc.mde_power()
    assert f"{power * 100:.0f} % power" in dropmc.Result.__doc__


# --- the import surface ------------------------------------------------------


def test_testing_is_reachable_after_import_dropmc():
    code = "import dropmc; print(dropmc.testing.assert_dropout.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "assert_dropout"


def test_the_package_is_typed():
    assert os.path.exists(os.path.join(os.path.dirname(dropmc.__file__), "py.typed"))


# --- errors in Python's terms ------------------------------------------------


def test_eval_names_python_arguments():
    with pytest.raises(ValueError, match=r"^x is empty$"):
        dropmc.eval("ln", x=[], p=0.1)
    with pytest.raises(TypeError, match=r"^unknown argument gama; did you mean gamma\?$"):
        dropmc.eval("ln", x=[1, 2, 3], p=0.1, gama=[1, 1, 1])
    with pytest.raises(TypeError, match=r"^missing argument p$"):
        dropmc.eval("ln", x=[1, 2, 3])
    with pytest.raises(TypeError, match=r"^missing arguments x, p$"):
        dropmc.eval("ln")
    # A message from the Rust side names the keyword, not the flag.
    with pytest.raises(ValueError) as info:
        dropmc.eval("ln", x=[1, float("nan")], p=0.1)
    assert "--" not in str(info.value) and "x" in str(info.value)
    # What works still works.
    out = dropmc.eval("ln", x=[1, 2, 3], p=0.1, samples=0)
    assert out["quantity"] == "ln"


def test_a_quantity_one_letter_off_gets_a_suggestion():
    with pytest.raises(ValueError, match=r'did you mean "ln"\?') as info:
        dropmc.eval("lm", x=[1, 2])
    assert "known quantities:" in str(info.value)
    with pytest.raises(ValueError) as info:
        dropmc.eval("zzzz", x=[1, 2])
    assert "did you mean" not in str(info.value)


def test_a_forward_returning_a_str_is_named_as_such():
    with pytest.raises(TypeError, match=r"returned str \('nope'\), not an array"):
        dropmc.check_dropout(lambda x, training: "nope", P)


def test_a_float32_forward_under_the_default_dtype_gets_the_hint():
    def forward(x, training):
        return Correct(P, seed=42).forward(x.astype(np.float32), training)

    with pytest.raises(TypeError, match=r"pass dtype=np\.float32"):
        dropmc.check_dropout(forward, P)


def test_a_failed_claim_says_what_was_seen():
    layer = Tutorial(P, seed=43)
    result = dropmc.check_dropout(layer.forward, P, rng_state=layer.rng_state, samples=100_000)
    failed = result.failed()
    assert failed
    for c in failed:
        assert c["note"], c
    identity = result.claim("semantics.eval_identity")
    assert identity["note"].startswith("saw "), identity


def test_the_callables_signatures_are_stated():
    assert "forward(x, training)" in dropmc.check_dropout.__doc__
    assert "**one** argument" in dropmc.check_norm_site.__doc__


# --- Ctrl-C --------------------------------------------------------------------

_LONG_EVAL = textwrap.dedent(
    """
    import sys, time, numpy as np, dropmc
    x = np.linspace(-1.0, 2.0, 10**5)
    print("ready", flush=True)
    start = time.monotonic()
    try:
        dropmc.eval("ln", x=x, p=0.1, samples=10**7)
    except KeyboardInterrupt:
        print("interrupted", time.monotonic() - start, flush=True)
        sys.exit(0)
    print("finished", flush=True)
    """
)


def _interrupt_latency() -> float:
    child = subprocess.Popen(
        [sys.executable, "-c", _LONG_EVAL], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert child.stdout.readline().strip() == "ready"
    time.sleep(1.5)  # well inside the Rust call (10^7 draws at d = 10^5 take minutes)
    sent = time.monotonic()
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=30)
    waited = time.monotonic() - sent
    assert "interrupted" in out, out + err
    return waited


def test_ctrl_c_interrupts_a_long_eval_within_a_second():
    # The engine asks between chunks (4096 draws, ~0.3 s at d = 10^5 on an
    # idle core); on a machine shared with other jobs one wait can exceed
    # that, so the best of three attempts is held to the second.
    waits = []
    for _ in range(3):
        waits.append(_interrupt_latency())
        if waits[-1] < 1.0:
            break
    assert min(waits) < 1.0, f"stopped {waits} s after SIGINT"
