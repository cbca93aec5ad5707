"""dropmc.torch.correct (issue 41): one dropout call feeding several norms,
refusals up front with their own messages, and a corrected model that is
an ordinary model (torch.save/torch.load, copy.deepcopy, torch.jit.trace,
torch.compile; torch.jit.script refused by torch, documented).

One dropout feeding two norms (ESMFold's trunk writes ``z = h +
dropout(v)`` and normalizes ``z`` twice): each norm is its own site, and
each corrected output is the Rust closed form (``first_order_site``) on
the audit's capture of that site, within ``CLOSED_FORM_ROUNDINGS`` (the
roundings of test_correct.py's closed-form check: d-term sums, each entry
rounded a bounded number of times, so ``ROUNDINGS · d · ε · max|out|``).
"""

import copy
import io

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import dropmc._dropmc as _rs  # noqa: E402
import dropmc.audit as A  # noqa: E402
import dropmc.correct as C  # noqa: E402
import dropmc.torch as dt  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

torch.set_num_threads(1)

#: Roundings per entry between the torch correction and the Rust closed
#: form, both in float64 over d-term sums (as test_correct.py).
CLOSED_FORM_ROUNDINGS = 16
#: Roundings (in ulps of the output's largest entry) between an eager
#: float32 forward and a compiled or traced one (fused kernels, the
#: attention's among them, reassociate d-term sums).
COMPILE_ROUNDINGS = 64


class _TwoNorms(nn.Module):
    """``z = x + dropout(W x)`` normalized by two LayerNorms (different γ,
    β, ε) — the dropout a functional call at the model's top level
    (``functional``) or an ``nn.Dropout``."""

    def __init__(self, d=32, p=0.25, functional=True):
        super().__init__()
        self.w, self.p, self.functional = nn.Linear(d, d), p, functional
        self.drop = nn.Dropout(p)
        self.ln_a, self.ln_b = nn.LayerNorm(d), nn.LayerNorm(d, eps=0.1)
        g = torch.Generator().manual_seed(3)
        with torch.no_grad():
            for ln in (self.ln_a, self.ln_b):
                ln.weight.copy_(1 + 0.3 * torch.randn(d, generator=g))
                ln.bias.copy_(0.5 * torch.randn(d, generator=g))

    def forward(self, x):
        v = self.w(x)
        z = x + (F.dropout(v, self.p, self.training) if self.functional else self.drop(v))
        return self.ln_a(z) * self.ln_b(z)


def _x(d=32, tokens=6, dtype=torch.float64):
    return torch.randn(2, tokens, d, generator=torch.Generator().manual_seed(5), dtype=dtype)


def _captures(model, x, sites):
    from dropmc.audit.capture_eval import capture_traced
    from dropmc.model.discovery import discover

    found = discover(model, x)
    by_tuple = {s.as_tuple(): s for s in found.sites}
    return capture_traced(model, (x,), {}, found, [by_tuple[tuple(s)] for s in sites], [])[0]


@pytest.mark.parametrize("functional", [True, False])
def test_one_dropout_feeding_two_norms_is_two_sites_each_the_closed_form(functional):
    model, x = _TwoNorms(functional=functional).double().eval(), _x()
    drop = "dropout" if functional else "drop"
    sites = [(drop, "ln_a"), (drop, "ln_b")]
    dt.correct(model, x, scope="site")
    corr = model._dropmc_correction
    assert corr.sites == sites and not corr.refused
    outs = C.norm_outputs(model, x, ["ln_a", "ln_b"])
    captures = _captures(model, x, sites)
    dt.uncorrect(model)
    plain = C.norm_outputs(model, x, ["ln_a", "ln_b"])
    for site, cap in zip(sites, captures):
        rust = np.asarray(_rs.first_order_site(cap))
        got = outs[site[1]].numpy().ravel()
        tol = CLOSED_FORM_ROUNDINGS * cap["d"] * np.finfo(np.float64).eps * np.abs(rust).max()
        assert np.abs(got - rust).max() <= tol, site
        assert np.abs(plain[site[1]].numpy().ravel() - rust).max() > 1e3 * tol  # it moved
    model.train()
    torch.manual_seed(1)
    before = model(x)
    dt.correct(model, x, scope="site")
    model.train()
    torch.manual_seed(1)
    assert torch.equal(model(x), before)
    dt.uncorrect(model)


class _Chain(nn.Module):
    def __init__(self, d=8, p=0.2, dropout=True, norm=True):
        super().__init__()
        self.w = nn.Linear(d, d)
        self.drop = nn.Dropout(p) if dropout else nn.Identity()
        self.ln = nn.LayerNorm(d) if norm else nn.Identity()
        self.drop2, self.ln2 = nn.Dropout(0.1), nn.LayerNorm(d)

    def forward(self, x):
        return self.ln2(self.drop2(self.ln(self.drop(self.w(x)))))


