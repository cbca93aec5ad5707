"""``correct(model, inputs, scope="network")`` and its noise ledger
(dropmc.model.network_ledger, dropmc.correct.network) against the model's own
train-mode Monte Carlo with every dropout on.

The model: a 3-layer pre-LN stack ``x + drop(f(LN(x)))`` (d = 16, p = 0.2
everywhere, an attention-like linear branch and a GELU feed-forward), its
input scaled by 3 so that the stream's spread is far from 1 (a norm's
``γ/σ`` rescaling then matters). ``DRAWS`` train-mode forwards, each
norm's input and output captured by hooks.

Statistical tests (the suite's per-assertion level, ``dropmc.critical_z()``):

* closer than plain: with ``p`` the plain eval output, ``n`` the corrected
  one, ``y_i`` the draws (mean ``m``), the statistic ``D_i = Σ (p − n)(p +
  n − 2 y_i)`` has mean ``|p − m|² − |n − m|²`` exactly (the ``y_i²`` terms
  cancel, so no noise bias); its mean must exceed ``critical_z`` standard
  errors (the draws are independent; the SE from the ``D_i`` themselves,
  valid at this size). :func:`_gain_z` takes a gain ``R`` too: ``|n − m| ≤
  |p − m| / R`` ⟺ ``|p − m|² − |n − m|² ≥ (1 − 1/R²) |p − m|²``, with ``g_i
  = 2 Σ (p − ȳ)(p − y_i) − Σ (p − ȳ)²`` (mean ``Σ (p − ȳ)²``, ``|p − m|²``
  up to ``Σ Var ȳ``, added back): the mean of ``D_i − (1 − 1/R²) g_i``.
* calibrated: the move the correction makes, ``δ = n − p``, against the
  move the truth needs, ``m − p``: ``f = ⟨δ, m − p⟩ / |δ|²`` (the multiple
  of ``δ`` closest to ``m``; 1 when the move is right), estimated by the
  mean of ``f_i = ⟨δ, y_i − p⟩ / |δ|²`` (linear in ``y_i``: unbiased). The
  move is ``(1 − c)(p − β)``, ``1 − c ≈ s̄ / 2V``: first order in ``s̄``,
  so ``f − 1`` carries the ledger's relative error, within the band
  :func:`_ledger_tolerance` derives; a failure is ``|f̂ − 1|`` beyond the
  band by more than ``critical_z`` SE.
* the ledger: its pooled ``Σ s̄`` at each norm against the MC's, ``Σ_t (1 −
  1/d) mean_k Var(x_tk)``. The ledger is first order and diagonal, so the
  ratio is 1 only to leading order: :func:`_ledger_tolerance` derives the
  band.

Planted faults (each must make a check fail, asserted below): the ledger
without the residual accumulation (every add keeps its larger operand's
variance); a LayerNorm's output noise not rescaled by ``(γ/σ)²``.

The mean shift (``order=2``, dropmc.model.network_shift), on an MLP-in-residual
stack (an input dropout, three blocks ``x + drop(W₂ φ(W₁ LN(x)))``): closer
to the Monte Carlo than the first-order correction at every activation
output, every later norm output and the later norms' inputs pooled.
Planted, each failing that check: the shift with the wrong sign; a
LayerNorm's noise not rescaled (the input is scaled by 3, so ``σ² ≈ 9``: the
activations' ``s`` then several times too large).
"""

import copy
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dropmc
from dropmc.model import network_rules
from dropmc.correct import correct, uncorrect
from dropmc.model.discovery import discover
from dropmc.model.network_ledger import network_ledger

D, LAYERS, P, DRAWS, SCALE = 16, 3, 0.2, 2000, 3.0


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.mix, self.up, self.down = nn.Linear(D, D), nn.Linear(D, 2 * D), nn.Linear(2 * D, D)
        self.drop1, self.drop2 = nn.Dropout(P), nn.Dropout(P)

    def forward(self, x):
        x = x + self.drop1(self.mix(self.ln1(x)))
        return x + self.drop2(self.down(F.gelu(self.up(self.ln2(x)))))


