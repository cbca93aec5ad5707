"""Issue 50 on Hugging Face architectures (small random configs, no
downloads): the patterns of test_trace_patterns.py where real code writes
them, each site's truth against the model's own train-mode Monte Carlo
with every other dropout of the model at p = 0 (the norm's input then
depends on the one mask):

* GPT-NeoX's parallel residual ``x + attn(ln1(x)) + mlp(ln2(x))``: the
  MLP dropout of layer 0 is a bypass site of layer 1's input norm;
* BEiT's layer scale ``λ ⊙ dropout(attention)``: a gated site — also
  where drop-path's drawn mask follows it (``M₂ ⊙ λ ⊙ M₁ ⊙ v / q₂``, layer 1
  of a model with ``drop_path_rate > 0``), the other mask at its eval value
  as for every site (docs/linear-path.md); ``correct`` corrects it there;
* ConvNeXt's drop-path before the next stage's channels-first LayerNorm:
  a token-level mask product read on the channel axis.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
import dropmc.audit as A  # noqa: E402
import dropmc.correct as C  # noqa: E402
import dropmc.torch as dt  # noqa: E402
from correct_checks import one_site_gap  # noqa: E402
from mc_checks import bonferroni_z, projected_z, train_mode_outputs  # noqa: E402

torch.set_num_threads(1)
RUNS = 2000


def _build(arch, drop_path=0.0, hidden=0.1, scale=0.1):
    torch.manual_seed(0)
    if arch == "gpt-neox":
        config = T.GPTNeoXConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                 intermediate_size=64, hidden_dropout=0.1, attention_dropout=0.0,
                                 use_parallel_residual=True, attn_implementation="eager")
        return T.GPTNeoXModel(config).double(), {"input_ids": torch.randint(4, 60, (2, 8))}
    if arch == "beit":
        config = T.BeitConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                              image_size=32, patch_size=8, hidden_dropout_prob=hidden, attention_probs_dropout_prob=0.0,
                              layer_scale_init_value=scale, use_mask_token=False, drop_path_rate=drop_path)
        return T.BeitModel(config).double(), {"pixel_values": torch.randn(2, 3, 32, 32, dtype=torch.float64)}
    config = T.ConvNextConfig(num_channels=3, num_stages=2, hidden_sizes=[8, 16], depths=[2, 2], drop_path_rate=0.1,
                              image_size=32)
    return T.ConvNextModel(config).double(), {"pixel_values": torch.randn(2, 3, 32, 32, dtype=torch.float64)}


@pytest.mark.parametrize("arch, dropout, norm", [
    ("gpt-neox", "layers.0.post_mlp_dropout", "layers.1.input_layernorm"),
    ("beit", "layers.0.dropout", "layers.0.layernorm_after"),
    ("convnext", "encoder.stages.0.layers.1.drop_path:rand_mask", "encoder.stages.1.downsampling_layer.0"),
])
def test_the_sites_truth_matches_the_models_monte_carlo(arch, dropout, norm):
    model, kw = _build(arch)
    for name, module in model.named_modules():  # the one dropout left: its module keeps its rate
        if isinstance(module, torch.nn.Dropout) and name != dropout:
            module.p = 0.0
    model.eval()
    audit = A.audit_torch(model, kw, sites=[(dropout, norm)], samples=16384, seed=3)
    assert [s["name"] for s in audit.sites] == [f"{dropout}->{norm}"]
    _agrees_with_the_models_monte_carlo(arch, model, kw, audit, 0, norm)


def _agrees_with_the_models_monte_carlo(arch, model, kw, audit, i, norm):
    """Audit site ``i``'s truth against the model's train-mode outputs of
    ``norm`` (``RUNS`` copies of the batch), every output's z within the
    family's critical z."""
    truth, se = audit.truth(i)
    out = train_mode_outputs(model, norm, kw, RUNS, channel_axis=1 if arch == "convnext" else -1)
    zz = projected_z(truth, se, out)
    assert np.abs(zz).max() < bonferroni_z(zz.size), np.abs(zz).max()


