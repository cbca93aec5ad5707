"""dropmc.correct.fast: the class-swapped dropouts and norms and the
dedicated eval forward of ``nn.TransformerEncoderLayer`` compute what the
correction's formula says.

The reference is written here from the formula alone, not from dropmc: on
an uncorrected copy of the model, a forward pre-hook on each site's dropout
keeps its input ``v`` and a forward hook on its norm replaces the output
``out`` by ``β + c (out − β)``, ``c² = (σ² + ε) / (σ² + ε + (p/q)·mean v²)``
in float64 (``σ²`` the spread of the norm's input). Those hooks keep torch's
fused encoder kernel closed, so the reference runs the module path; the
corrected model under ``torch.no_grad()`` runs the dedicated forward (a spy
counts its calls). They agree to ``ROUNDINGS`` ulps of the output's largest
entry (float32 factors against float64 ones, through every layer), while
the uncorrected output is more than 100 times that away.
"""

import copy

import pytest

torch = pytest.importorskip("torch")

import dropmc.correct.fast as CFast  # noqa: E402
import dropmc.correct.hooks as H  # noqa: E402
import dropmc.torch as dt  # noqa: E402
from dropmc.model.calls import module_of as _module_name  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

torch.set_num_threads(1)

#: Roundings (ulps of the output's largest entry) between the float32
#: correction and the float64 reference through the layers.
ROUNDINGS = 64


def _encoder(norm_first, layers=3, d=32):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d, 4, 2 * d, dropout=0.2, batch_first=True, norm_first=norm_first)
    final = nn.LayerNorm(d) if norm_first else None
    return nn.TransformerEncoder(layer, layers, norm=final, enable_nested_tensor=False).eval(), \
        torch.randn(2, 7, d, generator=torch.Generator().manual_seed(1))


def _bert():
    from hf_models import build

    model = build("bert", layers=2, d=32, heads=4, p=0.2).eval()
    with torch.no_grad():  # BERT's initializer (std 0.02) leaves v too small for a visible correction
        for m in model.modules():
            if isinstance(m, nn.Linear):
                m.weight.normal_(0.0, m.in_features ** -0.5)
    return model, {"input_ids": torch.randint(4, 100, (2, 9), generator=torch.Generator().manual_seed(1))}


def _call(model, inputs):
    return model(**inputs).last_hidden_state if isinstance(inputs, dict) else model(inputs)


def _reference(model, sites, inputs):
    """The formula by hooks on an uncorrected copy of ``model``."""
    ref = copy.deepcopy(model)
    mods = dict(ref.named_modules())
    kept = {}
    for d, n in sites:
        d, n = _module_name(d), _module_name(n)
        p = mods[d].p
        mods[d].register_forward_pre_hook(lambda m, a, d=d: kept.__setitem__(d, a[0]))

        def fix(m, a, out, d=d, p=p):
            z, v = a[0].double(), kept[d].double()
            spread = z.var(-1, unbiased=False, keepdim=True) + m.eps
            c = torch.sqrt(spread / (spread + p / (1 - p) * v.square().mean(-1, keepdim=True)))
            beta = m.bias.double()
            return (beta + c * (out.double() - beta)).to(out.dtype)

        mods[n].register_forward_hook(fix)
    with torch.no_grad():
        return _call(ref, inputs)


CASES = {"post-LN encoder": lambda: _encoder(False), "pre-LN encoder": lambda: _encoder(True), "bert": _bert}


def _check(which, monkeypatch):
    model, inputs = CASES[which]()
    with torch.no_grad():
        plain = _call(model, inputs)
    fixed_model = dt.correct(model, inputs, inplace=False, scope="site").eval()
    sites = fixed_model._dropmc_correction.sites
    assert all(len(s) == 2 for s in sites) and len(sites) >= 4
    calls = []
    real = CFast._eval_forward
    monkeypatch.setattr(CFast, "_eval_forward", lambda *a: calls.append(1) or real(*a))
    with torch.no_grad():
        fixed = _call(fixed_model, inputs)
    reference = _reference(model, sites, inputs)
    tol = ROUNDINGS * torch.finfo(fixed.dtype).eps * reference.abs().max()
    return fixed_model, inputs, plain, fixed, reference, tol, calls


@pytest.mark.parametrize("which", list(CASES))
def test_the_fast_paths_compute_the_formula(which, monkeypatch):
    model, inputs, plain, fixed, reference, tol, calls = _check(which, monkeypatch)
    if which != "bert":
        assert len(calls) == len(model.layers)  # the dedicated forward ran in every layer
        assert type(model.layers[0]) is CFast._CorrectedEncoderLayer
    assert (fixed - reference).abs().max() <= tol
    assert (plain - reference).abs().max() > 100 * tol
    with torch.enable_grad():  # grad on: the module path (swapped classes, no dedicated forward)
        graded = _call(model, inputs).detach()
    assert (graded - reference).abs().max() <= tol
    dt.uncorrect(model)
    for m in model.modules():
        assert not type(m).__module__.startswith("dropmc") and not any(k.startswith("_dropmc") for k in vars(m))
    with torch.no_grad():
        assert torch.equal(_call(model, inputs), plain)


def _plant(monkeypatch, plant):
    if plant == "rstd to the wrong power":
        real = H._LayerNormSite.fused
        monkeypatch.setattr(H._LayerNormSite, "fused", lambda self, x, out, rstd: real(self, x, out, rstd.sqrt()))
    else:  # "dedicated forward's norms uncorrected"
        monkeypatch.setattr(CFast, "_norm", lambda norm, z: F.layer_norm(
            z, norm.normalized_shape, norm.weight, norm.bias, norm.eps))


@pytest.mark.parametrize("which,plant", [("post-LN encoder", "rstd to the wrong power"),
                                         ("bert", "rstd to the wrong power"),
                                         ("pre-LN encoder", "dedicated forward's norms uncorrected")])
def test_planted_faults_fail(which, plant, monkeypatch):
    _plant(monkeypatch, plant)
    _, _, _, fixed, reference, tol, _ = _check(which, monkeypatch)
    assert (fixed - reference).abs().max() > tol
