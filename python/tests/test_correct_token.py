"""dropmc.torch.correct at a token-level mask (issue 41): Swin's drop-path
(transformers' ``drop_path``: one ``torch.rand`` draw per sample, shared by
every token and channel of it, the kept input scaled by ``1/q``) feeding
``layernorm_after`` through the residual add. Its ``v`` is the
``SwinDropPath`` module's input (dropmc.correct.masks); the correction is
the exact expectation ``q·norm(h + v/q) + p·norm(h)``.

Tiny Swin from a config (random weights; hidden and attention dropout 0,
``drop_path_rate`` 0.6: drop-path rates 0, 0.2, 0.4, 0.6 over the four
blocks, so three drop-path sites; at 0.2 the elementwise factor is within
the Monte Carlo's noise of the exact expectation, at 0.6 far from it).

Checks: the three sites are corrected by ``correct(model, inputs)``;
training output bit for bit unchanged, ``uncorrect`` bit-exact; at each
site, the corrected norm output equals the model's own Monte Carlo (only
that ``SwinDropPath`` in train mode, ``RUNS`` copies of the image in one
batch, each its own draw): per token a z on a fixed random projection, the
largest |z| against the suite's per-assertion level split by Bonferroni
over the tokens (conservative: the tokens of one copy share its draw).
Planted at the p = 0.6 site: the elementwise factor used instead (the law
the mask does not have), and ``p``, ``q`` swapped in the expectation — each
must fail. A ``torch.rand`` mask multiplied in the model's own forward, and
one drawn in a module whose input is the bypass rather than ``v``, are
refused with the reason and the way out (the second fails without the
value owner's identity check).
"""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
import dropmc.correct as C  # noqa: E402
import dropmc.correct.masks as CM  # noqa: E402
import dropmc.torch as dt  # noqa: E402
from correct_checks import build_swin  # noqa: E402
from mc_checks import bonferroni_z  # noqa: E402

torch.set_num_threads(1)
RUNS = 4000  # copies of the image in the Monte Carlo batch (one drop-path draw each)


def _site(i, j):
    b = f"encoder.layers.{i}.blocks.{j}"
    return (f"{b}.drop_path:rand_mask", f"{b}.layernorm_after")


SITES = [_site(0, 1), _site(1, 0), _site(1, 1)]


@pytest.fixture(scope="module")
def swin():
    return build_swin(0.0, 0.6)


class _Stop(Exception):
    pass


def _monte_carlo(model, x, site):
    """The norm's output over ``RUNS`` copies, only the site's drop-path in
    train mode; the forward stops at the norm."""
    owner = model.get_submodule(site[0].split(":")[0])
    got = []

    def hook(module, args, out):
        got.append(out.detach().to(torch.float64))
        raise _Stop

    handle = model.get_submodule(site[1]).register_forward_hook(hook)
    owner.train()
    torch.manual_seed(11)
    try:
        with torch.no_grad():
            model(pixel_values=x["pixel_values"].repeat(RUNS, 1, 1, 1))
    except _Stop:
        pass
    finally:
        handle.remove()
        owner.eval()
    return got[0]


def test_default_call_corrects_drop_path_training_and_uncorrect_bit_exact(swin):
    model, x = swin
    with torch.no_grad():
        plain = model(**x).last_hidden_state
        model.train()
        torch.manual_seed(5)
        train_plain = model(**x).last_hidden_state
    dt.correct(model, x)  # the default: the network ledger cannot follow the drop-path draws, so per-site
    try:
        assert model._dropmc_correction.scope == "site", model._dropmc_correction.scope_reason
        assert "fall-back" in model._dropmc_correction.scope_reason
        assert sorted(model._dropmc_correction.sites) == sorted(SITES)
        with torch.no_grad():
            model.train()
            torch.manual_seed(5)
            assert torch.equal(model(**x).last_hidden_state, train_plain)
            assert not torch.equal(model.eval()(**x).last_hidden_state, plain)
    finally:
        dt.uncorrect(model)
    with torch.no_grad():
        assert torch.equal(model.eval()(**x).last_hidden_state, plain)


def _max_z(model, x, site):
    dt.correct(model, x, sites=[site])
    try:
        fixed = C.norm_outputs(model, x, [site[1]])[site[1]][0].numpy()
    finally:
        dt.uncorrect(model)
    runs = _monte_carlo(model, x, site).numpy()
    a = np.random.default_rng(7).standard_normal(runs.shape[-1])
    s = runs @ a  # (RUNS, tokens)
    mc, mc_se = s.mean(0), s.std(0, ddof=1) / math.sqrt(RUNS)
    z = (mc - fixed @ a) / mc_se
    return float(np.abs(z).max()), z.size


@pytest.mark.parametrize("site", SITES)
def test_token_level_site_equals_the_models_monte_carlo(swin, site):
    model, x = swin
    worst, k = _max_z(model, x, site)
    assert worst < bonferroni_z(k), (site, worst)


@pytest.mark.parametrize("plant", ["elementwise factor", "p and q swapped"])
def test_planted_faults_fail(swin, monkeypatch, plant):
    model, x = swin
    if plant == "elementwise factor":
        hooks = C._site_hooks
        monkeypatch.setattr(C, "_site_hooks", lambda site, slot, p, params, order, mask=None:
                            hooks(site, slot, p, params, order, None))
    else:
        real = CM._TokenSite.__init__
        monkeypatch.setattr(CM._TokenSite, "__init__", lambda self, site, slot, p: real(self, site, slot, 1 - p))
    worst, k = _max_z(model, x, SITES[-1])
    assert worst >= bonferroni_z(k), worst


P_MASK = 0.2


def _rand_mask(x):
    """One draw per token, kept entries scaled by 1/q."""
    return (torch.rand(x.shape[:-1] + (1,)) >= P_MASK).to(x.dtype) / (1 - P_MASK)


class _TopLevelMask(torch.nn.Module):
    """The mask multiplied in the model's own forward: no module's input is v."""

    def __init__(self, d=16):
        super().__init__()
        self.lin, self.norm = torch.nn.Linear(d, d), torch.nn.LayerNorm(d)

    def forward(self, x):
        v = self.lin(x)
        if self.training:
            v = v * _rand_mask(v)
        return self.norm(x + v)


class _MaskedAdd(torch.nn.Module):
    def forward(self, h, v):
        return h + (v * _rand_mask(v) if self.training else v)


class _OwnerNotIdentity(torch.nn.Module):
    """The mask drawn in a module whose first input is the bypass h, not v."""

    def __init__(self, d=16):
        super().__init__()
        self.lin, self.norm, self.add = torch.nn.Linear(d, d), torch.nn.LayerNorm(d), _MaskedAdd()

    def forward(self, x):
        return self.norm(self.add(x, self.lin(x)))


@pytest.mark.parametrize("model, why", [
    (_TopLevelMask, "multiplied in the model's own forward.*move `x \\* mask` into a module"),
    (_OwnerNotIdentity, "'add''s eval output is not its input.*make `x \\* mask` a module of its own"),
])
def test_a_rand_mask_without_a_module_taking_v_is_refused_with_the_way_out(model, why):
    with pytest.raises(ValueError, match=why):
        dt.correct(model(), torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(0)), scope="site")