class _PreLN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(_Block() for _ in range(LAYERS))
        self.final = nn.LayerNorm(D)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.final(x)


def _norm_names(model):
    return [n for n, m in model.named_modules() if isinstance(m, nn.LayerNorm)]


def _capture(model, x, train: bool, draws: int = 1):
    """``{norm: (inputs, outputs)}`` stacked over ``draws`` forwards, float64."""
    return _outputs(model, x, _norm_names(model), train, draws)


def _outputs(model, x, names, train: bool, draws: int = 1):
    """``{module: (inputs, outputs)}`` stacked over ``draws`` forwards, float64."""
    seen, modules = {}, dict(model.named_modules())
    hooks = [modules[k].register_forward_hook(lambda m, a, o, k=k: seen.setdefault(k, []).append(
        (a[0].detach().double(), o.detach().double()))) for k in names]
    model.train(train)
    try:
        with torch.no_grad():
            for _ in range(draws):
                model(x)
    finally:
        for h in hooks:
            h.remove()
        model.eval()
    return {k: (torch.stack([a for a, _ in v]), torch.stack([o for _, o in v])) for k, v in seen.items()}


@pytest.fixture(scope="module")
def setup():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = _PreLN().eval()
    x = SCALE * torch.randn(2, 8, D)
    mc = _capture(model, x, True, DRAWS)
    plain = {k: o[0] for k, (_, o) in _capture(model, x, False).items()}
    return model, x, mc, plain


def _gain_z(plain, corrected, draws, gain: float = 1.0) -> float:
    """The z of ``|n − m| ≤ |p − m| / gain`` (module docs)."""
    p, n, y = plain.reshape(-1), corrected.reshape(-1), draws.reshape(draws.shape[0], -1)
    ybar = y.mean(0)
    d_i = ((p - n) * (p + n - 2 * y)).sum(1)
    g_i = 2 * ((p - ybar) * (p - y)).sum(1) - (p - ybar).square().sum()
    t_i = d_i - (1 - 1 / gain ** 2) * g_i
    bias = (1 - 1 / gain ** 2) * y.var(0).sum() / y.shape[0]  # |p − m|² = E Σ (p − ȳ)² − Σ Var ȳ
    return float((t_i.mean() + bias) / (t_i.std() / math.sqrt(y.shape[0])))


def _network_model(model, x):
    return correct(copy.deepcopy(model), x, scope="network")


def _calibration(plain, corrected, draws):
    """``(f̂, SE)`` (module docs)."""
    p, y = plain.reshape(-1), draws.reshape(draws.shape[0], -1)
    move = corrected.reshape(-1) - p
    f_i = ((y - p) * move).sum(1) / move.square().sum()
    return float(f_i.mean()), float(f_i.std() / math.sqrt(len(f_i)))


def _model_failures(model, x, mc, plain):
    """``{norm: what failed}`` of the network-corrected model: not closer
    than plain, or its move not calibrated (module docs)."""
    corrected = _network_model(model, x)
    out = {k: o[0] for k, (_, o) in _capture(corrected, x, False).items()}
    z, bad = dropmc.critical_z(), {}
    for k, kappa in corrected._dropmc_correction.network.items():
        closer = _gain_z(plain[k], out[k], mc[k][1])
        f, se = _calibration(plain[k], out[k], mc[k][1])
        if closer <= z:
            bad[k] = f"not closer than plain: z = {closer:.2f}"
        elif abs(f - 1) - _ledger_tolerance(kappa) > z * se:
            bad[k] = f"move calibrated to {f:.3f} ± {se:.3f}"
    return bad


def test_network_closer_than_plain_at_every_reached_norm(setup):
    model, x, mc, plain = setup
    corrected = _network_model(model, x)
    reached = set(corrected._dropmc_correction.network)
    noisy = {k for k, (i, _) in mc.items() if float(i.var(0).max()) > 0}
    assert reached == noisy, (reached, noisy)  # every norm the noise reaches, and only those
    assert corrected._dropmc_correction.network_uncovered == []
    assert _model_failures(model, x, mc, plain) == {}