def test_the_default_scope_is_the_network_s_when_it_can_run_else_the_site_s():
    """``scope=None``: the network scope with example inputs; the per-site
    scope, with the reason, where the network scope cannot take the call
    (dropmc.correct.scope.default_scope), and training stays bit for bit."""
    x = torch.randn(3, 8)
    cases = [((x,), {}, "network", "the default"),
             ((), {"sites": [("drop", "ln")]}, "site", "without example inputs"),
             ((x,), {"sites": [("drop", "ln")]}, "site", "sites named"),
             ((x,), {"order": 2}, "site", "order=2"),
             ((x,), {"scope": "site"}, "site", "named by the caller"),
             ((x,), {"scope": "network"}, "network", "named by the caller")]
    for args, kwargs, scope, why in cases:
        model = _Chain().train()
        torch.manual_seed(2)
        before = model(x)
        m = dt.correct(model, *args, **kwargs)
        done = m._dropmc_correction
        assert (done.scope, bool(done.network), bool(done.sites)) == (scope, scope == "network", scope == "site"), kwargs
        assert why in done.scope_reason, (kwargs, done.scope_reason)
        torch.manual_seed(2)
        assert torch.equal(m(x), before)
    with pytest.raises(ValueError, match="scope must be 'site', 'network' or None"):
        dt.correct(_Chain(), x, scope="everywhere")


def test_p_one_is_refused_up_front_and_the_eval_forward_runs():
    model, x = _Chain(p=1.0).eval(), torch.randn(3, 8)
    m = dt.correct(model, x, scope="site")
    assert m._dropmc_correction.sites == [("drop2", "ln2")]
    assert "p = 1: the dropout zeroes its input" in m._dropmc_correction.refused["drop->ln"]
    with torch.no_grad():
        assert torch.isfinite(m(x)).all()
    dt.uncorrect(m)
    with pytest.raises(ValueError, match="site 'drop->ln': p = 1"):
        dt.correct(model, x, sites=[("drop", "ln")])
    with pytest.raises(ValueError, match=r"site \('drop', 'ln'\): p = 1"):
        dt.correct(model, sites=[("drop", "ln")])  # module-named, no inputs


def test_each_refusal_has_its_own_message():
    x = torch.randn(3, 8)
    with pytest.raises(ValueError, match=r"made no dropout call.*norm calls: 1 \(layer\)"):
        dt.correct(nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8)), x, scope="site")
    with pytest.raises(ValueError, match="made no LayerNorm/RMSNorm call.*dropout calls: 1 \\(p=0.5\\)"):
        dt.correct(nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5)), x, scope="site")
    bad = x.clone()
    bad[1, 2] = float("nan")
    with pytest.raises(ValueError, match="inputs: .* 1 non-finite value"):
        dt.correct(_Chain(), bad, scope="site")
    with pytest.raises(ValueError, match=r"'drpo' is neither an nn.Dropout call.*Its sites: sites=\[\('drop', 'ln'\)"):
        dt.correct(_Chain(), x, sites=[("drpo", "ln")])
    with pytest.raises(ValueError, match=r"exclude: 'drpo' names no site.*'drop->ln'"):
        dt.correct(_Chain(), x, exclude=["drpo"], scope="site")
    with pytest.raises(ValueError, match="without example inputs finds only dropout→BatchNorm"):
        dt.correct(_Chain())
    with pytest.raises(ValueError, match=r"'drpo' is not a module of the model \(did you mean 'drop'"):
        dt.correct(_Chain(), sites=[("drpo", "ln")])
    with pytest.raises(ValueError, match=r"'lnn' is not a LayerNorm.*did you mean 'ln'"):
        dt.correct(_Chain(), sites=[("drop", "lnn")])


def _encoder(d=16, dtype=torch.float32):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d, 2, 2 * d, dropout=0.1, batch_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).to(dtype).eval()


@pytest.mark.parametrize("which", ["encoder", "functional"])
def test_save_load_deepcopy_and_trace_keep_the_correction(which):
    if which == "encoder":
        model, x = _encoder(), _x(d=16, dtype=torch.float32)
    else:
        model, x = _TwoNorms(d=16).eval(), _x(d=16, dtype=torch.float32)
    with torch.no_grad():
        plain = model(x)
    dt.correct(model, x, scope="site")
    with torch.no_grad():
        fixed = model(x)
    assert not torch.equal(fixed, plain)
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)  # a whole module: not a weights-only file
    twin = copy.deepcopy(model)
    with torch.no_grad():
        assert torch.equal(loaded(x), fixed) and torch.equal(twin(x), fixed)
        traced = torch.jit.trace(model, x, check_trace=False)
        # the traced graph may take the attention's fused kernel: rounding only
        scale = fixed.abs().max() * torch.finfo(fixed.dtype).eps
        assert (traced(x) - fixed).abs().max() <= COMPILE_ROUNDINGS * scale
        assert (traced(x) - plain).abs().max() > 100 * COMPILE_ROUNDINGS * scale
    dt.uncorrect(twin)  # the copy's hooks are its own: the original stays corrected
    dt.uncorrect(loaded)
    with torch.no_grad():
        assert torch.equal(twin(x), plain) and torch.equal(loaded(x), plain) and torch.equal(model(x), fixed)
    model.train()
    torch.manual_seed(2)
    a = model(x)
    loaded.train()
    dt.correct(loaded, x, scope="site")
    loaded.train()
    torch.manual_seed(2)
    assert torch.equal(loaded(x), a)  # training untouched after a round trip


