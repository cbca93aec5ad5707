"""The default (network-scope) ``correct(model, inputs)`` on a Llama model
whose attention is SDPA, against the same model with eager attention.

The two models have the same weights (same seed; ``attn_implementation``
changes no parameter) and compute the same function: softmax attention
with the causal mask and attention dropout ``P`` on the probabilities —
eager as ``dropout(softmax(·)) @ v``, SDPA as one
``F.scaled_dot_product_attention(..., dropout_p=P)`` call. The attention
dropout is the model's only dropout, so its noise reaches every norm
after the first layer's attention (through ``o_proj`` and the residual)
only by the attention; the network ledger follows it through the eager
``softmax → dropout → matmul`` ops and through its SDPA rule
(``dropmc.model.network_rules.sdpa_variance``), which are one rule written
twice. So both models must get the same norms corrected with the same
upstream noise ratios κ, and the same corrected outputs, up to the float
rounding in which their forwards differ.

The tolerance (:data:`REL_TOL`): the two forwards differ only in how the
attention's sums are ordered (SDPA's kernel against eager's matmul and
softmax); a sum of ``n`` float32 terms taken in two orders differs by at
most about ``2 (n − 1) u Σ|terms|`` (``u = 2⁻²⁴`` the unit roundoff; the
standard bound of recursive summation, each order within ``(n − 1) u``).
The longest such sum is over the ``T`` keys (``T = HEAD_DIM = 16`` here),
so each layer's attention output moves by at most ``2 (T − 1) u``
relative to its scale; the rest of the layer (``o_proj``, the residual,
the RMSNorm, the MLP) is the same float ops on inputs that moved that
much, and the norms keep the scale at one, so the relative move adds up
over the ``LAYERS`` layers at most. κ is a ratio of variances the ledger
reads off those activations (in float64, smooth in them), so it moves by
the same relative amount to first order. The corrected outputs' bound is
relative to their largest entry.

Planted faults (each asserted to fail the check, below): discovery
counting only ``nn.Dropout``/``F.dropout`` calls as dropout calls (SDPA's
``dropout_p`` not one: the defect this file was written for, where the
SDPA model was refused "no site to correct"); the ledger's SDPA rule
carrying no noise (the SDPA model then has no norm to correct).
"""

import pytest
import torch

from dropmc.correct import sites as correct_sites
from dropmc.model import network_rules
from dropmc.correct import correct
from dropmc.audit.network import audit_network

transformers = pytest.importorskip("transformers")

HIDDEN, HEADS, LAYERS, TOKENS, P = 64, 4, 2, 16, 0.2
HEAD_DIM = HIDDEN // HEADS

#: float32 unit roundoff.
U32 = 2.0 ** -24
#: Module docs: ``2 (n − 1) u`` per layer for the longest reordered sum
#: (``n = max(TOKENS, HEAD_DIM)``), over ``LAYERS`` layers.
REL_TOL = 2 * (max(TOKENS, HEAD_DIM) - 1) * U32 * LAYERS


def _llama(impl: str):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_hidden_layers=LAYERS,
                                      num_attention_heads=HEADS, num_key_value_heads=HEADS, vocab_size=100,
                                      attention_dropout=P, attn_implementation=impl)
    return transformers.LlamaModel(config).eval()


def _ids():
    return torch.randint(0, 100, (1, TOKENS), generator=torch.Generator().manual_seed(0))


def _corrected(impl: str):
    """``(κ by norm, scope_reason, plain output, corrected output)`` of the
    default ``correct`` on the ``impl`` model."""
    torch.set_num_threads(1)
    model, ids = _llama(impl), _ids()
    with torch.no_grad():
        plain = model(ids).last_hidden_state
    correct(model, ids)
    c = model._dropmc_correction
    with torch.no_grad():
        out = model(ids).last_hidden_state
    return dict(c.network), c.scope_reason, plain, out


@pytest.fixture(scope="module")
def eager():
    return _corrected("eager")


