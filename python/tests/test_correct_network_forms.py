"""``correct(model, inputs)`` at the network scope computes what its
formula says, whichever path runs it (dropmc.correct.network: a swapped
``nn.LayerNorm``'s own call, the encoder layer's dedicated forward, a
norm's replaced instance ``forward``; with the norm's own site live or
by the norm of the scaled input).

The reference is written here from the formula alone, on an uncorrected
copy of the model: a forward pre-hook on each own-site dropout keeps its
input ``v``; a forward hook on each corrected norm replaces its output
``out`` by ``β + c (out − β)`` (LayerNorm) or ``c · out`` (RMSNorm),

    c² = (V + ε) / (V (1 + κ_t) + (p/q) mean_k v_k² + ε)

in float64, ``V`` the spread (LayerNorm) or mean square (RMSNorm) of the
norm's input, ``κ_t`` the ledger's ratio at the token's position (its
own site's share taken out when it has one, whose ``v`` term is then
present; else no ``v`` term). The ``κ_t`` are the ledger's
(dropmc.model.network_ledger, checked against the model's Monte Carlo in
test_correct_network.py): what is checked here is how the correction
applies them. The corrected model and the reference agree to
``ROUNDINGS`` ulps of the output's largest entry (float32 arithmetic
against float64 through every layer), while the uncorrected output is
more than 100 times that away.
"""

import copy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import dropmc.correct.hooks as H  # noqa: E402
import dropmc.correct.network as NC  # noqa: E402
import dropmc.torch as dt  # noqa: E402
from dropmc.model.calls import module_of as _module_name  # noqa: E402
from dropmc.model.discovery import discover  # noqa: E402
from dropmc.model.network_ledger import network_ledger  # noqa: E402
from hf_models import build  # noqa: E402
from torch import nn  # noqa: E402

torch.set_num_threads(1)

#: Roundings (ulps of the output's largest entry) between the float32
#: correction and the float64 reference through the layers (as in
#: test_correct_fast.py).
ROUNDINGS = 64


class _LinearBranch(nn.Module):
    """Pre-LN blocks ``x + W2 drop(W1 LN(x))``: the dropout reaches each
    later ``nn.LayerNorm`` through a linear map, so no norm has an own site
    (the swapped LayerNorm corrects by the norm of the scaled input)."""

    def __init__(self, d=16, blocks=3):
        super().__init__()
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(blocks + 1))
        self.up = nn.ModuleList(nn.Linear(d, 2 * d) for _ in range(blocks))
        self.down = nn.ModuleList(nn.Linear(2 * d, d) for _ in range(blocks))
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        for norm, up, down in zip(self.norms, self.up, self.down):
            x = x + down(self.drop(up(norm(x))))
        return self.norms[-1](x)


def _seeded(model):
    """Norm parameters away from (1, 0), so that β and γ matter."""
    with torch.no_grad():
        for m in model.modules():
            if hasattr(m, "weight") and m.weight is not None and m.weight.dim() == 1:
                m.weight.normal_(1.0, 0.3)
                if getattr(m, "bias", None) is not None:
                    m.bias.normal_(0.0, 0.3)
    return model


def _hf(arch):
    model = _seeded(build(arch, layers=2, d=32, heads=4, p=0.2)).eval()
    return model, {"input_ids": torch.randint(4, 100, (2, 9), generator=torch.Generator().manual_seed(1))}


def _encoder():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.2, batch_first=True)
    model = _seeded(nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)).eval()
    return model, torch.randn(2, 7, 32, generator=torch.Generator().manual_seed(1))


def _branch():
    torch.manual_seed(0)
    return _seeded(_LinearBranch()).eval(), 3 * torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(2))


CASES = {"gpt2 (own sites, swapped LayerNorm)": lambda: _hf("gpt2"),
         "llama (RMSNorm, replaced forward)": lambda: _hf("llama"),
         "post-LN encoder (dedicated forward)": _encoder,
         "linear branches (swapped LayerNorm, scaled input)": _branch}


def _call(model, inputs):
    return model(**inputs).last_hidden_state if isinstance(inputs, dict) else model(inputs)


def _reference(model, inputs, calls):
    """The formula (module docs) by hooks on an uncorrected copy of ``model``."""
    args, kw = ((), inputs) if isinstance(inputs, dict) else ((inputs,), {})
    ledger = network_ledger(model, args, kw, discover(model, *args, **kw))
    ref = copy.deepcopy(model)
    mods = dict(ref.named_modules())
    kept = {}
    for call in calls:
        noise = ledger.norms[call]
        own = noise.own_site
        kappa = noise.kappa_by_position(rest=own is not None).reshape(-1, 1)
        p = None
        if own is not None:
            name = _module_name(own[0])
            p = mods[name].p
            mods[name].register_forward_pre_hook(lambda m, a, k=name: kept.__setitem__(k, a[0]))

        def fix(m, a, out, kappa=kappa, own=own, p=p):
            x = a[0].double()
            eps = m.eps if hasattr(m, "eps") else m.variance_epsilon
            layer = isinstance(m, nn.LayerNorm)
            spread = x.var(-1, unbiased=False, keepdim=True) if layer else x.square().mean(-1, keepdim=True)
            extra = 0.0
            if own is not None:
                extra = p / (1 - p) * kept[_module_name(own[0])].double().square().mean(-1, keepdim=True)
            c = torch.sqrt((spread + eps) / (spread * (1 + kappa) + extra + eps))
            beta = m.bias.double() if layer else 0.0
            return (beta + c * (out.double() - beta)).to(out.dtype)

        mods[_module_name(call)].register_forward_hook(fix)
    with torch.no_grad():
        return _call(ref, inputs)


