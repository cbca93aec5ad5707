"""One norm recogniser (issue 50 item 1): a norm is what it computes, to every reader.

T5's ``T5LayerNorm`` (an RMSNorm under a LayerNorm's name, built from transformers'
``T5Config``) and a hand-written RMSNorm whose class name says nothing (``Gauge``) are
RMSNorms to discovery, the linear paths, ``correct`` (with example inputs and without), the
network ledger and ``dropmc.torch.norm_parameters``: each asks
``dropmc.model.norms.norm_spec``. Before, ``correct`` read norms by a class list (both were
"not a LayerNorm, RMSNorm or BatchNorm" without inputs) and the linear-path tracer by a name
rule (``…RMSNorm`` or a ``variance_epsilon``: ``Gauge``'s path was not found), while discovery
read both as RMSNorms. A module with a weight that is no norm (``Scale``) is none to all.
"""

import copy

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import dropmc.correct as C  # noqa: E402
import dropmc.torch as dt  # noqa: E402
from dropmc.correct.forms import _NormParams  # noqa: E402
from dropmc.model.discovery import discover  # noqa: E402
from dropmc.model.linear_path import find_linear_paths  # noqa: E402
from dropmc.model.network_ledger import network_ledger  # noqa: E402
from dropmc.model.norms import norm_kind  # noqa: E402

D = 16


class Gauge(nn.Module):
    """An RMSNorm written out, under a name no rule knows (ε as ``eps``)."""

    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(d))
        self.eps = eps

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class Scale(Gauge):
    """A weight and an ε, but no norm: ``x · weight``."""

    def forward(self, x):
        return x * self.weight


def t5_norm(d):
    pytest.importorskip("transformers")
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5LayerNorm

    config = T5Config(d_model=d, d_kv=4, d_ff=2 * d, num_layers=1, num_heads=2, vocab_size=32)
    norm = T5LayerNorm(config.d_model, eps=config.layer_norm_epsilon)
    with torch.no_grad():
        norm.weight.add_(0.1 * torch.randn(d))
    return norm


class Toy(nn.Module):
    """A bypass site ``norm1(x + drop(x))`` and a linear path ``norm2(h + lin(drop2(h)))``."""

    def __init__(self, make):
        super().__init__()
        self.drop, self.norm1 = nn.Dropout(0.1), make(D)
        self.lin, self.drop2, self.norm2 = nn.Linear(D, D), nn.Dropout(0.2), make(D)

    def forward(self, x):
        h = self.norm1(x + self.drop(x))
        return self.norm2(h + self.lin(self.drop2(h)))


@pytest.fixture(params=["T5LayerNorm", "Gauge"])
def toy(request):
    torch.manual_seed(0)
    make = t5_norm if request.param == "T5LayerNorm" else Gauge
    return Toy(make).eval(), torch.randn(3, 4, D) + 0.5


def test_every_reader_reads_an_rmsnorm(toy):
    model, x = toy
    assert norm_kind(model.norm1) == "rms"  # without an input: a probe
    found = discover(model, x)
    assert {c: s.kind for c, s in found.norms.items()} == {"norm1": "rms", "norm2": "rms"}
    paths = [s for s in find_linear_paths(model, x) if s["norm_call"] == "norm2"]
    assert [(s["dropout"], s["norm"]) for s in paths] == [("drop2", "rms")]
    ledger = network_ledger(model, (x,), {}, found)
    assert ledger.norms["norm1"].kind == "rms"
    assert dt.norm_parameters(model.norm1)[0] == "rmsnorm"
    params = _NormParams.of_module(model.norm1)
    assert params.kind == "rms" and params.eps(x) == pytest.approx(float(found.norms["norm1"].eps))


def test_correct_with_and_without_inputs_agree(toy):
    model, x = toy
    named = C.correct(copy.deepcopy(model), sites=[("drop", "norm1")], scope="site")  # no forward
    seen = C.correct(copy.deepcopy(model), x, sites=[("drop", "norm1")], scope="site")  # discovery's
    assert named._dropmc_correction.sites == seen._dropmc_correction.sites == [("drop", "norm1")]
    plain = C.norm_outputs(model, x, ["norm1"])["norm1"]
    a, b = C.norm_outputs(named, x, ["norm1"])["norm1"], C.norm_outputs(seen, x, ["norm1"])["norm1"]
    assert not torch.equal(a, plain)  # corrected: the factor c < 1 moved every token
    torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_weighted_module_that_is_no_norm_is_none_to_all():
    torch.manual_seed(0)
    model, x = Toy(Scale).eval(), torch.randn(3, 4, D) + 0.5
    assert norm_kind(model.norm1) is None
    assert discover(model, x).norms == {}
    with pytest.raises(ValueError, match="no LayerNorm/RMSNorm call"):
        C.correct(model, x, scope="site")
    with pytest.raises(ValueError, match="is not a LayerNorm, RMSNorm or BatchNorm"):
        C.correct(model, sites=[("drop", "norm1")], scope="site")
    assert find_linear_paths(model, x) == []
    with pytest.raises(TypeError, match="is not a norm dropmc recognises"):
        dt.norm_parameters(model.norm1)


def test_a_float64_t5_norm_is_an_rmsnorm_though_it_squares_in_float32():
    """T5LayerNorm computes its mean square in float32 even in a float64 model: the
    recogniser's rounding bound is never finer than float32's (norms.STATISTICS_ROUNDOFF);
    with the float64 bound alone discovery refused it while the linear paths read it."""
    torch.manual_seed(0)
    model, x = Toy(t5_norm).double().eval(), torch.randn(3, 4, D, dtype=torch.float64) + 0.5
    assert norm_kind(model.norm1) == "rms"
    assert {c: s.kind for c, s in discover(model, x).norms.items()} == {"norm1": "rms", "norm2": "rms"}


def test_discovery_leaves_a_batchnorm_in_training_untouched():
    """A BatchNorm is told by its class and never run to be recognised: run in training
    mode, its forward updated the running statistics of the user's model."""
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.1), nn.BatchNorm1d(4), nn.LayerNorm(4)).train()
    before = {k: v.clone() for k, v in model[2].state_dict().items()}
    found = discover(model, torch.randn(8, 4) + 3)
    assert norm_kind(model[2]) == "batch" and "2" not in found.norms
    assert all(torch.equal(before[k], v) for k, v in model[2].state_dict().items())
