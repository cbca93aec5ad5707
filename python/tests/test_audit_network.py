"""dropmc.torch.audit(model, inputs, network=True): the network truth
(dropmc.audit.network) on a tiny pre-LN residual stack.

The model works per token (linear layers, GELU, elementwise dropout): each
token's norm outputs depend only on its own input and its own masks, so the
tokens' statistics are independent. The agreement check compares the
audit's network truth with an independent Monte Carlo written here (the
model's own train-mode forwards with every dropout on, another seed), per
element ``z = (T̂ − M̂) / sqrt(SE_T² + SE_M²)``:

* mean z² over every element is 1 up to its sampling error: per token the
  mean ``m_t`` of its z² (the tokens independent), the mean over tokens
  within ``critical_z · sd(m_t)/√T`` of 1, plus ``T_BIAS`` for the SEs
  being estimated (``E[z²] − 1 ≈ 2/(N − 1)`` for two SEs from ``N`` draws
  each; ``4/(N − 1)`` allowed);
* max |z| under the Bonferroni limit of the suite's level over every element.

Planted (permanent, :func:`test_agreement_check_catches_the_per_site_truth`):
the truth with only one dropout active — the per-site question — must fail
the same check.
"""

import functools
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
import dropmc  # noqa: E402
import dropmc.torch as dt  # noqa: E402
import dropmc.audit.network as NA  # noqa: E402
from mc_checks import bonferroni_z  # noqa: E402

torch.set_num_threads(1)
D, TOKENS, LAYERS = 24, 128, 3  # d > 16: the per-site audit samples (no 2^d enumeration)
#: Train-mode forwards of the audit's truth and of the test's own Monte
#: Carlo in the agreement check (each; SEs from this many draws).
N = 500
#: Allowance for E[z²] − 1 when both SEs are estimated from N draws (module docs).
T_BIAS = 4 / (N - 1)


