"""Linear-path sites (``dropmc.model.linear_path``) on a toy
``Dropout → Linear → (+h) → LayerNorm``.

The truth the Rust audit samples through the captured path must agree with
the toy's own train-mode Monte Carlo: per component the z-score of the
difference of two independent means (their standard errors combined) is
below the suite's per-assertion critical value ``dropmc.critical_z()``
(each component one assertion at α = 1e-10). Planted: a wrong ``p`` in the
capture, which the same z-test must reject. The first-order correction
must remove at least two thirds of the eval gap on every token, measured
against a truth whose sampling noise is far below that gap.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

import dropmc  # noqa: E402
from dropmc import _dropmc  # noqa: E402
from dropmc.model import linear_path as lp  # noqa: E402

torch.set_num_threads(1)

P, M, D, T = 0.3, 24, 16, 4


class Toy(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(P)
        self.lin = nn.Linear(M, D)
        self.skip = nn.Linear(M, D)
        self.ln = nn.LayerNorm(D)

    def forward(self, x):
        return self.ln(self.lin(self.drop(x)) + self.skip(x))


def _toy():
    torch.manual_seed(0)
    model = Toy().double()
    with torch.no_grad():
        model.ln.weight.uniform_(0.5, 1.5)
        model.ln.bias.uniform_(-0.5, 0.5)
        model.skip.weight.mul_(0.3)
    x = torch.randn(T, M, dtype=torch.float64) + 1.0
    return model, x


def _model_mc(model, x, n):
    """The toy's own train-mode Monte Carlo: mean and SE per component."""
    model.train()
    torch.manual_seed(1)
    with torch.no_grad():
        out = model(x.repeat(n, 1)).reshape(n, T, D)
    model.eval()
    return out.mean(0).numpy(), (out.std(0) / np.sqrt(n)).numpy()


def _z(site, mc, se):
    return np.abs(site["truth"] - mc) / np.sqrt(site["truth_se"] ** 2 + se ** 2)


def test_the_toy_path_is_found_with_its_parts():
    model, x = _toy()
    sites = lp.find_linear_paths(model, x)
    assert len(sites) == 1
    s = sites[0]
    assert s["p"] == P and s["norm"] == "layer"
    assert s["u"].shape == (T, M) and s["h"].shape == (T, D) and s["w"].shape == (D, M)
    with torch.no_grad():
        assert np.allclose(s["h"], model.skip(x).numpy(), rtol=0, atol=1e-12)


def test_the_truth_agrees_with_the_models_own_monte_carlo():
    model, x = _toy()
    [site] = lp.audit_linear(model, x, samples=40_000, seed=3)
    mc, se = _model_mc(model, x, 40_000)
    z = _z(site, mc, se)
    print("max |z| truth vs model MC:", z.max())
    assert z.max() < dropmc.critical_z(), z.max()


def test_a_wrong_p_in_the_capture_is_caught():
    model, x = _toy()
    [site] = lp.find_linear_paths(model, x)
    truth, se, _, _, _ = _dropmc.audit_linear_path(
        "planted", 0.15, site["u"], site["h"], site["w"], site["b"], site["gamma"],
        site["beta"], site["eps"], 40_000, 3)
    mc, mse = _model_mc(model, x, 40_000)
    z = np.abs(np.asarray(truth) - mc) / np.sqrt(np.asarray(se) ** 2 + mse ** 2)
    assert z.max() > dropmc.critical_z(), z.max()


def test_the_first_order_correction_removes_two_thirds_of_the_eval_gap():
    model, x = _toy()
    [site] = lp.audit_linear(model, x, samples=400_000, seed=5)
    noise = site["truth_se"].mean(axis=1)
    print("eval gap", site["eval_gap"], "first-order gap", site["first_order_gap"], "SE", noise)
    # The truth's noise must be small beside the gap it judges.
    assert (noise < site["eval_gap"] / 20).all()
    assert (site["first_order_gap"] <= site["eval_gap"] / 3).all()


def test_the_torch_correction_is_the_rust_first_order():
    model, x = _toy()
    [s] = lp.find_linear_paths(model, x)
    rust = np.asarray(_dropmc.first_order_linear_path(
        s["p"], s["u"], s["h"], s["w"], s["b"], s["gamma"], s["beta"], s["eps"]))
    mean = torch.from_numpy(s["u"] @ s["w"].T + s["b"] + s["h"])
    out = lp.first_order_torch(torch.from_numpy(s["u"]), mean, model.lin.weight, s["p"],
                               torch.from_numpy(s["gamma"]), torch.from_numpy(s["beta"]), s["eps"])
    assert np.allclose(out.numpy(), rust, rtol=1e-12, atol=1e-12)


def test_bad_arguments_are_named():
    model, x = _toy()
    with pytest.raises(ValueError, match="samples"):
        lp.audit_linear(model, x, samples=1)
    with pytest.raises(ValueError, match="p must"):
        lp.first_order_torch(x, x, model.lin.weight, 1.0, None)
    [s] = lp.find_linear_paths(model, x)
    with pytest.raises(ValueError):
        _dropmc.first_order_linear_path(s["p"], s["u"][:, :-1], s["h"], s["w"], s["b"],
                                        s["gamma"], s["beta"], s["eps"])


def test_the_live_correction_is_the_rust_first_order():
    """``correct(linear=True)`` on the toy: the corrected model's output is
    the Rust first-order output (column norms of the live weight)."""
    import dropmc.torch as dt

    model, x = _toy()
    [s] = lp.find_linear_paths(model, x)
    rust = np.asarray(_dropmc.first_order_linear_path(
        s["p"], s["u"], s["h"], s["w"], s["b"], s["gamma"], s["beta"], s["eps"]))
    corrected = dt.correct(model, x, inplace=False, linear=True)
    assert corrected._dropmc_correction.linear_sites == [("drop", "ln")]
    with torch.no_grad():
        out = corrected.eval()(x).numpy()
    assert np.allclose(out, rust, rtol=1e-10, atol=1e-10)
