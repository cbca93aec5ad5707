"""Issue 50 on Hugging Face architectures (small random configs, no
downloads): the patterns of test_trace_patterns.py where real code writes
them, each site's truth against the model's own train-mode Monte Carlo
with every other dropout of the model at p = 0 (the norm's input then
depends on the one mask):

* GPT-NeoX's parallel residual ``x + attn(ln1(x)) + mlp(ln2(x))``: the
  MLP dropout of layer 0 is a bypass site of layer 1's input norm;
* BEiT's layer scale ``λ ⊙ dropout(attention)``: a gated site;
* ConvNeXt's drop-path before the next stage's channels-first LayerNorm:
  a token-level mask product read on the channel axis.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
import dropmc.audit as A  # noqa: E402
from mc_checks import bonferroni_z, projected_z, train_mode_outputs  # noqa: E402

torch.set_num_threads(1)
RUNS = 2000


def _build(arch):
    torch.manual_seed(0)
    if arch == "gpt-neox":
        config = T.GPTNeoXConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                 intermediate_size=64, hidden_dropout=0.1, attention_dropout=0.0,
                                 use_parallel_residual=True, attn_implementation="eager")
        return T.GPTNeoXModel(config).double(), {"input_ids": torch.randint(4, 60, (2, 8))}
    if arch == "beit":
        config = T.BeitConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                              image_size=32, patch_size=8, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.0,
                              layer_scale_init_value=0.1, use_mask_token=False, drop_path_rate=0.0)
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
    truth, se = audit.truth(0)
    out = train_mode_outputs(model, norm, kw, RUNS, channel_axis=1 if arch == "convnext" else -1)
    zz = projected_z(truth, se, out)
    assert np.abs(zz).max() < bonferroni_z(zz.size), np.abs(zz).max()
