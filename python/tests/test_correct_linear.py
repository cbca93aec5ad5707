"""``dropmc.torch.correct`` at linear-path sites (python/dropmc/correct/linear.py).

Mistral (2 layers, ``attention_dropout`` 0.1, its only dropout): after
``correct``, layer 0's ``post_attention_layernorm`` eval output must be at
least 3× closer (mean absolute distance over its components) to the model's
own train-mode Monte Carlo mean than the uncorrected eval output; the
train-mode output must be bit for bit what it was, and ``uncorrect`` must
restore the eval output bit for bit. A site whose dropout module runs twice
per forward is refused with the reason.
"""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
nn = torch.nn

import dropmc.torch  # noqa: E402
from test_linear_path_mistral import N, _mistral, _norm_mc  # noqa: E402

torch.set_num_threads(1)


def norm_output(model, ids, norm, train_seed=None):
    """The module ``norm``'s output (tokens × d) of one forward (train mode
    with ``train_seed``)."""
    outs = []
    h = norm.register_forward_hook(lambda m, a, o: outs.append(o.detach().clone()))
    model.train(train_seed is not None)
    if train_seed is not None:
        torch.manual_seed(train_seed)
    try:
        with torch.no_grad():
            model(ids)
    finally:
        h.remove()
        model.eval()
    return outs[0].reshape(ids.shape[-1], -1)


def _outputs(model, ids, train_seed=None):
    """Layer 0's post_attention_layernorm output of one forward."""
    return norm_output(model, ids, model.layers[0].post_attention_layernorm, train_seed)


def test_correct_brings_layer0_three_times_closer_to_the_models_monte_carlo():
    model, ids = _mistral()
    eval_out, train_out = _outputs(model, ids), _outputs(model, ids, train_seed=5)
    mc, _ = _norm_mc(model, ids, N)
    dropmc.torch.correct(model, ids, scope="site")
    sites = model._dropmc_correction.linear_sites
    assert sites == [(f"layers.{i}.self_attn:dropout", f"layers.{i}.post_attention_layernorm") for i in (0, 1)]
    corrected = _outputs(model, ids)
    assert torch.equal(_outputs(model, ids, train_seed=5), train_out)
    far, near = (eval_out.numpy() - mc).__abs__().mean(), (corrected.numpy() - mc).__abs__().mean()
    print(f"|eval - MC| {far:.3e}, |corrected - MC| {near:.3e}: {far / near:.2f}x closer")
    assert 3 * near <= far
    dropmc.torch.uncorrect(model)
    assert torch.equal(_outputs(model, ids), eval_out)


class Twice(nn.Module):
    """One dropout module called twice: ``drop`` reaches ``ln`` through
    ``lin``, ``drop#1`` is a plain bypass site of ``ln2``."""

    def __init__(self):
        super().__init__()
        self.drop, self.lin, self.ln, self.ln2 = nn.Dropout(0.2), nn.Linear(16, 16), nn.LayerNorm(16), nn.LayerNorm(16)

    def forward(self, x):
        y = self.ln(self.lin(self.drop(x)) + x)
        return self.ln2(y + self.drop(y))


def test_a_dropout_module_called_twice_is_refused_with_the_reason():
    torch.manual_seed(0)
    model = Twice().double().eval()
    dropmc.torch.correct(model, torch.randn(4, 16, dtype=torch.float64), linear=True, scope="site")
    c = model._dropmc_correction
    assert ("drop#1", "ln2") in c.sites and c.linear_sites == [], (c.sites, c.linear_sites)
    assert "more than once" in c.refused["drop->ln"], c.refused