def _ledger_tolerance(kappa: float) -> float:
    """The band of ``Σ s̄_ledger / Σ s̄_MC − 1`` (and of the calibration's
    ``f − 1``, whose own SE is counted there). What the ledger leaves out,
    relative to ``s̄``: terms second order in the noise (a dropout of a
    noisy stream's ``p s/q`` is kept, but the GELU's curvature and the
    noise products are not), each of relative size ``s/V``, summed ≤ ``κ``;
    the LayerNorm's move along ``x̂`` and the covariances a d-wide linear
    map gives the next one's noise, relative ``1/d`` each: ``2/d``. The
    MC's own spread is the check's: ``critical_z`` SE of the MC's ``Σ
    s̄`` (the mean over draws of ``u_i = (1 − 1/d)/d Σ (x_i − x̄)²``, its SE
    from the ``u_i``)."""
    return kappa + 2.0 / D


def _ledger_failures(model, x, mc, rules=None):
    ledger = network_ledger(model, (x,), {}, discover(model, x), rules)
    bad = {}
    for k, (inputs, _) in mc.items():
        n, d = inputs.shape[0], inputs.shape[-1]
        flat = inputs.reshape(n, -1)
        u = (1 - 1 / d) / d * (flat - flat.mean(0)).square().sum(1) * n / (n - 1)
        mc_noise, se = float(u.mean()), float(u.std() / math.sqrt(n))
        if mc_noise == 0:
            continue
        ratio = float(ledger.norms[k].noise.sum()) / mc_noise
        if abs(ratio - 1) > _ledger_tolerance(ledger.norms[k].kappa) + dropmc.critical_z() * se / mc_noise:
            bad[k] = ratio
    return bad


def test_ledger_noise_matches_mc_to_leading_order(setup):
    model, x, mc, _ = setup
    assert _ledger_failures(model, x, mc) == {}


def test_ledger_follows_multihead_attention():
    """A post-LN ``nn.TransformerEncoder`` (d = 16, its attention by
    ``multi_head_attention_forward``, dropout 0.2 in the attention, after it
    and in the feed-forward block): the ledger at every norm as above, and
    nothing listed as not covered."""
    torch.manual_seed(2)
    layer = nn.TransformerEncoderLayer(D, 2, 2 * D, dropout=P, batch_first=True)
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    x = torch.randn(2, 8, D)
    mc = _capture(model, x, True, DRAWS // 2)
    assert _ledger_failures(model, x, mc) == {}
    assert correct(model, x, scope="network")._dropmc_correction.network_uncovered == []


def _planted(monkeypatch, names, rule):
    for n in names:
        monkeypatch.setitem(network_rules.RULES, n, rule)


def _max_add(op, s_of):
    """Planted: an add keeps its larger operand's variance (no accumulation)."""
    terms = [s_of(t) for t in op.args[:2] if isinstance(t, torch.Tensor) and s_of(t) is not None]
    out = terms[0] if len(terms) == 1 else torch.maximum(*torch.broadcast_tensors(*terms))
    return torch.broadcast_to(out, op.out.shape)


def _unscaled_layer_norm(op, s_of):
    """Planted: a LayerNorm passes its input noise through, not rescaled by (γ/σ)²."""
    return network_rules.centred(s_of(op.args[0]))


@pytest.mark.parametrize("fault", ["no residual accumulation", "norm noise not rescaled"])
def test_planted_faults_fail_the_ledger_and_the_model_check(setup, monkeypatch, fault):
    model, x, mc, plain = setup
    if fault == "no residual accumulation":
        _planted(monkeypatch, ["add", "__add__", "__radd__", "add_", "__iadd__"], _max_add)
    else:
        _planted(monkeypatch, ["layer_norm"], _unscaled_layer_norm)
    assert _ledger_failures(model, x, mc) != {}
    assert _model_failures(model, x, mc, plain) != {}


def test_training_and_uncorrect_bit_exact(setup):
    model, x, _, _ = setup
    twin = copy.deepcopy(model)
    corrected = _network_model(model, x)
    for m in (twin, corrected):
        m.train()
    torch.manual_seed(5)
    want = twin(x)
    torch.manual_seed(5)
    got = corrected(x)
    assert torch.equal(want, got)
    twin.eval()
    plain = twin(x)
    corrected.eval()
    assert not torch.equal(corrected(x), plain)  # eval output moved
    uncorrect(corrected)
    assert torch.equal(corrected(x), plain)
    assert {k: v for k, v in corrected.state_dict().items()}.keys() == twin.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(corrected.state_dict().values(), twin.state_dict().values()))