def _failures(eager, sdpa) -> list:
    kappa_e, reason_e, plain_e, out_e = eager
    kappa_s, reason_s, _, out_s = sdpa
    bad = []
    if reason_s != reason_e:
        bad.append(f"scope: eager {reason_e!r}, sdpa {reason_s!r}")
    if set(kappa_s) != set(kappa_e):
        bad.append(f"norms: eager {sorted(kappa_e)}, sdpa {sorted(kappa_s)}")
    for norm, k in kappa_e.items():
        if norm in kappa_s and abs(kappa_s[norm] - k) > REL_TOL * k:
            bad.append(f"{norm}: κ eager {k!r}, sdpa {kappa_s[norm]!r}")
    scale = float(out_e.abs().max())
    gap = float((out_s - out_e).abs().max())
    if gap > REL_TOL * scale:
        bad.append(f"corrected outputs differ by {gap:.3g} > {REL_TOL * scale:.3g}")
    return bad


def test_eager_model_is_network_corrected(eager):
    """The reference is not vacuous: network scope, every norm after the
    first attention, and a correction far beyond the tolerance."""
    kappa, reason, plain, out = eager
    assert reason == "the default"
    assert sorted(kappa) == sorted(["layers.0.post_attention_layernorm", "layers.1.input_layernorm",
                                    "layers.1.post_attention_layernorm", "norm"])
    assert all(k > 0 for k in kappa.values())
    assert float((out - plain).abs().max()) > 1000 * REL_TOL * float(out.abs().max())


def test_sdpa_corrected_as_eager(eager):
    assert _failures(eager, _corrected("sdpa")) == []


@pytest.mark.parametrize("fault", ["sdpa_not_a_dropout", "sdpa_rule_noiseless"])
def test_planted_faults_fail(eager, monkeypatch, fault):
    if fault == "sdpa_not_a_dropout":  # the old check: only nn.Dropout / F.dropout calls count
        checked = correct_sites._nothing_found

        def only_dropouts(found, need_sites=True):
            if not found.dropouts:
                raise ValueError("no site to correct: the model made no dropout call (nn.Dropout or F.dropout)")
            checked(found, need_sites)

        monkeypatch.setattr(correct_sites, "_nothing_found", only_dropouts)
    else:
        monkeypatch.setattr(network_rules, "sdpa_variance", lambda op, s_of: None)
    try:
        sdpa = _corrected("sdpa")
    except ValueError:
        return  # refused: the check cannot pass
    assert _failures(eager, sdpa) != []


def test_network_audit_lists_the_same_norms():
    """``dropmc.torch.audit(..., network=True)``'s network rows come from
    :func:`audit_network`'s (few forwards: only the norms are compared)."""
    torch.set_num_threads(1)
    names = {}
    for impl in ("eager", "sdpa"):
        audit = audit_network(_llama(impl), _ids(), forwards=16, adaptive=False, progress=False)
        names[impl] = sorted(s["norm"] if isinstance(s, dict) else s.norm for s in audit.network_sites)
    assert names["eager"] == names["sdpa"] != []


def test_site_scope_corrects_the_sdpa_attention_paths_as_eager():
    """The per-site scope corrects an attention dropout's path on through
    ``o_proj`` to the next norm (the linear-path family, docs/linear-path.md),
    SDPA's as eager's (issue 50 item 5; before, the SDPA model was refused
    "no dropout call's output reaches a norm" while its eager twin was
    corrected): the same norms, and the same corrected outputs to the
    module's tolerance."""
    torch.set_num_threads(1)
    got = {}
    for impl in ("eager", "sdpa"):
        model, ids = _llama(impl), _ids()
        correct(model, ids, scope="site")
        with torch.no_grad():
            got[impl] = (sorted(n for _, n in model._dropmc_correction.linear_sites), model(ids).last_hidden_state)
    assert got["sdpa"][0] == got["eager"][0] == ["layers.0.post_attention_layernorm",
                                                 "layers.1.post_attention_layernorm"]
    gap, scale = float((got["sdpa"][1] - got["eager"][1]).abs().max()), float(got["eager"][1].abs().max())
    assert gap <= REL_TOL * scale, (gap, REL_TOL * scale)