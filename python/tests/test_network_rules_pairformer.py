"""The network ledger's rules that the pairformer trunks needed (issue 49),
each against the toy's own train-mode Monte Carlo with every dropout on.

* In-place ops on a noisy tensor: ESMFold's triangle attention scales its
  query in place (``q /= √c``) and adds the triangle bias in place
  (``scores += bias``). The ledger hands an in-place op's rule a clone of
  the target as it was; the clone now carries the target's noise
  (dropmc.model.network_ledger.LedgerMode._clone_noisy) — before, the rule saw
  none and the query's noise was dropped.
* GLU ``a ⊙ σ(b)`` (alphafold3-pytorch's triangle multiplication):
  ``σ(b)² s_a + a² σ'(b)² s_b`` (dropmc.model.network_rules._glu); before, an
  uncovered op that stopped the noise.
* Shape-only ops on a noisy tensor (``t.new_ones(shape)``, the row/column
  dropouts' masks): no noise, not listed as uncovered.

The toy: ``norm(x + u)`` with ``u`` made from two dropouts' outputs by the
op under test (d = 16, p = 0.2, 2 × 8 tokens). The check is the one of
test_correct_network: the ledger's pooled ``Σ s̄`` at the norm against the
Monte Carlo's ``Σ_t (1 − 1/d) mean_k Var x_tk``, within the leading-order
band ``κ + 2/d`` (test_correct_network._ledger_tolerance: the in-place
toy is linear in the masks, its band 0: :func:`_within`; the GLU's
second-order terms are of relative size ``s/V``) plus ``critical_z`` SE.
Planted: the clone without its noise, and the GLU without a rule — each
must fail.
"""

import math

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import dropmc  # noqa: E402
from dropmc.model import network_ledger as NL  # noqa: E402
from dropmc.model import network_rules  # noqa: E402
from dropmc.model.discovery import discover  # noqa: E402

D, P, DRAWS = 16, 0.2, 2000


class _Toy(nn.Module):
    def __init__(self, how: str) -> None:
        super().__init__()
        torch.manual_seed(4)
        self.how = how
        self.a, self.b = nn.Linear(D, 2 * D if how == "glu" else D), nn.Linear(D, D)
        self.drop_a, self.drop_b = nn.Dropout(P), nn.Dropout(P)
        self.norm = nn.LayerNorm(D)

    def forward(self, x):
        u = self.drop_a(self.a(x))
        if self.how == "in place":  # q /= √c; scores += bias
            u = u.clone()
            u /= 2.0
            u += self.drop_b(self.b(x))
        else:
            u = F.glu(u, -1) + 0.0 * self.b(x)
        mask = u.new_ones(u.shape[:-1])  # a shape-only op on a noisy tensor
        return self.norm(x + u * mask.unsqueeze(-1))


def _x():
    return 2.0 * torch.randn(2, 8, D, generator=torch.Generator().manual_seed(5))


def _mc_noise(model, x):
    """``(Σ_t (1 − 1/d) mean_k Var x_tk, its SE)`` over ``DRAWS`` train-mode forwards."""
    seen = []
    h = model.norm.register_forward_hook(lambda m, a, o: seen.append(a[0].detach().double()))
    model.train()
    torch.manual_seed(6)
    try:
        with torch.no_grad():
            for _ in range(DRAWS):
                model(x)
    finally:
        h.remove()
        model.eval()
    flat = torch.stack(seen).reshape(DRAWS, -1)
    u = (1 - 1 / D) / D * (flat - flat.mean(0)).square().sum(1) * DRAWS / (DRAWS - 1)
    return float(u.mean()), float(u.std() / math.sqrt(DRAWS))


def _ledger(model, x, rules=None):
    ledger = NL.network_ledger(model, (x,), {}, discover(model, x), rules)
    return ledger.norms["norm"], ledger.uncovered


def _within(noise, mc, se, how) -> bool:
    """The ledger's ``Σ s̄`` within the band of the MC's (module docs): the
    in-place toy's norm input is linear in the masks, each coordinate's
    mask its own, so the diagonal ledger is exact there and only the MC's
    ``critical_z`` SE is allowed."""
    ratio = float(noise.noise.sum()) / mc
    band = 0.0 if how == "in place" else noise.kappa + 2.0 / D
    return abs(ratio - 1) <= band + dropmc.critical_z() * se / mc


@pytest.mark.parametrize("how", ["in place", "glu"])
def test_ledger_matches_the_toys_monte_carlo(how):
    torch.set_num_threads(1)
    model, x = _Toy(how).eval(), _x()
    noise, uncovered = _ledger(model, x)
    assert uncovered == []
    mc, se = _mc_noise(model, x)
    assert _within(noise, mc, se, how), (float(noise.noise.sum()), mc, se)


def test_planted_faults_fail(monkeypatch):
    torch.set_num_threads(1)
    model, x = _Toy("in place").eval(), _x()
    mc, se = _mc_noise(model, x)
    monkeypatch.setattr(NL.LedgerMode, "_clone_noisy", lambda self, t: t.clone())  # the old clone
    noise, _ = _ledger(model, x)
    assert not _within(noise, mc, se, "in place")
    monkeypatch.undo()
    model, x = _Toy("glu").eval(), _x()
    mc, se = _mc_noise(model, x)
    rules = {k: v for k, v in network_rules.RULES.items() if k != "glu"}
    noise, uncovered = _ledger(model, x, rules)
    assert ("glu", "<model>") in uncovered and not _within(noise, mc, se, "glu")
