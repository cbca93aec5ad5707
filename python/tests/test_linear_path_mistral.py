"""Mistral's attention → ``post_attention_layernorm`` sites
(``dropmc.model.linear_path``): a small random ``MistralModel`` with
``attention_dropout = 0.1`` and eager attention, in float64.

Every layer's site must be found with numbers. Layer 0's truth must agree
with the model's own train-mode Monte Carlo of that norm's output (the
attention dropout is the model's only dropout, and layer 0's norm sees
only layer 0's): per component the z-score of the difference of the two
independent means is below ``dropmc.critical_z()`` (one assertion per
component at α = 1e-10). The first-order output must be at least 3× closer
to the model's Monte Carlo mean than the eval output.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import dropmc  # noqa: E402
from dropmc.model import linear_path as lp  # noqa: E402

torch.set_num_threads(1)

L, N = 6, 60_000


def _mistral():
    from transformers import MistralConfig, MistralModel

    cfg = MistralConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                        attention_dropout=0.1)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = MistralModel(cfg).double().eval()
    ids = torch.randint(0, 64, (1, L))
    return model, ids


def _norm_mc(model, ids, n, chunk=10_000):
    """Mean and SE of layer 0's post_attention_layernorm output in train mode."""
    return norm_mc(model, ids, model.layers[0].post_attention_layernorm, n, chunk)


def norm_mc(model, ids, norm, n, chunk=10_000):
    """Mean and SE (tokens × d) of the module ``norm``'s output in train
    mode, over ``n`` forwards of ``ids`` (``chunk`` at a time, seed 7)."""
    outs = []
    hook = norm.register_forward_hook(lambda m, a, o: outs.append(o.detach()))
    model.train()
    torch.manual_seed(7)
    total, total2 = 0.0, 0.0
    try:
        with torch.no_grad():
            for _ in range(n // chunk):
                outs.clear()
                model(ids.repeat(chunk, 1))
                o = outs[0].reshape(chunk, -1)
                total = total + o.sum(0)
                total2 = total2 + (o * o).sum(0)
    finally:
        hook.remove()
        model.eval()
    mean = total / n
    var = (total2 / n - mean * mean) * n / (n - 1)
    tokens = ids.shape[1]
    return mean.numpy().reshape(tokens, -1), (var / n).sqrt().numpy().reshape(tokens, -1)


@pytest.fixture(scope="module")
def audited():
    model, ids = _mistral()
    sites = lp.audit_linear(model, ids, samples=100_000, seed=2)
    return model, ids, sites


def test_every_layer_has_its_attention_site_with_numbers(audited):
    model, ids, sites = audited
    names = [s["name"] for s in sites]
    assert names == [f"layers.{i}.self_attn:dropout->layers.{i}.post_attention_layernorm" for i in (0, 1)], names
    for s in sites:
        assert s["kind"] == "attention" and s["p"] == 0.1 and s["norm"] == "rms"
        assert np.isfinite(s["truth"]).all() and s["truth"].shape == (L, 32)


def test_layer0_truth_and_correction_against_the_models_monte_carlo(audited):
    model, ids, sites = audited
    site = sites[0]
    mc, se = _norm_mc(model, ids, N)
    z = np.abs(site["truth"] - mc) / np.sqrt(site["truth_se"] ** 2 + se ** 2)
    eval_dist = np.abs(site["eval"] - mc).mean()
    first_dist = np.abs(site["first_order"] - mc).mean()
    print(f"max |z| {z.max():.3f}; |eval - MC| {eval_dist:.3e}, |first order - MC| "
          f"{first_dist:.3e}, ratio {eval_dist / first_dist:.2f}, MC SE {se.mean():.2e}")
    assert z.max() < dropmc.critical_z(), z.max()
    assert first_dist * 3 <= eval_dist
    # Planted: the capture at a wrong rate (0.2) must be rejected by the same test.
    from dropmc import _dropmc
    s = site
    truth, tse, _, _, _ = _dropmc.audit_attention_path(
        "planted", 0.2, s["shape"], s["probs"], s["values"], s["w"], s["b"], s["h"],
        s["gamma"], s["beta"], s["eps"], 100_000, 2)
    z = np.abs(np.asarray(truth) - mc) / np.sqrt(np.asarray(tse) ** 2 + se ** 2)
    print(f"planted p = 0.2: max |z| {z.max():.1f}")
    assert z.max() > dropmc.critical_z(), z.max()
