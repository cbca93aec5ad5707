"""Linear-path sites in ``dropmc.torch.audit`` (python/dropmc/audit/linear.py):
the toy ``Dropout → Linear → (+h) → LayerNorm`` and a small random Mistral.

The toy's truth is checked against its own train-mode Monte Carlo (the
dropout is its only one): per component the z of the difference of the two
independent means is below ``dropmc.critical_z()`` (α = 1e-10 per
assertion). The first-order correction must remove at least two thirds of
the eval gap: the first-order gap's upper bound (``Z_RESOLVED`` SEs above
its estimate) at most a third of the eval gap.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import dropmc  # noqa: E402
import dropmc.torch  # noqa: E402,F401

torch.set_num_threads(1)

TOKENS, N, CHUNK = 24, 400_000, 25_000
M, D = 32, 16  # the leading order's error is O(1/d) of the correction: a width it is meant for


class Toy(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop, self.lin, self.skip, self.ln = nn.Dropout(0.2), nn.Linear(M, D), nn.Linear(M, D), nn.LayerNorm(D)

    def forward(self, x):
        return self.ln(self.lin(self.drop(x)) + self.skip(x))


def _toy():
    torch.manual_seed(0)
    model = Toy().double().eval()
    x = torch.randn(TOKENS, M, dtype=torch.float64) + 1
    return model, x


def _toy_mc(model, x):
    """Mean and SE per component of the toy's train-mode output."""
    model.train()
    torch.manual_seed(11)
    s = torch.zeros(TOKENS, D, dtype=torch.float64)
    s2 = torch.zeros_like(s)
    with torch.no_grad():
        for _ in range(N // CHUNK):
            o = model(x.repeat(CHUNK, 1)).reshape(CHUNK, TOKENS, D)
            s, s2 = s + o.sum(0), s2 + (o * o).sum(0)
    model.eval()
    mean = s / N
    var = (s2 / N - mean * mean) * N / (N - 1)
    return mean.numpy(), (var / N).sqrt().numpy()


@pytest.fixture(scope="module")
def toy_audit():
    model, x = _toy()
    return model, x, dropmc.torch.audit(model, x, samples=1 << 16, seed=3)


def test_the_toy_site_is_an_audited_row_and_counts_as_audited(toy_audit):
    _, _, audit = toy_audit
    [row] = audit.linear_sites
    assert row["name"] == "drop->ln" and row["d"] == D and row["tokens"] == TOKENS
    assert audit.coverage["audited"] == audit.coverage["calls"] == 1, audit.coverage
    assert "drop->ln" in str(audit) and "linear-path site" in str(audit)
    assert not [o for o in audit.other_sites if o["name"] == "drop"]


def test_the_audit_runs_the_model_twice():
    # discovery's neutral train-mode forward, then one eval forward for the
    # capture that also carries the linear-path search (issue 43: it was a
    # third forward of its own)
    model, x = _toy()
    runs = []
    hook = model.register_forward_pre_hook(lambda m, a: runs.append(m.training))
    try:
        audit = dropmc.torch.audit(model, x, samples=1024, seed=3)
    finally:
        hook.remove()
    assert [r["name"] for r in audit.linear_sites] == ["drop->ln"]
    assert runs == [True, False], runs


def test_the_linear_path_sites_have_a_progress_line(capfd):
    model, x = _toy()
    dropmc.torch.audit(model, x, samples=256, progress=True)
    assert "dropmc audit: 1 linear-path site, about" in capfd.readouterr().err
    dropmc.torch.audit(model, x, samples=256, progress=False)
    assert "linear-path" not in capfd.readouterr().err


def test_the_toy_truth_agrees_with_its_own_monte_carlo(toy_audit):
    model, x, audit = toy_audit
    [(truth, se)] = audit.linear_truths
    mc, mc_se = _toy_mc(model, x)
    z = np.abs(truth - mc) / np.sqrt(se ** 2 + mc_se ** 2)
    print(f"toy truth vs its Monte Carlo: max |z| {z.max():.2f} over {z.size}")
    assert z.max() < dropmc.critical_z(), z.max()


def test_the_first_order_removes_two_thirds_of_the_eval_gap(toy_audit):
    _, _, audit = toy_audit
    [row] = audit.linear_sites
    ev, first = row["uncorrected"], row["first_order"]
    print(f"gap eval {ev['rms']:.3e} ± {ev['rms_se']:.1e}, gap 1st {first['rms']:.3e} "
          f"(upper {first['upper']:.3e}), factor {row['factor']:.1f}")
    assert ev["resolved"]
    assert first["upper"] <= ev["rms"] / 3


def test_every_mistral_layer_has_its_attention_path_row():
    pytest.importorskip("transformers")
    from test_linear_path_mistral import L, _mistral

    model, ids = _mistral()
    audit = dropmc.torch.audit(model, ids)
    rows = {s["name"]: s for s in audit.linear_sites}
    names = [f"layers.{i}.self_attn:dropout->layers.{i}.post_attention_layernorm" for i in (0, 1)]
    assert sorted(rows) == names, sorted(rows)
    for i, name in enumerate(names):
        r = rows[name]
        assert r["tokens"] == L and r["d"] == 32 and r["norm"] == "RMSNorm"
        assert np.isfinite(r["uncorrected"]["upper"]) and np.isfinite(r["first_order"]["upper"])
        truth = audit.linear_truths[audit.linear_sites.index(r)][0]
        assert np.isfinite(truth).all() and truth.shape == (L, 32)
    assert audit.coverage["audited"] == audit.coverage["calls"] == 2


def test_a_window_transpose_leaves_no_site_rather_than_a_wrong_one():
    # Swin's window partition/reverse transposes tokens between the value
    # product and the residual add: the captured path does not reproduce the
    # norm's input row for row, so no attention-path site may be made.
    transformers = pytest.importorskip("transformers")
    from dropmc.model.linear_path import find_linear_paths

    torch.manual_seed(0)
    c = transformers.SwinConfig(image_size=16, patch_size=2, embed_dim=24, depths=[2, 2], num_heads=[2, 2],
                                window_size=2, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                                drop_path_rate=0.0)
    c._attn_implementation = "eager"
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    sites = find_linear_paths(transformers.SwinModel(c), (), {"pixel_values": x})
    assert [s["name"] for s in sites if s["kind"] == "attention"] == []