#: BEiT's drop-path after the layer scale, layer 1 (rate 0.8 there): the
#: attention output's dropout and the drop-path mask product, both bypass
#: sites of layernorm_after. Hidden dropout 0.3 and layer scale 1: a gap
#: the first-order correction visibly closes, and a term large enough that
#: the Monte Carlo resolves a ``v`` off by drop-path's ``1/q₂ = 5`` (planted:
#: max |z| 31.9 against 1.5, critical 6.98 over the 34 tokens).
DROPPED = ("layers.1.dropout", "layers.1.layernorm_after")
DROP_PATH = ("layers.1.drop_path:rand_mask", "layers.1.layernorm_after")


def test_a_layer_scale_under_drop_path_is_audited_and_corrected():
    model, kw = _build("beit", drop_path=0.8, hidden=0.3, scale=1.0)
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Dropout) and name != DROPPED[0]:
            module.p = 0.0
    model.eval()
    # captured in the neutral train-mode forward (a rand-mask site among them), the held mask's tape
    audit = A.audit_torch(model, kw, sites=[DROPPED, DROP_PATH], samples=16384, seed=3)
    assert [s["name"] for s in audit.sites] == ["->".join(DROPPED), "->".join(DROP_PATH)]
    drop_paths = [m for m in model.modules() if type(m).__name__ == "BeitDropPath"]
    rates = [m.drop_prob for m in drop_paths]
    for m in drop_paths:  # the site's own mask only: drop-path at its eval value
        m.drop_prob = 0.0
    try:
        _agrees_with_the_models_monte_carlo("beit", model, kw, audit, 0, DROPPED[1])
    finally:
        for m, r in zip(drop_paths, rates):
            m.drop_prob = r
    s = audit.sites[0]
    gap = one_site_gap(model, kw, audit, 0)
    print(f"uncorrected {s['uncorrected']['rms']:.3e}, first-order bound {s['first_order']['upper']:.3e}, "
          f"corrected {gap:.3e}")
    assert s["uncorrected"]["rms"] > s["first_order"]["upper"] >= gap
    _bit_exact(model, kw, DROPPED)


def _bit_exact(model, kw, site):
    """Training output and, after ``uncorrect``, the eval output bit for bit."""
    def train_out():
        model.train()
        torch.manual_seed(5)
        with torch.no_grad():
            out = model(**kw).last_hidden_state
        model.eval()
        return out

    with torch.no_grad():
        before_eval, before_train = model.eval()(**kw).last_hidden_state, train_out()
    dt.correct(model, kw, sites=[site])
    assert model._dropmc_correction.sites == [site]
    during_train = train_out()
    dt.uncorrect(model)
    with torch.no_grad():
        after_eval = model.eval()(**kw).last_hidden_state
    assert torch.equal(before_train, during_train) and torch.equal(before_eval, after_eval)


def test_a_dropout_under_drop_path_into_a_token_mean_is_listed_through_the_mean():
    """Layer 1's MLP dropout ``λ₂ ⊙ dropout(v)``, drop-path's mask, the
    residual add, then the pooler's mean over the patch tokens: the mean
    mixes tokens (no per-token site), and that is the reason listed — not
    the drop-path product, held at its eval value for this dropout."""
    model, kw = _build("beit", drop_path=0.4)
    model.eval()
    audit = A.audit_torch(model, kw, samples=256, attention_samples=256, seed=3)
    rows = {o["name"].split("->")[0]: o for o in audit.other_sites}
    assert "->".join(DROPPED) in [s["name"] for s in audit.sites]
    assert rows["layers.1.dropout#1"]["kind"] == "through mean", rows["layers.1.dropout#1"]


def test_correct_at_site_scope_keeps_one_site_per_norm_under_drop_path():
    """The default ``scope="site"`` call: layernorm_after of layer 1 sees
    the drop-path site and the dropout under it; the drop-path one is
    corrected (as before the dropout was read) and the other refused with
    the way to choose it, not a ValueError for the whole model."""
    model, kw = _build("beit", drop_path=0.4)
    dt.correct(model, kw, scope="site")
    corr = model._dropmc_correction
    dt.uncorrect(model)
    assert DROP_PATH in corr.sites and DROPPED not in corr.sites
    assert "sites=[('layers.1.dropout'" in corr.refused["->".join(DROPPED)]
