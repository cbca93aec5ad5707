"""``dropmc.torch.correct(..., linear=True)`` on BERT's attention paths
(issues 41/43): ``encoder.layer.i.attention.self:dropout →
encoder.layer.i.attention.output.LayerNorm``. BERT's attention passes
``p = 0`` to ``F.dropout`` in eval, so ``correct`` must hand discovery's
train-mode rates to the path tracer, or it silently corrects nothing there.

The same norm is also the ordinary bypass site of the hidden dropout
``attention.output.dropout``; the two corrections compose (the first-order
factor's denominator adds the two noise variances, correct_linear._scaled).

The small float64 BERT of test_linear_path_bert.py (``initializer_range``
0.5). Layer 0's ``attention.output.LayerNorm`` eval output after
``correct`` is compared with the model's own train-mode Monte Carlo mean of
that output (60 000 forwards; the embeddings' dropout at p = 0 so that this
norm sees only the dropouts corrected there): the mean absolute distance
over its components must be at least 3× smaller than the uncorrected eval
output's (first order is not exact, so no z test; the Monte Carlo's own
standard error, ≈ 1.7e-3 per component, is a fraction of the distances
compared). Training output and ``uncorrect`` bit for bit.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
nn = torch.nn

import dropmc.torch  # noqa: E402
from test_correct_linear import norm_output  # noqa: E402
from test_linear_path_bert import NAMES, _bert, _norm_mc  # noqa: E402
from test_linear_path_mistral import norm_mc  # noqa: E402

torch.set_num_threads(1)

HIDDEN0 = "encoder.layer.0.attention.output.dropout"
PATHS = [tuple(n.split("->")) for n in NAMES]


def _output(model, ids, train_seed=None):
    """Layer 0's attention.output.LayerNorm output of one forward (train
    mode with ``train_seed``)."""
    return norm_output(model, ids, model.encoder.layer[0].attention.output.LayerNorm, train_seed)


@pytest.fixture(scope="module")
def bert():
    """The model, its inputs, the eval and a train output, and the Monte
    Carlo means with the attention dropout alone and with the attention and
    hidden dropouts both drawing masks."""
    model, ids = _bert()
    attention_only, _ = _norm_mc(model, ids)
    model.embeddings.dropout.p = 0.0
    try:
        both, _ = norm_mc(model, ids, model.encoder.layer[0].attention.output.LayerNorm, 60_000, 10_000)
    finally:
        model.embeddings.dropout.p = 0.1
    return model, ids, _output(model, ids), _output(model, ids, 5), attention_only, both


def _distance(out, mc):
    return float(np.abs(out.numpy() - mc).mean())


def _corrected(model, ids, train, **kwargs):
    """Layer 0's corrected eval output under ``correct(model, ids,
    **kwargs)``, checking the train output bit for bit; uncorrects."""
    dropmc.torch.correct(model, ids, **kwargs, scope="site")
    try:
        out = _output(model, ids)
        assert torch.equal(_output(model, ids, 5), train)
        return out, model._dropmc_correction
    finally:
        dropmc.torch.uncorrect(model)


def test_both_layers_attention_paths_are_corrected_beside_the_hidden_dropouts(bert):
    model, ids, *_ = bert
    dropmc.torch.correct(model, ids, linear=True, scope="site")
    try:
        c = model._dropmc_correction
        assert c.linear_sites == PATHS, c.linear_sites
        assert (HIDDEN0, PATHS[0][1]) in c.sites, c.sites  # the same norm's ordinary site
        assert not [k for k in c.refused if "attention.self" in k], c.refused
    finally:
        dropmc.torch.uncorrect(model)


def test_the_attention_path_alone_brings_layer0_three_times_closer(bert):
    model, ids, eval_out, train, attention_only, _ = bert
    out, c = _corrected(model, ids, train, linear=True, exclude=[HIDDEN0])
    assert PATHS[0] in c.linear_sites, c.linear_sites
    far, near = _distance(eval_out, attention_only), _distance(out, attention_only)
    print(f"|eval - MC| {far:.3e}, |corrected - MC| {near:.3e}: {far / near:.2f}x closer")
    assert 3 * near <= far
    assert torch.equal(_output(model, ids), eval_out)  # uncorrect: bit for bit


def test_both_noises_at_one_norm_are_corrected_together(bert):
    """Against the Monte Carlo with both dropouts drawing masks: the
    composed correction must be 3× closer than the eval output and than
    either correction alone (neither one silently dropped)."""
    model, ids, eval_out, train, _, both = bert
    composed, c = _corrected(model, ids, train, linear=True)
    assert PATHS[0] in c.linear_sites and (HIDDEN0, PATHS[0][1]) in c.sites
    linear_only, _ = _corrected(model, ids, train, linear=True, exclude=[HIDDEN0])
    ordinary_only, _ = _corrected(model, ids, train, linear=False)
    near = _distance(composed, both)
    others = {k: _distance(o, both) for k, o in
              [("eval", eval_out), ("linear only", linear_only), ("ordinary only", ordinary_only)]}
    print(f"|composed - MC| {near:.3e}; " + ", ".join(f"|{k} - MC| {v:.3e}" for k, v in others.items()))
    for k, v in others.items():
        assert 3 * near <= v, (k, v, near)
    assert torch.equal(_output(model, ids), eval_out)


def _factors(out, eval_out, beta):
    """The per-token factor ``c`` of a correction ``β + c (out − β)``,
    read off its output (one value per token, checked constant)."""
    ratio = (out - beta) / (eval_out - beta)
    assert torch.allclose(ratio, ratio[:, :1].expand_as(ratio), rtol=0, atol=1e-9)
    return ratio[:, 0]


def test_the_composed_factor_adds_the_two_noise_variances(bert):
    """The first-order factor of two independent noises at one norm, ``c² =
    (V + ε) / (V + s₀ + s₁ + ε)``: its noise ratios ``1/c² − 1 = (s₀ +
    s₁) / (V + ε)`` are the sums of those of each correction alone
    (a product of the two factors would add ``s₀ s₁ / (V + ε)²`` too)."""
    model, ids, eval_out, train, _, _ = bert
    beta = model.encoder.layer[0].attention.output.LayerNorm.bias.detach()
    outs = [_corrected(model, ids, train, **kw)[0] for kw in
            (dict(linear=True), dict(linear=True, exclude=[HIDDEN0]), dict(linear=False))]
    joint, linear, ordinary = (_factors(o, eval_out, beta) ** -2 - 1 for o in outs)
    assert (linear > 1e-3).all() and (ordinary > 1e-3).all(), (linear, ordinary)
    assert torch.allclose(joint, linear + ordinary, rtol=1e-9, atol=0), (joint, linear + ordinary)


class Stack(nn.Module):
    """``drop1 → lin → drop2 → ln1 (→ ln2)``: ``drop1 → ln1`` a linear path
    (``drop2`` the identity in eval) and ``drop2 → ln1`` an ordinary site
    at the same norm, plain, or compound ``drop2 → ln1 → ln2``."""

    def __init__(self, compound: bool):
        super().__init__()
        self.drop1, self.lin, self.drop2, self.ln1 = nn.Dropout(0.2), nn.Linear(16, 16), nn.Dropout(0.1), nn.LayerNorm(16)
        self.ln2 = nn.LayerNorm(16) if compound else None

    def forward(self, x):
        y = self.ln1(self.drop2(self.lin(self.drop1(x))))
        return y if self.ln2 is None else self.ln2(y)


@pytest.mark.parametrize("compound", [False, True])
def test_an_overlap_is_composed_when_plain_and_refused_with_the_reason_when_compound(compound):
    torch.manual_seed(0)
    model = Stack(compound).double().eval()
    dropmc.torch.correct(model, torch.randn(4, 16, dtype=torch.float64), linear=True, scope="site")
    c = model._dropmc_correction
    if not compound:
        assert c.sites == [("drop2", "ln1")] and c.linear_sites == [("drop1", "ln1")], (c.sites, c.linear_sites)
        assert "drop1->ln1" not in c.refused, c.refused
    else:
        assert c.sites == [("drop2", "ln1", "ln2")] and c.linear_sites == [], (c.sites, c.linear_sites)
        assert "does not compose" in c.refused["drop1->ln1"] and "drop2" in c.refused["drop1->ln1"], c.refused