def test_network_scope_refusals(setup):
    model, x, _, _ = setup
    with pytest.raises(ValueError, match="scope must be"):
        correct(copy.deepcopy(model), x, scope="everything")
    with pytest.raises(ValueError, match="needs example inputs"):
        correct(copy.deepcopy(model), scope="network")
    with pytest.raises(ValueError, match="names no norm"):
        correct(copy.deepcopy(model), x, scope="network", exclude=["blocks.9.ln1"])
    kept = correct(copy.deepcopy(model), x, scope="network", exclude=["final"])
    assert "final" not in kept._dropmc_correction.network


def test_uncovered_op_is_listed():
    """An op with a noisy input and no rule is named, not passed over."""

    class Odd(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.drop, self.norm = nn.Dropout(P), nn.LayerNorm(D)

        def forward(self, x):
            h = self.drop(x)
            return self.norm(x + torch.cumsum(h, -1) + h)

    torch.manual_seed(1)
    model, x = Odd(), torch.randn(1, 4, D)
    corrected = correct(model, x, scope="network")
    assert ("cumsum", "<model>") in corrected._dropmc_correction.network_uncovered


# -- the second-order mean shift (dropmc.model.network_shift, correct(..., scope="network", order=2))


class _MlpBlock(nn.Module):
    """``x + drop(down(φ(up(LN(x)))))``, ``φ`` a module (the shift's hook sees it)."""

    def __init__(self, act) -> None:
        super().__init__()
        self.ln, self.up, self.down = nn.LayerNorm(D), nn.Linear(D, 4 * D), nn.Linear(4 * D, D)
        self.act, self.drop = act, nn.Dropout(P)

    def forward(self, x):
        return x + self.drop(self.down(self.act(self.up(self.ln(x)))))


class _MlpStack(nn.Module):
    """An input dropout, then ``LAYERS`` MLP blocks in the residual stream and a final LayerNorm."""

    def __init__(self, acts) -> None:
        super().__init__()
        self.drop = nn.Dropout(P)
        self.blocks = nn.ModuleList(_MlpBlock(a) for a in acts)
        self.final = nn.LayerNorm(D)

    def forward(self, x):
        x = self.drop(x)
        for b in self.blocks:
            x = b(x)
        return self.final(x)


@pytest.fixture(scope="module")
def mlp_setup():
    torch.set_num_threads(1)
    torch.manual_seed(3)
    model = _MlpStack([nn.ReLU(), nn.GELU(), nn.ReLU()]).eval()
    x = SCALE * torch.randn(2, 8, D)
    names = [n for n, m in model.named_modules() if isinstance(m, (nn.LayerNorm, nn.ReLU, nn.GELU))]
    return model, x, names, _outputs(model, x, names, True, DRAWS)


def _shift_failures(model, x, names, mc):
    """``{what: z}`` where the order-2 network correction (the mean shift)
    is not closer to the Monte Carlo than the first-order one: at each
    activation output, at each norm's output downstream of a shifted
    activation, and at those norms' inputs pooled (one vector: the stream's
    shift is small next to its spread, and one norm's input alone does
    not resolve it at this budget). The statistic of :func:`_gain_z`,
    gain 1: its mean is ``|p − m|² − |n − m|²`` exactly; a failure is z
    below ``critical_z``."""
    first = correct(copy.deepcopy(model), x, scope="network")
    second = correct(copy.deepcopy(model), x, scope="network", order=2)
    shifted = second._dropmc_correction.network_shifted
    assert shifted, "no activation shifted"
    a, b = _outputs(first, x, names, False), _outputs(second, x, names, False)
    later = names[names.index(shifted[0]):]
    bad = {}
    for k in later:
        z = _gain_z(a[k][1][0], b[k][1][0], mc[k][1])
        if z <= dropmc.critical_z():
            bad[f"{k} output"] = round(z, 2)
    norms = [k for k in later if k not in shifted]
    flat = [torch.cat([t[k][0][0].reshape(-1) for k in norms]) for t in (a, b)]
    mc_in = torch.cat([mc[k][0].reshape(DRAWS, -1) for k in norms], 1)
    z = _gain_z(flat[0], flat[1], mc_in)
    if z <= dropmc.critical_z():
        bad["norm inputs"] = round(z, 2)
    return bad


def test_mean_shift_closer_to_the_monte_carlo(mlp_setup):
    model, x, names, mc = mlp_setup
    assert _shift_failures(model, x, names, mc) == {}


def test_mean_shift_gaussian_forms():
    """The closed forms against a quadrature of the normal density
    (2001 points over ±10 SD, error far below the 1e-6 asked) at a few
    ``(x, s)``: ReLU's rectified-normal mean and GELU's Stein form; and
    the Gauss–Hermite rule exact on a degree-5 polynomial."""
    from dropmc.model.network_shift import gaussian_mean

    x = torch.tensor([-2.0, -0.3, 0.0, 0.4, 1.5], dtype=torch.float64)
    s = torch.tensor([0.5, 0.04, 1.0, 2.0, 0.0], dtype=torch.float64)
    z = torch.linspace(-10, 10, 2001, dtype=torch.float64)
    w = torch.exp(-z * z / 2)
    w = w / w.sum()
    grid = x[:, None] + s.sqrt()[:, None] * z
    for kind, fn in (("relu", torch.relu), ("gelu", F.gelu)):
        want = (fn(grid) * w).sum(-1)
        assert torch.allclose(gaussian_mean(kind, fn, x, s), want, atol=1e-6), kind
    poly = lambda t: t ** 5 - 2 * t ** 4 + t ** 2  # noqa: E731
    want = (poly(grid) * w).sum(-1)
    assert torch.allclose(gaussian_mean("other", poly, x, s), want, atol=1e-6)


def _wrong_sign(kind, fn, x, s, out):
    """Planted: the mean shift subtracted."""
    from dropmc.model.network_shift import gaussian_mean

    return out - gaussian_mean(kind, fn, x, s)


@pytest.mark.parametrize("fault", ["mean shift sign", "norm noise not rescaled"])
def test_planted_faults_fail_the_mean_shift_check(mlp_setup, monkeypatch, fault):
    from dropmc.model import network_shift

    model, x, names, mc = mlp_setup
    if fault == "mean shift sign":
        monkeypatch.setattr(network_shift, "mean_shift", _wrong_sign)
    else:
        _planted(monkeypatch, ["layer_norm"], _unscaled_layer_norm)
    assert _shift_failures(model, x, names, mc) != {}


def test_mean_shift_training_and_uncorrect_bit_exact(mlp_setup):
    model, x, _, _ = mlp_setup
    twin = copy.deepcopy(model)
    corrected = correct(copy.deepcopy(model), x, scope="network", order=2)
    assert corrected._dropmc_correction.network_shifted == ["blocks.0.act", "blocks.1.act", "blocks.2.act"]
    corrected.train()
    twin.train()
    torch.manual_seed(5)
    want = twin(x)
    torch.manual_seed(5)
    assert torch.equal(want, corrected(x))
    twin.eval()
    corrected.eval()
    assert not torch.equal(corrected(x), twin(x))  # eval output moved
    uncorrect(corrected)
    assert torch.equal(corrected(x), twin(x))


def test_mean_shift_inplace_activation_is_listed():
    """An in-place activation's forward hook sees its input overwritten: not
    shifted, and named in ``network_uncovered``."""
    torch.manual_seed(4)
    model = _MlpStack([nn.ReLU(inplace=True), nn.GELU()]).eval()
    done = correct(model, torch.randn(1, 4, D), scope="network", order=2)._dropmc_correction
    assert done.network_shifted == ["blocks.1.act"]
    assert ("mean shift of an in-place activation", "blocks.0.act") in done.network_uncovered
