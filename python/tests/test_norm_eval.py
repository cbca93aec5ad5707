"""check_norm_site on numpy norms, and dropmc.eval against the CLI."""

import json
import subprocess

import numpy as np
import pytest

import dropmc

from implementations import Correct

P = 0.3
X = np.array([0.5, -1.2, 3.0, 0.7, 2.0, -0.4])


def layernorm(eps):
    def norm(y):
        mu = y.mean(axis=1, keepdims=True)
        var = ((y - mu) ** 2).mean(axis=1, keepdims=True)
        return (y - mu) / np.sqrt(var + eps)

    return norm


def rmsnorm(eps):
    return lambda y: y / np.sqrt((y**2).mean(axis=1, keepdims=True) + eps)


def dropout(seed):
    layer = Correct(P, seed=seed)
    return lambda X: layer.forward(X, True)


def test_numpy_layernorm_after_dropout_matches_the_exact_value():
    result = dropmc.check_norm_site(dropout(1), layernorm(1e-5), X, P, eps=1e-5)
    assert result.passed, str(result)
    data = result.to_dict()
    d = len(X)
    assert len(data["exact"]) == d and len(data["first_order"]) == d
    assert len(data["first_order_gap"]) == d
    # The first-order formula is off by a visible amount at d = 6.
    assert max(abs(g) for g in data["first_order_gap"]) > 1e-3
    assert "first-order formula" in result.claims[0]["note"]


def test_numpy_rmsnorm_after_dropout_matches_the_exact_value():
    result = dropmc.check_norm_site(dropout(2), rmsnorm(1e-6), X, P, kind="rmsnorm", eps=1e-6)
    assert result.passed, str(result)


def test_a_norm_that_skips_the_centring_fails():
    result = dropmc.check_norm_site(dropout(3), rmsnorm(1e-5), X, P, kind="layernorm", eps=1e-5)
    assert not result.passed
    assert result.failed()[0]["id"] == "norm_site.layernorm_mean"


def test_a_dropout_at_the_wrong_rate_before_the_norm_fails():
    wrong = Correct(0.5, seed=4)
    result = dropmc.check_norm_site(lambda X: wrong.forward(X, True), layernorm(1e-5), X, P, eps=1e-5)
    assert not result.passed


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_eps_zero_nan_on_the_all_dropped_row_is_explained():
    with pytest.raises(ValueError, match="all-dropped row"):
        dropmc.check_norm_site(dropout(6), layernorm(0.0), X, P)


def test_norm_site_rejects_wide_inputs():
    with pytest.raises(ValueError, match="d <= 4096"):
        dropmc.check_norm_site(dropout(5), layernorm(0.0), np.ones(4097), P)


@pytest.mark.parametrize(
    "kwargs, cli_args",
    [
        (
            dict(x=[0.5, -1.2, 3.0, 0.1], p=0.1, eps=1e-5),
            ["--x", "0.5,-1.2,3.0,0.1", "--p", "0.1", "--eps", "1e-05"],
        ),
        (
            dict(x=np.array([1.0, 2.0, 4.0 / 3.0]), p=0.25, eps=0.0, gamma=[1.0, 2.0, 0.5], samples=50_000, seed=7),
            ["--x", "1.0,2.0,1.3333333333333333", "--p", "0.25", "--eps", "0.0", "--gamma", "1.0,2.0,0.5",
             "--samples", "50000", "--seed", "7"],
        ),
    ],
)
def test_eval_ln_equals_the_clis_json(kwargs, cli_args, dropmc_binary):
    binary = dropmc_binary
    ours = dropmc.eval("ln", **kwargs)
    out = subprocess.run([binary, "eval", "ln", *cli_args, "--json"], capture_output=True, text=True, check=True)
    theirs = json.loads(out.stdout)
    assert ours["results"] == theirs["results"]
    assert ours == theirs


@pytest.mark.parametrize(
    "quantity, kwargs, cli_args",
    [
        ("moments", dict(x=[0.5, -1.2, 3.0], p=0.3, samples=20_000), ["--x", "0.5,-1.2,3.0", "--p", "0.3", "--samples", "20000"]),
        ("rms", dict(x=(0.5, -1.2, 3.0, 0.7), p=0.1, eps=1e-6), ["--x", "0.5,-1.2,3.0,0.7", "--p", "0.1", "--eps", "1e-06"]),
        ("bn", dict(running_mean=[0.1, -0.2], running_var=[1.5, 0.25], p=0.2),
         ["--running-mean", "0.1,-0.2", "--running-var", "1.5,0.25", "--p", "0.2"]),
    ],
)
def test_other_quantities_equal_the_clis_json(quantity, kwargs, cli_args, dropmc_binary):
    binary = dropmc_binary
    ours = dropmc.eval(quantity, **kwargs)
    out = subprocess.run([binary, "eval", quantity, *cli_args, "--json"], capture_output=True, text=True, check=True)
    assert ours == json.loads(out.stdout)


def test_eval_rejects_bad_arguments_clearly():
    with pytest.raises(ValueError, match="p"):
        dropmc.eval("ln", x=[1.0, 2.0, 3.0], p=1.0)
    with pytest.raises(ValueError):
        dropmc.eval("no-such-quantity", x=[1.0])
