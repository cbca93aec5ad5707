"""Issue 40: every dropout call accounted for, on architectures whose paths
need more than ``norm(h + dropout(v))`` read literally.

* OPT (``(residual + dropout(x)).reshape(-1, d)`` before the norm),
  DeBERTa-v2 and BLOOM (attention through ``bmm`` after a ``view``),
  Wav2Vec2 with LayerDrop 0.1: the discovered sites equal the ones written
  by hand from the modeling sources (hf_models.expected40), the audit
  returns with every norm site and attention site audited, and every other
  dropout call is listed with a reason.
* Wav2Vec2 + LayerDrop: the same sites under every RNG state.
* The coverage line counts every call; warnings collapse per kind.
"""

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
import dropmc.audit as A  # noqa: E402
from dropmc.model.discovery import discover  # noqa: E402
from hf_models import build40, expected40  # noqa: E402

torch.set_num_threads(1)


def _tokens(batch=2, length=8):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(4, 30, (batch, length), generator=g)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[-1, length - 3:] = 0
    return {"input_ids": ids, "attention_mask": mask}


@pytest.mark.parametrize("arch", ["opt", "deberta-v2", "bloom"])
def test_sites_and_attention_through_reshapes_and_bmm(arch):
    model, kw = build40(arch), _tokens()
    found = discover(model, **kw)
    truth = expected40(arch)
    assert {(s.dropout, s.norm): s.form for s in found.sites} == truth
    audit = A.audit_torch(model, kw, samples=1024, attention_samples=256)
    clean = {f"{d}->{n}" for (d, n), f in truth.items() if f != "entangled"}
    assert len(clean) == 4 and {s["name"] for s in audit.sites} == clean
    assert len(audit.attention_sites) == 2  # one per layer, read through matmul or bmm after a view
    assert audit.tokens == {"audited": 13, "total": 16}
    cov = audit.coverage
    assert cov["calls"] == len(found.dropouts) and cov["audited"] + cov["listed"] == cov["calls"]
    assert str(audit).startswith(f"{cov['calls']} dropout calls: {cov['audited']} audited")
    assert json.loads(audit.to_json())["coverage"] == cov
    listed = {o["name"].split("->")[0] for o in audit.other_sites}
    audited = {s["name"].split("->")[0] for s in audit.sites} | {a["name"] for a in audit.attention_sites}
    assert listed | audited == set(found.dropouts) and not listed & audited


def test_sites_filter_attention_and_attention_can_be_skipped():
    model, kw = build40("bloom"), _tokens()
    one = A.audit_torch(model, kw, samples=1024, attention_samples=256,
                        sites=["h.1.self_attention.attention_dropout"])
    assert one.sites == [] and [a["name"] for a in one.attention_sites] == ["h.1.self_attention.attention_dropout"]
    assert {o["reason"] for o in one.other_sites} == {"not named in sites="}
    none = A.audit_torch(model, kw, samples=1024, attention=False)
    assert len(none.sites) == 4 and none.attention_sites == []
    assert sum(o["kind"] == "attention skipped" for o in none.other_sites) == 2
    with pytest.raises(ValueError, match="not an attention call"):
        A.audit_torch(model, kw, sites=["h.0:nothing"])


def test_wav2vec2_layerdrop_gives_the_same_sites_under_every_rng_state():
    model = build40("wav2vec2", layers=12, layerdrop=0.1)
    x = torch.randn(2, 400, generator=torch.Generator().manual_seed(2))
    truth = expected40("wav2vec2", layers=12)
    for seed in range(10):
        torch.manual_seed(seed)
        found = discover(model, input_values=x)
        assert {(s.dropout, s.norm): s.form for s in found.sites} == truth, seed
        assert sum(w == "a one-draw decision (stochastic depth)" for _, _, w in found.draws) == 12
    audit = A.audit_torch(model, {"input_values": x}, samples=1024, attention_samples=256)
    assert len(audit.sites) == 24
    assert "LayerDrop / drop-path keep every layer" in str(audit)
    # the feed-forward's inner dropout reaches final_layer_norm through output_dense: a linear-path row;
    # the attention dropout (p = 0 in eval, its rate discovery's) reaches layer_norm through out_proj
    inner = [s for s in audit.linear_sites if s["form"] == "linear"]
    assert len(inner) == 12 and all(s["dropout"].endswith("intermediate_dropout") for s in inner)
    paths = [s["name"] for s in audit.linear_sites if s["form"] == "attention path"]
    assert paths == [f"encoder.layers.{i}.attention:dropout->encoder.layers.{i}.layer_norm" for i in range(12)], paths
    assert not [o for o in audit.other_sites if o["name"].endswith("intermediate_dropout")]


def test_warnings_collapse_per_kind():
    from dropmc.audit.coverage import collapse_warnings

    table = "site a\nwarning: x:dropout->n: few kept units\nsite b\nwarning: y->m: few kept units\n" \
            "warning: y->m: other\n"
    out = collapse_warnings(table, ["x:dropout->n", "y->m"])
    assert out.count("few kept units") == 1 and "warning (2 sites, first x:dropout->n): few kept units" in out
    assert "warning: y->m: other" in out


def test_swin_windows_and_rolls_are_identity_per_token():
    # Swin (pre-LN, shifted windows): a block's attention output goes through
    # the window reverse (views, permute) and the reverse roll before the
    # residual add into layernorm_after; the MLP's into the next block's
    # layernorm_before, or through the patch merging's cat (listed) or into
    # the final layernorm. drop_path_rate = 0 (drop-path is a mask product).
    import transformers as T

    torch.manual_seed(0)
    c = T.SwinConfig(image_size=16, patch_size=2, embed_dim=24, depths=[2, 2], num_heads=[2, 2], window_size=2,
                     hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, drop_path_rate=0.0)
    c._attn_implementation = "eager"
    model = T.SwinModel(c)
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    found = discover(model, pixel_values=x)
    b = "encoder.layers.{}.blocks.{}."
    want = {("embeddings.dropout", b.format(0, 0) + "layernorm_before"): "plain",
            ("embeddings.dropout", b.format(0, 0) + "layernorm_after"): "entangled"}
    for i in range(2):
        for j in range(2):
            want[(b.format(i, j) + "dropout", b.format(i, j) + "layernorm_after")] = "bypass"
        want[(b.format(i, 0) + "dropout#1", b.format(i, 1) + "layernorm_before")] = "bypass"
    want[(b.format(1, 1) + "dropout#1", "layernorm")] = "bypass"
    assert {(s.dropout, s.norm): s.form for s in found.sites} == want
    audit = A.audit_torch(model, {"pixel_values": x}, samples=1024, attention_samples=256)
    assert len(audit.sites) == 8 and audit.coverage["reasons"] == {"through cat": 1}  # the entangled row
    assert sum(o["form"] == "entangled" for o in audit.other_sites) == 1  # is a site of an audited call
    (cat,) = [o for o in audit.other_sites if o["form"] == "call"]
    assert cat["name"] == b.format(0, 1) + "dropout#1" and "downsample.norm" in cat["reason"]
