"""BERT's attention → ``attention.output.LayerNorm`` paths in
``dropmc.torch.audit`` (issue 43): attention dropout → value product →
``attention.output.dense`` → hidden dropout → + residual → LayerNorm is a
linear path, but BERT's attention calls ``F.dropout(p=0.0)`` in eval (it
reads ``self.dropout.p`` only in training, and has no ``attention_dropout``
rate), so the eval-mode path tracer saw a dropout at rate 0 and made no
site. The rate is now discovery's (its train-mode forward reads 0.1).

A small random ``BertModel`` in float64, eager attention, weights drawn at
``initializer_range=0.5`` (at BERT's 0.02 the attention's term is so small
beside the residual that a wrong rate, 0.2 for 0.1, stays within the
Monte Carlo's noise; at 0.5 it is |z| ≈ 80). Layer 0's truth
must agree with the model's own train-mode Monte Carlo of that norm's
output with the embeddings' and the hidden dropouts at p = 0 (the site's
Monte Carlo holds further dropouts on the path at the identity, and layer
0's norm sees no other): per component the z of the difference of the two
independent means is below ``dropmc.critical_z()`` (α = 1e-10 per
assertion).
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import dropmc  # noqa: E402
import dropmc.torch  # noqa: E402,F401
from dropmc.audit import linear as linear_audit  # noqa: E402

torch.set_num_threads(1)

L, N, CHUNK = 6, 60_000, 10_000
NAMES = [f"encoder.layer.{i}.attention.self:dropout->encoder.layer.{i}.attention.output.LayerNorm"
         for i in (0, 1)]


def _bert():
    cfg = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, max_position_embeddings=32, hidden_dropout_prob=0.1,
                                  attention_probs_dropout_prob=0.1, initializer_range=0.5)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.BertModel(cfg, add_pooling_layer=False).double().eval()
    return model, torch.randint(0, 64, (1, L), generator=torch.Generator().manual_seed(1))


def _norm_mc(model, ids):
    """Mean and SE of layer 0's attention.output.LayerNorm output in train
    mode, the attention dropout the only one drawing masks."""
    from test_linear_path_mistral import norm_mc

    layer = model.encoder.layer[0]
    quiet = [model.embeddings.dropout, layer.attention.output.dropout]
    for d in quiet:
        d.p = 0.0
    try:
        return norm_mc(model, ids, layer.attention.output.LayerNorm, N, CHUNK)
    finally:
        for d in quiet:
            d.p = 0.1


@pytest.fixture(scope="module")
def audited():
    model, ids = _bert()
    return model, ids, dropmc.torch.audit(model, ids, samples=20_000, seed=3)


def test_every_layer_has_its_attention_path_row(audited):
    _, _, audit = audited
    rows = {r["name"]: r for r in audit.linear_sites}
    assert sorted(rows) == NAMES, sorted(rows)
    for r in rows.values():
        assert r["form"] == "attention path" and r["p"] == 0.1 and r["tokens"] == L and r["d"] == 32
    assert audit.coverage["audited"] == 6 and "paths_not_sampled" not in audit.coverage


def test_layer0_truth_agrees_with_the_models_monte_carlo(audited):
    model, ids, audit = audited
    names = [r["name"] for r in audit.linear_sites]
    assert NAMES[0] in names, names
    truth, se_truth = audit.linear_truths[names.index(NAMES[0])]
    mc, se = _norm_mc(model, ids)
    z = np.abs(truth - mc) / np.sqrt(se_truth ** 2 + se ** 2)
    print(f"max |z| {z.max():.3f}")
    assert z.max() < dropmc.critical_z(), z.max()


def test_over_the_work_budget_the_paths_are_listed_with_the_estimate(monkeypatch):
    model, ids = _bert()
    monkeypatch.setattr(linear_audit, "LINEAR_AUDIT_WORK", 1.0)
    audit = dropmc.torch.audit(model, ids)
    assert not getattr(audit, "linear_sites", [])
    listed = {r["name"]: r for r in audit.other_sites if r["kind"] == "linear path not sampled"}
    assert sorted(listed) == [n.split("->")[0] for n in NAMES], sorted(listed)
    assert all("multiply-adds" in r["reason"] for r in listed.values())
    assert audit.coverage["paths_not_sampled"] == 2
    assert "; 2 audited attention calls' paths on through the output projection" in str(audit).splitlines()[0]