def _check(which):
    model, inputs = CASES[which]()
    with torch.no_grad():
        plain = _call(model, inputs)
    fixed_model = dt.correct(model, inputs, inplace=False)
    correction = fixed_model._dropmc_correction
    assert correction.scope == "network" and len(correction.network) >= 3
    with torch.no_grad():
        fixed = _call(fixed_model, inputs)
    reference = _reference(model, inputs, list(correction.network))
    tol = ROUNDINGS * torch.finfo(fixed.dtype).eps * reference.abs().max()
    return fixed_model, plain, fixed, reference, tol


@pytest.mark.parametrize("which", list(CASES))
def test_network_paths_compute_the_formula(which):
    _, plain, fixed, reference, tol = _check(which)
    assert (fixed - reference).abs().max() <= tol
    assert (plain - reference).abs().max() > 100 * tol


_PLANTS = {
    "scaled input without its rescaling (b = a)":
        ("linear branches (swapped LayerNorm, scaled input)", lambda mp: _plant_scales(mp)),
    "replaced forward returns the norm uncorrected":
        ("llama (RMSNorm, replaced forward)",
         lambda mp: mp.setattr(NC.NetworkSite, "forward", lambda self, own, x, args=(), kw=None: own(x, *args))),
    "own site's v left out": ("gpt2 (own sites, swapped LayerNorm)", lambda mp: _plant_no_v(mp)),
}


def _plant_scales(monkeypatch):
    real = NC.NetworkSite.scales
    monkeypatch.setattr(NC.NetworkSite, "scales", lambda self, x: (real(self, x)[0],) * 2)


def _plant_no_v(monkeypatch):
    import dropmc.correct.forms as forms

    real = forms._network_factor
    monkeypatch.setattr(forms, "_network_factor", lambda x, terms, centred, eps, rstd=None, v=None, p=0.0:
                        real(x, terms, centred, eps, rstd, None, p))


@pytest.mark.parametrize("plant", list(_PLANTS))
def test_planted_faults_fail(plant, monkeypatch):
    which, apply = _PLANTS[plant]
    apply(monkeypatch)
    _, _, fixed, reference, tol = _check(which)
    assert (fixed - reference).abs().max() > tol


def test_replaced_forward_keeps_the_contracts():
    """On the replaced-forward path (Llama's RMSNorm): training bit for bit,
    no hook added to the norm, a hook registered before ``correct`` sees
    the corrected output (its own output times a factor in (0, 1) per
    token) and a pre-hook the input as the layer gives it, a deep copy
    corrected on its own, norms still recognised on the corrected model,
    ``uncorrect`` exact."""
    model, inputs = _hf("llama")
    norm = model.layers[1].input_layernorm
    seen, given = [], []
    norm.register_forward_hook(lambda m, a, out: seen.append(out.detach().clone()))
    norm.register_forward_pre_hook(lambda m, a: given.append(a[0].detach().clone()))
    with torch.no_grad():
        plain = _call(model, inputs)
    twin = copy.deepcopy(model)
    dt.correct(model, inputs)
    assert type(vars(norm)["forward"]) is H._CorrectedForward
    assert len(norm._forward_hooks) == 1 and len(norm._forward_pre_hooks) == 1  # the user's only
    seen.clear(), given.clear()
    with torch.no_grad():
        out = model(**inputs, output_hidden_states=True)
    fixed = out.last_hidden_state
    assert not torch.equal(fixed, plain)
    assert torch.equal(given[0], out.hidden_states[1])  # the layer's input, not scaled
    factor = seen[0] / H._OwnForward(norm)(given[0])
    assert (factor.std(-1) <= 1e-5 * factor.mean(-1)).all() and (factor < 1).all() and (factor > 0.5).all()
    copied = copy.deepcopy(model)
    with torch.no_grad():
        assert torch.equal(_call(copied, inputs), fixed)
    dt.uncorrect(copied)
    with torch.no_grad():
        assert torch.equal(_call(copied, inputs), plain) and torch.equal(_call(model, inputs), fixed)
    assert set(discover(model, **inputs).norms) == set(discover(twin, **inputs).norms)
    model.train(), twin.train()
    torch.manual_seed(5)
    want = _call(twin, inputs)
    torch.manual_seed(5)
    assert torch.equal(_call(model, inputs), want)
    model.eval()
    dt.uncorrect(model)
    assert not any(k == "forward" or k.startswith("_dropmc") for m in model.modules() for k in vars(m))
    with torch.no_grad():
        assert torch.equal(_call(model, inputs), plain)
