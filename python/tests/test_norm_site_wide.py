"""check_norm_site at model widths: gamma, beta, eps, the bypass h + dropout(v).

d <= 20 sites are judged against the exact enumeration, wider ones against
dropmc's reference sampler (paired rows, the mean difference tested
against 0). Each wrong pipeline here differs from the right one in one
place and must fail.
"""

import time

import numpy as np
import pytest

import dropmc

from implementations import Correct

P = 0.1
D = 768
EPS = 1e-5
SAMPLES = 60_000  # above the mean test's minimum budget (about 3.7e4)

_rng = np.random.default_rng(20261201)
V = _rng.normal(0.3, 1.0, D)
H = _rng.normal(-0.2, 1.5, D)
GAMMA = _rng.uniform(0.5, 1.5, D)
BETA = _rng.normal(0.0, 0.3, D)


def layernorm(gamma, beta, eps):
    def norm(y):
        mu = y.mean(axis=1, keepdims=True)
        var = ((y - mu) ** 2).mean(axis=1, keepdims=True)
        return (y - mu) / np.sqrt(var + eps) * gamma + beta

    return norm


def dropout(seed, p=P):
    layer = Correct(p, seed=seed)
    return lambda X: layer.forward(X, True)


def test_numpy_layernorm_with_gamma_beta_eps_and_bypass_at_d768_passes():
    t = time.perf_counter()
    result = dropmc.check_norm_site(
        dropout(1), layernorm(GAMMA, BETA, EPS), V, P,
        gamma=GAMMA, beta=BETA, eps=EPS, h=H, samples=SAMPLES,
    )
    print(f"wall {time.perf_counter() - t:.2f} s")
    assert result.passed, str(result)
    data = result.to_dict()
    assert data["reference"] == "sampled"
    claim = result.claims[0]
    assert claim["id"] == "norm_site.layernorm_bypass_mean"
    assert "sampler" in claim["note"]


def test_numpy_layernorm_without_bypass_at_d768_passes():
    result = dropmc.check_norm_site(
        dropout(2), layernorm(GAMMA, BETA, EPS), V, P, gamma=GAMMA, beta=BETA, eps=EPS, samples=SAMPLES
    )
    assert result.passed, str(result)


def test_a_layernorm_that_ignores_beta_fails_at_d768():
    result = dropmc.check_norm_site(
        dropout(3), layernorm(GAMMA, 0.0, EPS), V, P,
        gamma=GAMMA, beta=BETA, eps=EPS, h=H, samples=SAMPLES,
    )
    assert not result.passed
    assert result.failed()[0]["id"] == "norm_site.layernorm_bypass_mean"


def test_a_bypass_that_drops_the_residual_too_fails_at_d768():
    # The pipeline dropmc builds adds h after `dropout`; a `dropout` that
    # receives v and also drops the residual's share is the same as
    # LN(dropout(h + v)) - h, i.e. the residual went through the mask.
    layer = Correct(P, seed=4)

    def dropped_residual(X):
        return layer.forward(X + H, True) - H

    result = dropmc.check_norm_site(
        dropped_residual, layernorm(GAMMA, BETA, EPS), V, P,
        gamma=GAMMA, beta=BETA, eps=EPS, h=H, samples=SAMPLES,
    )
    assert not result.passed


def test_a_wrong_drop_rate_fails_at_d768():
    result = dropmc.check_norm_site(
        dropout(5, p=0.15), layernorm(GAMMA, BETA, EPS), V, P,
        gamma=GAMMA, beta=BETA, eps=EPS, h=H, samples=SAMPLES,
    )
    assert not result.passed


def test_small_bypass_site_with_gamma_beta_is_judged_exactly():
    v, h = V[:8], H[:8]
    g, b = GAMMA[:8], BETA[:8]
    result = dropmc.check_norm_site(
        dropout(6), layernorm(g, b, EPS), v, P, gamma=g, beta=b, eps=EPS, h=h
    )
    assert result.passed, str(result)
    data = result.to_dict()
    assert data["reference"] == "exact"
    assert len(data["exact"]) == 8
    # The exact value depends on gamma and beta: a norm without them fails.
    wrong = dropmc.check_norm_site(
        dropout(7), layernorm(1.0, 0.0, EPS), v, P, gamma=g, beta=b, eps=EPS, h=h
    )
    assert not wrong.passed


def test_rmsnorm_with_gamma_after_a_bypass_uses_the_sampler():
    def rms(y):
        return y / np.sqrt((y**2).mean(axis=1, keepdims=True) + EPS) * GAMMA[:64]

    result = dropmc.check_norm_site(
        dropout(8), rms, V[:64], P, kind="rmsnorm", gamma=GAMMA[:64], eps=EPS, h=H[:64], samples=SAMPLES
    )
    assert result.passed, str(result)
    assert result.to_dict()["reference"] == "sampled"


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"gamma": np.ones(5)}, "gamma must have"),
        ({"h": np.ones(5)}, "h must have"),
        ({"kind": "rmsnorm", "beta": np.zeros(D)}, "RMSNorm has only gamma"),
    ],
)
def test_bad_parameters_are_value_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        dropmc.check_norm_site(dropout(0), layernorm(1.0, 0.0, EPS), V, P, eps=EPS, **kwargs)


def test_torch_layernorm_d768_with_gamma_beta_eps_and_bypass_passes():
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    ln = torch.nn.LayerNorm(D, eps=EPS)
    with torch.no_grad():
        ln.weight.copy_(torch.tensor(GAMMA, dtype=torch.float32))
        ln.bias.copy_(torch.tensor(BETA, dtype=torch.float32))
    drop = torch.nn.Dropout(P)
    drop.train()

    def torch_dropout(X):
        with torch.no_grad():
            return drop(torch.from_numpy(X)).numpy()

    def torch_norm(Y):
        with torch.no_grad():
            return ln(torch.from_numpy(np.ascontiguousarray(Y))).numpy()

    t = time.perf_counter()
    result = dropmc.check_norm_site(
        torch_dropout, torch_norm, V, P, gamma=GAMMA, beta=BETA, eps=EPS, h=H,
        dtype=np.float32, samples=SAMPLES,
    )
    print(f"torch LayerNorm d=768 bypass: wall {time.perf_counter() - t:.2f} s")
    assert result.passed, str(result)
