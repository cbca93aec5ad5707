"""torch modules dropmc used to mis-handle (issue 44 item 3): BatchNorm2d/3d
checked over N·H·W, a norm-site shape mismatch named by the module's own
normalized_shape, and half-precision modules refused with the reason
instead of being checked in float64 (CI installs torch)."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch)")
dt = pytest.importorskip("dropmc.torch")

P = 0.3
FAST = {"batch": 8, "steps": 10}
BUFFERS = {"batchnorm.running_stats", "batchnorm.fold_buffers"}


@pytest.mark.parametrize("cls", [torch.nn.BatchNorm2d, torch.nn.BatchNorm3d])
def test_batchnorm2d_and_3d_are_checked_over_their_channels(cls):
    # Before: torch's "expected 4D input (got 2D input)" leaked out.
    result = dt.check_batchnorm(cls(3), P, **FAST)
    assert result.passed, str(result)


@pytest.mark.parametrize("cls", [torch.nn.BatchNorm2d, torch.nn.BatchNorm3d])
def test_batchnorm2d_and_3d_declared_biased_fail_the_buffer_claims(cls):
    # The spatial layout must not hide a wrong declaration: torch's running
    # variance is unbiased over N·H·W = the batch's rows.
    result = dt.check_batchnorm(cls(3), P, unbiased=False, **FAST)
    assert not result.passed and result.decided
    assert BUFFERS <= {c["id"] for c in result.failed()}, str(result)


def test_a_norm_site_shape_mismatch_names_the_modules_normalized_shape():
    # Before: "gamma must have len(x) = 8 entries, got 16", though no gamma was passed.
    with pytest.raises(ValueError, match=r"x has 8 entries .*LayerNorm .*normalized_shape = \(16,\)"):
        dt.check_norm_site(torch.nn.Dropout(0.1), torch.nn.LayerNorm(16), [0.5] * 8, samples=1000)


@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
def test_a_half_precision_norm_is_refused_naming_norm_and_its_dtype(half):
    # Before: silently checked in float64.
    name = str(half).replace("torch.", "")
    with pytest.raises(TypeError, match=rf"^norm \(LayerNorm\) has {name} parameters.*dtype='float32'"):
        dt.check_norm_site(torch.nn.Dropout(0.1), torch.nn.LayerNorm(8).to(half), [0.5] * 8, samples=1000)


def test_a_half_precision_norm_cast_on_request_is_checked_in_float32():
    result = dt.check_norm_site(
        torch.nn.Dropout(0.1), torch.nn.LayerNorm(8).to(torch.float16), [0.5 + 0.1 * i for i in range(8)],
        dtype="float32", samples=2000,
    )
    assert not result.failed(), str(result)


@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
def test_a_half_precision_batchnorm_is_refused_naming_layer(half):
    with pytest.raises(TypeError, match=r"^layer \(BatchNorm1d\) has .*float16 parameters"):
        dt.check_batchnorm(torch.nn.BatchNorm1d(3).to(half), P, **FAST)