class Block(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.ln = nn.LayerNorm(D)
        self.fc1, self.fc2 = nn.Linear(D, 2 * D), nn.Linear(2 * D, D)
        self.drop = nn.Dropout(p)

    def forward(self, x):
        return x + self.drop(self.fc2(torch.nn.functional.gelu(self.fc1(self.ln(x)))))


class PreLN(nn.Module):
    """Pre-LN residual stack: input dropout, LAYERS blocks, final LN (4 norms, every one behind noise)."""

    def __init__(self, p=0.3, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.drop_in = nn.Dropout(p)
        self.layers = nn.ModuleList(Block(p) for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(D)
        for m in self.modules():
            if isinstance(m, nn.LayerNorm):
                nn.init.normal_(m.weight, 1.0, 0.3)
                nn.init.normal_(m.bias, 0.0, 0.3)

    def forward(self, x):
        x = self.drop_in(x)
        for b in self.layers:
            x = b(x)
        return self.ln_f(x)


NORMS = [f"layers.{i}.ln" for i in range(LAYERS)] + ["ln_f"]


def _x():
    return torch.randn(1, TOKENS, D, generator=torch.Generator().manual_seed(1))


def _mc(model, x, n, seed, only=None):
    """{norm: (mean, se)} of the norm outputs over n train-mode forwards with
    every dropout on (``only``: that dropout alone on), tokens × d."""
    outs = {k: [] for k in NORMS}
    hooks = [model.get_submodule(k).register_forward_hook(
        lambda m, a, o, k=k: outs[k].append(o.detach().double().reshape(-1, D))) for k in NORMS]
    model.train()
    if only is not None:
        for name, m in model.named_modules():
            if isinstance(m, nn.Dropout) and name != only:
                m.eval()
    torch.manual_seed(seed)
    with torch.no_grad():
        for _ in range(n):
            model(x)
    for h in hooks:
        h.remove()
    model.eval()
    res = {}
    for k, v in outs.items():
        s = torch.stack(v)
        res[k] = (s.mean(0).numpy(), (s.std(0) / math.sqrt(n)).numpy())
    return res


@functools.lru_cache(maxsize=1)
def _reference():
    """The test's own every-dropout Monte Carlo of PreLN() on _x() (seed 2), shared by two tests."""
    return _mc(PreLN(), _x(), N, seed=2)


def _agreement(truths, mc):
    """(mean z², its allowed deviation from 1, max |z|, its Bonferroni limit) (module docs)."""
    z = np.stack([(truths[k][0] - mc[k][0]) / np.sqrt(truths[k][1] ** 2 + mc[k][1] ** 2) for k in NORMS])
    per_token = (z ** 2).mean(axis=(0, 2))  # norms × tokens × d → per token
    allowed = dropmc.critical_z() * per_token.std(ddof=1) / math.sqrt(per_token.size) + T_BIAS
    return per_token.mean(), allowed, np.abs(z).max(), bonferroni_z(z.size)


def _truths(audit):
    assert [r["norm"] for r in audit.network_sites] == NORMS
    return {r["norm"]: audit.network_truth(i) for i, r in enumerate(audit.network_sites)}


def test_truth_agrees_with_the_models_own_monte_carlo():
    """The audit's truth, with its control variate on (dropmc.audit.network_cv),
    against the test's plain Monte Carlo; the control variate must have been
    used at every norm and lowered every norm's mean SE² below the plain
    estimate's from the same draws (``se_ratio`` > 1; its use rule: only
    when it lowers the measured variance; planted: the rule inverted, β = 0
    kept, fails)."""
    model, x = PreLN(), _x()
    audit = NA.audit_network(model, x, seed=1, forwards=N, adaptive=False)
    assert audit.network_forwards == N
    assert all(r["tokens"] == TOKENS and r["d"] == D and r["padded"] == 0 for r in audit.network_sites)
    assert all(r["control"]["used"] and r["control"]["regressors"] == i + 1 for i, r in enumerate(audit.network_sites))
    mean_z2, allowed, max_z, limit = _agreement(_truths(audit), _reference())
    assert abs(mean_z2 - 1) <= allowed, (mean_z2, allowed)
    assert max_z <= limit, (max_z, limit)
    assert all(r["control"]["se_ratio"] > 1 for r in audit.network_sites), [r["control"] for r in audit.network_sites]


def test_agreement_check_catches_a_control_variate_of_nonzero_mean(monkeypatch):
    """Planted: the regressor built from the dropout's output ``drop(a)``
    instead of its injection ``drop(a) − a`` (mean ``J E[a]``, not 0): the
    controlled truth is then biased and must fail the check that the right
    one passes."""
    import dropmc.audit.network_cv as CV

    monkeypatch.setattr(CV, "injection", lambda a, out: out.detach().double())
    audit = NA.audit_network(PreLN(), _x(), seed=1, forwards=N, adaptive=False)
    mean_z2, allowed, max_z, limit = _agreement(_truths(audit), _reference())
    assert abs(mean_z2 - 1) > allowed and max_z > limit, (mean_z2, allowed, max_z, limit)


def test_agreement_check_catches_the_per_site_truth():
    """The per-site question's truth (only layers.0.drop on; its own norm's
    noise from drop_in and the other blocks gone) must fail the check that
    the network truth passes."""
    model, x = PreLN(), _x()
    single = _mc(model, x, N, seed=1, only="layers.0.drop")
    mean_z2, allowed, max_z, limit = _agreement(single, _reference())
    assert abs(mean_z2 - 1) > allowed and max_z > limit, (mean_z2, allowed, max_z, limit)


def test_plain_gap_resolved_and_table_printed():
    """p = 0.3 everywhere: every norm's input carries the noise of 1 to 4
    dropouts at p/q = 0.43 of its signal each, which shrinks the LN's
    expected output by an O(p/q) factor: the eval gap must be resolved at
    every norm within the default budget (planted: truths from eval-mode
    forwards, gap 0, fail this)."""
    model, x = PreLN(), _x()
    audit = dt.audit(model, x, network=True, samples=256, attention=False)
    assert len(audit.network_sites) == 4
    assert all(r["gap_plain"]["resolved"] for r in audit.network_sites), audit.network_table
    assert all(r["gap_site"] is not None and r["gap_network"] is not None for r in audit.network_sites)
    assert 16 <= audit.network_forwards <= NA.NETWORK_FORWARDS
    assert f"network: 4 norms, {audit.network_forwards} train-mode forwards" in str(audit)
    assert [len(r["dropouts"]) for r in audit.network_sites] == [1, 2, 3, 4]
    assert '"network_sites"' in audit.to_json()


def test_p_zero_has_no_network_rows():
    model, x = PreLN(p=0.0), _x()
    audit = dt.audit(model, x, network=True, samples=256, attention=False)
    assert audit.network_sites == [] and audit.network_forwards == 0
    assert "network: 0 norms, 0 train-mode forwards" in str(audit)


def test_modes_rng_restored_determinism_and_interrupt():
    model, x = PreLN(), _x()
    model.eval()
    model.layers[1].train()
    modes = [m.training for m in model.modules()]
    state = torch.get_rng_state()
    a = NA.audit_network(model, x, seed=3, forwards=32, adaptive=False)
    b = NA.audit_network(model, x, seed=3, forwards=32, adaptive=False)
    assert [m.training for m in model.modules()] == modes
    assert torch.equal(torch.get_rng_state(), state)
    for i in range(4):
        assert np.array_equal(a.network_truth(i)[0], b.network_truth(i)[0])
    calls = [0]

    def stop(module, args, out):
        calls[0] += 1
        if calls[0] == 20:
            raise KeyboardInterrupt

    handle = model.ln_f.register_forward_hook(stop)
    with pytest.raises(KeyboardInterrupt):
        NA.audit_network(model, x, forwards=64)
    handle.remove()
    assert [m.training for m in model.modules()] == modes
    assert not any(model.get_submodule(k)._forward_hooks for k in NORMS)


def test_time_budget_and_bad_arguments():
    model, x = PreLN(), _x()
    audit = NA.audit_network(model, x, forwards=4096, time_budget=1e-3, adaptive=False)
    assert audit.network_forwards == NA.BATCH  # the first batch always runs
    with pytest.raises(ValueError, match="forwards"):
        NA.audit_network(model, x, forwards=3)
    with pytest.raises(TypeError, match="network"):
        dt.audit(model, x, network="yes")


def test_a_norm_reached_only_by_multihead_attention_dropout_is_listed():
    """nn.MultiheadAttention's dropout runs inside the module (no traced
    dropout call): the norm after it is still reached (planted: the MHA
    output not tagged, no row)."""

    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.MultiheadAttention(D, 2, dropout=0.3, batch_first=True)
            self.ln = nn.LayerNorm(D)

        def forward(self, x):
            return self.ln(x + self.attn(x, x, x, need_weights=False)[0])

    torch.manual_seed(0)
    audit = NA.audit_network(Attn(), torch.randn(1, 8, D), forwards=NA.BATCH, adaptive=False)
    assert [(r["norm"], r["dropouts"]) for r in audit.network_sites] == [("ln", ["attn"])]


def test_padded_tokens_left_out_and_counted():
    """BERT (1 layer, d 64) on 2 × 8 tokens, the second sequence's last 3
    padded (hf_models.inputs): every row has 13 tokens and says 3 padded,
    the truths are 13 × d, the table says ``(+3 pad)`` (planted: the mask
    ignored, 16 tokens and 0 padded, fails)."""
    pytest.importorskip("transformers")
    from hf_models import build, inputs

    audit = NA.audit_network(build("bert", layers=1), inputs("bert"), seed=1, forwards=NA.BATCH, adaptive=False)
    assert audit.network_sites
    assert all((r["tokens"], r["padded"]) == (13, 3) for r in audit.network_sites)
    assert all(audit.network_truth(i)[0].shape == (13, 64) for i in range(len(audit.network_sites)))
    assert "13 (+3 pad)" in audit.network_table


def test_functional_norm_call_listed_with_its_reason():
    """A LayerNorm called as ``F.layer_norm`` behind a dropout (no norm
    module): no row, but listed in ``audit.network_uncovered`` and under the
    table with its reason (planted: the functional-norm mode not entered,
    nothing listed, fails)."""

    class Functional(nn.Module):
        def __init__(self):
            super().__init__()
            self.drop, self.ln = nn.Dropout(0.3), nn.LayerNorm(D)
            self.w = nn.Parameter(torch.ones(D))

        def forward(self, x):
            h = self.ln(self.drop(x))
            return torch.nn.functional.layer_norm(h + self.drop(h), (D,), self.w)

    audit = NA.audit_network(Functional(), _x(), forwards=NA.BATCH, adaptive=False)
    assert [r["norm"] for r in audit.network_sites] == ["ln"]
    assert list(audit.network_uncovered) == ["layer_norm"], audit.network_uncovered
    assert "functional norm call" in audit.network_uncovered["layer_norm"]
    assert "not audited: layer_norm: a functional norm call" in audit.network_table
