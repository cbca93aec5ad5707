"""torch BatchNorm1d through dropmc.torch.check_batchnorm (CI installs torch)."""

import time

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch)")
dt = pytest.importorskip("dropmc.torch")

P = 0.3
FAST = {"batch": 8, "steps": 10}
BUFFERS = {"batchnorm.running_stats", "batchnorm.fold_buffers"}


def test_batchnorm1d_passes_the_batchnorm_claims_at_the_default_budget():
    start = time.perf_counter()
    result = dt.check_batchnorm(torch.nn.BatchNorm1d(3), P)
    print(f"check_batchnorm(BatchNorm1d) at the default budget: {time.perf_counter() - start:.1f} s at one thread")
    assert result.passed, str(result)


def test_batchnorm1d_declared_biased_fails_the_buffer_claims():
    # torch's running variance takes the unbiased batch variance.
    result = dt.check_batchnorm(torch.nn.BatchNorm1d(3), P, unbiased=False, **FAST)
    assert not result.passed and result.decided
    assert BUFFERS <= {c["id"] for c in result.failed()}, str(result)


def test_a_wrong_momentum_fails_the_buffer_claims():
    result = dt.check_batchnorm(torch.nn.BatchNorm1d(3, momentum=0.2), P, momentum=0.1, **FAST)
    assert not result.passed and result.decided
    assert BUFFERS <= {c["id"] for c in result.failed()}, str(result)


def test_a_factory_and_float32():
    result = dt.check_batchnorm(lambda c: torch.nn.BatchNorm1d(c, momentum=0.1), P, dtype="float32", **FAST)
    assert result.passed, str(result)


def test_a_cumulative_average_over_more_than_one_step_is_refused():
    # momentum=None runs one step (test_the_users_layer.py), where the
    # cumulative average is the EMA with momentum 1.
    with pytest.raises(ValueError, match="cumulative"):
        dt.check_batchnorm(torch.nn.BatchNorm1d(3, momentum=None), P, steps=30)
