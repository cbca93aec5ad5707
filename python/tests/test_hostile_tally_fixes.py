"""Fixes for the not-acceptable cases of python/benchmarks/hostile_tally.py
(issue 52's closing tally), one test each."""

import subprocess
import sys

import pytest


def test_dropmc_torch_imports_after_the_merge():
    """The merge left assess.py and network_audit.py importing helpers
    audit.py no longer had: ``import dropmc.torch`` was an ImportError."""
    # The package this interpreter imports (installed, or on the caller's PYTHONPATH),
    # not the source folder, which holds no compiled extension in a clean checkout.
    done = subprocess.run([sys.executable, "-c", "import dropmc.torch, dropmc.assess, dropmc.audit.network"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-500:]


def test_a_one_token_linear_path_row_prints_no_nan_factor():
    """A one-token linear-path site has both gaps bounded by infinity: its
    factor has no value and the table printed ``>nan``."""
    from dropmc.audit.linear import table

    unbounded = {"rms": float("inf"), "rms_se": float("inf"), "upper": float("inf"), "resolved": False}
    row = {"name": "d->n", "form": "linear", "norm": "LayerNorm", "p": 0.1, "d": 16, "tokens": 1,
           "samples": 2000, "uncorrected": unbounded, "first_order": unbounded,
           "factor": float("nan"), "factor_is_lower_bound": True}
    line = table([row]).splitlines()[1]
    assert "nan" not in line.lower(), line
    assert line.rstrip().endswith("—"), line


def test_check_dropout_on_the_meta_device_is_refused_naming_device():
    """device='meta' ran the layer and failed in torch's copy ("Cannot copy
    out of meta tensor"), a NotImplementedError naming nothing of ours."""
    torch = pytest.importorskip("torch")
    import dropmc.torch as dt

    torch.set_num_threads(1)
    with pytest.raises(ValueError, match=r"device='meta'"):
        dt.check_dropout(torch.nn.Dropout(0.1), 0.1, device="meta", samples=1_000)


def test_the_network_audit_runs_after_the_merge():
    """``audit(network=True)`` imported ``_budget_left``, ``_seconds`` and
    ``_show_progress`` from audit.py inside the call: an ImportError at
    the first network audit, which importing the module does not show."""
    torch = pytest.importorskip("torch")
    import dropmc.torch as dt

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.1), torch.nn.LayerNorm(8)).eval()
    result = dt.audit(model, torch.randn(4, 8), network=True, samples=2_000, progress=False, time_budget=30)
    assert len(result.network_sites) == 1


def test_audit_without_the_inputs_its_forward_needs_names_inputs():
    """``audit(model)`` on a forward needing an input ran it and raised the
    forward's own "Sequential.forward() missing 1 required positional
    argument: 'input'", which names none of audit's arguments."""
    torch = pytest.importorskip("torch")
    import dropmc.torch as dt

    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.1), torch.nn.LayerNorm(8)).eval()
    with pytest.raises(TypeError, match=r"^inputs do not fit Sequential\.forward\(input\).*'input'"):
        dt.audit(model, None, samples=2_000, progress=False)


def test_correct_refuses_an_inplace_that_is_not_a_bool():
    """``inplace="no"`` was truthy: the model was corrected in place, the
    opposite of what was asked, with no word."""
    torch = pytest.importorskip("torch")
    import dropmc.torch as dt

    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.1), torch.nn.LayerNorm(8)).eval()
    with pytest.raises(TypeError, match=r"^inplace must be a bool, got str"):
        dt.correct(model, torch.randn(4, 8), inplace="no")
    assert getattr(model, "_dropmc_correction", None) is None  # the model left uncorrected
