"""A feed-forward linear-path site of T5 (``T5Model``, small random config,
``dropout_rate`` 0.1) in ``dropmc.torch.audit``: encoder block 0's inner
``DenseReluDense.dropout`` → ``wo`` → (the outer ``layer.1.dropout``) →
+ residual → block 1's RMS ``layer_norm``.

The site is defined with only its own dropout drawing masks; every other
dropout (the outer one on the path included) is the identity, as at every
site. Its truth is checked against the model's own Monte Carlo with exactly
that: the model in eval mode but that one ``nn.Dropout`` in train mode. Per
component the z of the difference of the two independent means is below
``dropmc.critical_z()`` (α = 1e-10 per assertion).
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import dropmc  # noqa: E402
import dropmc.torch  # noqa: E402,F401

torch.set_num_threads(1)

L, N, CHUNK = 6, 100_000, 10_000
SITE = "encoder.block.0.layer.1.DenseReluDense.dropout->encoder.block.1.layer.0.layer_norm"


def _t5():
    from transformers import T5Config, T5Model

    cfg = T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=1,
                   num_heads=4, dropout_rate=0.1)
    torch.manual_seed(0)
    model = T5Model(cfg).double().eval()
    ids = torch.randint(0, 64, (1, L))
    return model, ids


def _site_mc(model, ids):
    """Mean and SE of block 1's layer_norm output with only the site's
    dropout in train mode."""
    outs = []
    norm = model.encoder.block[1].layer[0].layer_norm
    hook = norm.register_forward_hook(lambda m, a, o: outs.append(o.detach()))
    drop = model.encoder.block[0].layer[1].DenseReluDense.dropout
    drop.train()
    torch.manual_seed(9)
    s = s2 = 0.0
    try:
        with torch.no_grad():
            for _ in range(N // CHUNK):
                outs.clear()
                model.encoder(input_ids=ids.repeat(CHUNK, 1))
                o = outs[0].reshape(CHUNK, -1)
                s, s2 = s + o.sum(0), s2 + (o * o).sum(0)
    finally:
        hook.remove()
        drop.eval()
    mean = s / N
    var = (s2 / N - mean * mean) * N / (N - 1)
    return mean.numpy().reshape(L, -1), (var / N).sqrt().numpy().reshape(L, -1)


def test_the_feed_forward_site_has_numbers_and_agrees_with_the_models_monte_carlo():
    model, ids = _t5()
    audit = dropmc.torch.audit(model, {"input_ids": ids, "decoder_input_ids": ids[:, :3]}, samples=1 << 15)
    names = [s["name"] for s in audit.linear_sites]
    assert SITE in names, names
    k = names.index(SITE)
    truth, se = audit.linear_truths[k]
    mc, mc_se = _site_mc(model, ids)
    z = np.abs(truth - mc) / np.sqrt(se ** 2 + mc_se ** 2)
    print(f"T5 FF site: max |z| {z.max():.2f} over {z.size}; gap eval {audit.linear_sites[k]['uncorrected']['rms']:.2e}, "
          f"1st {audit.linear_sites[k]['first_order']['rms']:.2e}")
    assert z.max() < dropmc.critical_z(), z.max()