def test_jit_script_is_refused_by_torch_as_documented():
    model, x = _encoder(), _x(d=16, dtype=torch.float32)
    dt.correct(model, x, scope="site")
    with pytest.raises(Exception):  # torch's hook-typing limit (docs/correct.md)
        torch.jit.script(model)


def test_torch_compile_keeps_the_correction():
    model, x = _encoder(d=8), _x(d=8, tokens=3, dtype=torch.float32)
    dt.correct(model, x, scope="site")
    with torch.no_grad():
        fixed = model(x)
        compiled = torch.compile(model)(x)
    scale = fixed.abs().max() * torch.finfo(torch.float32).eps
    assert (compiled - fixed).abs().max() <= COMPILE_ROUNDINGS * scale


def test_the_audit_of_a_corrected_model_reads_its_corrected_output():
    """Every site corrected, the corrected model's own audit: its eval
    column is the corrected output, which is the first-order estimate on
    that model's captures, so the eval gap equals the first-order gap up
    to the roundings of the closed-form check (far below the plain gap)."""
    model, x = _encoder(d=64, dtype=torch.float64), _x(d=64, tokens=16)
    before = A.audit_torch(model, x, seed=4)
    dt.correct(model, x, scope="site")
    after = A.audit_torch(model, x, seed=4)
    for i, (s0, s) in enumerate(zip(before.sites, after.sites)):
        ev, fo = s["uncorrected"]["rms"], s["first_order"]["rms"]
        # |rms(a − t) − rms(b − t)| ≤ max|a − b| (the triangle inequality):
        # a and b are the same float64 output by two routes (torch's corrected
        # forward, the engine's first-order form), each a few sums of d terms,
        # so they differ by at most d roundings of the largest output.
        scale = np.abs(after.truth(i)[0]).max()
        assert abs(ev - fo) <= s["d"] * np.finfo(np.float64).eps * scale, (s["name"], ev, fo)
        assert ev < s0["uncorrected"]["rms"]


class _TrainOnlyDropout(nn.Module):
    """Calls its dropout only in training: in eval the norm has no ``v``."""

    def __init__(self, d=8):
        super().__init__()
        self.drop, self.ln = nn.Dropout(0.2), nn.LayerNorm(d)

    def forward(self, x):
        return self.ln(x + (self.drop(x) if self.training else x))


def test_a_site_whose_v_cannot_be_captured_is_refused_at_correct_time():
    model, x = _TrainOnlyDropout().eval(), torch.randn(3, 8)
    with pytest.raises(ValueError, match="without its dropout.*correct cannot capture this site's v"):
        dt.correct(model, x, scope="site")
    assert getattr(model, "_dropmc_correction", None) is None and not model.ln._forward_hooks


def test_esmfold_trunk_block_sequence_sites():
    """ESMFold's trunk block (transformers' EsmFoldTriangularSelfAttentionBlock,
    random weights): ``drop(y)`` joins the sequence state that
    ``mlp_seq``'s LayerNorm reads, and ``mlp_seq``'s own dropout the state
    ``sequence_to_pair``'s LayerNorm reads (modeling_esmfold.py); both
    corrected, training and ``uncorrect`` bit-exact."""
    pytest.importorskip("transformers")
    from transformers.models.esm import modeling_esmfold as mf
    from transformers.models.esm.configuration_esm import TrunkConfig

    torch.manual_seed(0)
    tc = TrunkConfig(num_blocks=1, sequence_state_dim=32, pairwise_state_dim=32, sequence_head_width=16,
                     pairwise_head_width=16, dropout=0.1)

    class Trunk(nn.Module):
        def __init__(self):
            super().__init__()
            self.b = mf.EsmFoldTriangularSelfAttentionBlock(tc)

        def forward(self, seq, pair):
            return self.b(seq, pair)

    model = Trunk().double().eval()
    g = torch.Generator().manual_seed(1)
    args = (torch.randn(1, 6, 32, generator=g, dtype=torch.float64),
            torch.randn(1, 6, 6, 32, generator=g, dtype=torch.float64))
    with torch.no_grad():
        plain = model(*args)
    model.train()
    torch.manual_seed(3)
    train_plain = model(*args)
    dt.correct(model, args, scope="site")
    model.train()
    torch.manual_seed(3)
    assert all(torch.equal(a, b) for a, b in zip(model(*args), train_plain))
    model.eval()
    assert {("b.drop", "b.mlp_seq.mlp.0"), ("b.mlp_seq.mlp.4", "b.sequence_to_pair.layernorm")} \
        <= set(model._dropmc_correction.sites)
    with torch.no_grad():
        fixed = model(*args)
    assert not torch.equal(fixed[0], plain[0])
    dt.uncorrect(model)
    with torch.no_grad():
        assert all(torch.equal(a, b) for a, b in zip(model(*args), plain))
