"""Issue 40 items 6 and 8 (Python side): padded tokens are left out by the
mask of each site's own sequence (encoder vs decoder, never by shape
coincidence), and bad activations are named: NaN/inf in a captured tensor
and an empty batch are ValueErrors naming the site and the tensor."""

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

import dropmc.audit as A  # noqa: E402


def _mlp():
    torch.manual_seed(2)
    return nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Dropout(0.3), nn.LayerNorm(12))


@pytest.mark.parametrize("bad, word", [(float("nan"), "NaN"), (float("inf"), "infinity")])
def test_a_non_finite_input_is_named(bad, word):
    # Issue 52: the inputs are checked once, before any site (the site's own
    # check, "the captured dropout input ... holds NaN", is for activations
    # the model itself makes non-finite).
    x = torch.randn(5, 6)
    x[2, 1] = bad
    with pytest.raises(ValueError, match=rf"^inputs: {word}, 1 non-finite value\(s\) of 30"):
        A.audit_torch(_mlp(), x, samples=1024)


def test_an_empty_batch_is_named():
    with pytest.raises(ValueError, match=r"^inputs is empty \(shape \(0, 6\)\)"):
        A.audit_torch(_mlp(), torch.randn(0, 6), samples=1024)


def test_encoder_and_decoder_sites_use_their_own_padding_mask():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    c = transformers.BartConfig(d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                                decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                                vocab_size=100, max_position_embeddings=64, dropout=0.1,
                                attention_dropout=0.0, activation_dropout=0.0)
    c._attn_implementation = "eager"
    model = transformers.BartModel(c)
    g = torch.Generator().manual_seed(1)
    ids, dec = torch.randint(4, 90, (2, 8), generator=g), torch.randint(4, 90, (2, 8), generator=g)
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 5:] = 0  # 3 padded encoder tokens; the decoder (same length) has none
    audit = A.audit_torch(model, {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": dec},
                          samples=1024)
    tokens = {s["name"]: s["tokens"] for s in audit.sites}
    enc = [n for n in tokens if n.split("->")[1].startswith("encoder.")]
    dec_sites = [n for n in tokens if n.split("->")[1].startswith("decoder.")]
    assert enc and dec_sites
    assert all(tokens[n] == 13 for n in enc) and all(tokens[n] == 16 for n in dec_sites), tokens
    # an explicit mask per module prefix overrides: the decoder's last token padded too
    dmask = torch.ones(2, 8, dtype=torch.long)
    dmask[:, 7] = 0
    audit = A.audit_torch(model, {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": dec},
                          samples=1024, token_mask={"encoder": mask, "decoder": dmask})
    tokens = {s["name"]: s["tokens"] for s in audit.sites}
    assert all(tokens[n] == 13 for n in enc) and all(tokens[n] == 14 for n in dec_sites), tokens
    with pytest.raises(ValueError, match="token_mask of shape"):
        A.audit_torch(model, {"input_ids": ids, "decoder_input_ids": dec}, samples=1024,
                      token_mask=torch.ones(3, 3))


def test_a_named_pair_that_is_not_a_site_says_which_op_stops_it():
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(6, 12), nn.Dropout(0.2), nn.Linear(12, 12), nn.LayerNorm(12))
    with pytest.raises(ValueError, match=r"1 reaches 3 through linear:2 \(linear:2\) — a linear-path site") as e:
        A.audit_torch(model, torch.randn(4, 6), sites=[("1", "3")])
    assert len(str(e.value)) < 600
    # the default audit takes that path as a linear-path site, with numbers
    audit = A.audit_torch(model, torch.randn(4, 6), samples=1024)
    assert audit.coverage == {"calls": 1, "audited": 1, "listed": 0, "reasons": {}}
    assert [r["name"] for r in audit.linear_sites] == ["1->3"]
    (path,) = audit.discovery.paths
    assert (path.dropout, path.norm, path.ops, path.site) == ("1", "3", ("linear:2",), "")
    # a nonlinearity after the linear layer stops the family: listed, that op named
    model = nn.Sequential(nn.Linear(6, 12), nn.Dropout(0.2), nn.Linear(12, 12), nn.GELU(), nn.Linear(12, 12),
                          nn.LayerNorm(12))
    audit = A.audit_torch(model, torch.randn(4, 6), samples=1024)
    assert audit.coverage == {"calls": 1, "audited": 0, "listed": 1, "reasons": {"through gelu": 1}}
    assert str(audit).startswith("1 dropout calls: 0 audited, 1 listed (through gelu: 1)")
    (row,) = audit.other_sites
    assert row["reason"] == "through linear:2, then gelu (a nonlinearity: no closed form on this path) to 5"


def test_linear_path_sites_over_the_work_budget_are_listed_with_the_estimate(monkeypatch):
    import dropmc.audit.linear as LA

    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(6, 12), nn.Dropout(0.2), nn.Linear(12, 12), nn.LayerNorm(12))
    x = torch.randn(4, 6)
    monkeypatch.setattr(LA, "LINEAR_AUDIT_WORK", 4 * 1024 * 12 * 12 - 1)  # one multiply-add short
    audit = A.audit_torch(model, x, samples=1024)
    assert audit.coverage == {"calls": 1, "audited": 0, "listed": 1, "reasons": {"linear path not sampled": 1}}
    (row,) = audit.other_sites
    assert "5.9e+05 multiply-adds" in row["reason"] and "linear=True" in row["reason"], row["reason"]
    assert A.audit_torch(model, x, samples=1024, linear=True).coverage["audited"] == 1
    monkeypatch.setattr(LA, "LINEAR_AUDIT_WORK", 4 * 1024 * 12 * 12)  # exactly the work: audited
    assert A.audit_torch(model, x, samples=1024).coverage["audited"] == 1
    off = A.audit_torch(model, x, samples=1024, linear=False)
    assert off.coverage["reasons"] == {"through a linear layer": 1}
    with pytest.raises(TypeError, match="linear must be None or a bool"):
        A.audit_torch(model, x, linear="yes")


class _EinsumAttention(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(4)
        self.qkv = nn.Linear(8, 24)
        self.norm = nn.LayerNorm(8)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, -1)
        w = torch.nn.functional.dropout(torch.softmax(q @ k.transpose(-1, -2), -1), 0.1, self.training)
        # an ellipsis: the equation names no batch axes to read the rows by (dropmc.model.attention_product)
        return self.norm(x + self.drop(torch.einsum("...ls,...sd->...ld", w, v)))


def test_an_unreadable_attention_call_is_listed_and_the_audit_returns():
    audit = A.audit_torch(_EinsumAttention(), torch.randn(2, 5, 8), samples=1024)
    assert [s["name"] for s in audit.sites] == ["drop->norm"] and audit.attention_sites == []
    (row,) = [o for o in audit.other_sites if o["form"] == "attention"]
    assert row["name"] == "dropout"  # a functional call at the top level
    assert row["reason"] == "attention weights not readable: its output met the values through einsum (not read)"
    assert audit.coverage["reasons"] == {"attention weights not readable": 1}
