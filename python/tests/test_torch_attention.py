"""SDPA dropout through dropmc.torch.check_sdpa (CI installs torch)."""

import time

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch)")
dt = pytest.importorskip("dropmc.torch")
F = torch.nn.functional

P = 0.2


def test_sdpa_dropout_passes_the_attention_claims():
    torch.manual_seed(0)
    start = time.perf_counter()
    result = dt.check_sdpa(P)
    print(f"check_sdpa at the default budget: {time.perf_counter() - start:.1f} s at one thread")
    assert result.passed, str(result)
    assert result.claim("attention.dropped_row")["verdict"] == "pass"


def test_sdpa_at_a_longer_row():
    torch.manual_seed(1)
    a = torch.softmax(torch.linspace(-2.0, 2.0, 16, dtype=torch.float64), 0).tolist()
    result = dt.check_sdpa(P, a=a, values=[float(i % 5) - 2.0 for i in range(16)], samples=50_000)
    assert result.passed, str(result)


def renormalising_attention(q, k, v, dropout_p=0.0, scale=None):
    """A planted fault: the dropped probabilities renormalised to sum to 1."""
    w = F.dropout(torch.softmax(q @ k.transpose(-2, -1) * scale, dim=-1), dropout_p)
    s = w.sum(-1, keepdim=True)
    return torch.where(s > 0, w / torch.where(s > 0, s, torch.ones_like(s)), w) @ v


def wrong_scale_attention(q, k, v, dropout_p=0.0, scale=None):
    """A planted fault: survivors scaled by 1/p instead of 1/q."""
    w = torch.softmax(q @ k.transpose(-2, -1) * scale, dim=-1)
    keep = torch.rand(w.shape, dtype=w.dtype) >= dropout_p
    return torch.where(keep, w / dropout_p, torch.zeros_like(w)) @ v


@pytest.mark.parametrize(
    "attention, must_fail",
    [
        (renormalising_attention, {"attention.row_sum_variance", "attention.dropped_row"}),
        (wrong_scale_attention, {"attention.entry_mean", "attention.row_sum_mean", "attention.dropped_row"}),
    ],
)
def test_a_wrong_attention_dropout_fails_naming_the_claims(attention, must_fail):
    torch.manual_seed(2)
    result = dt.check_sdpa(P, attention=attention, samples=50_000)
    assert not result.passed and result.decided
    assert must_fail <= {c["id"] for c in result.failed()}, str(result)
    for claim_id in must_fail:
        assert claim_id in str(result)
