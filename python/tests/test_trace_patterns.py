"""Issue 50: the coverage patterns of "Why", read from the trace's data flow.

Each toy below is one pattern a new codebase writes; the expected sites are
read off its forward by hand (the comment at each toy says how):

* gated and scaled mask products (``dropout(v) * sigmoid(gate)``, layer
  scale ``γ ⊙ dropout(v)``, ``dropout(v) / c``) are the site with
  ``v' = v ⊙ g``, audited — truth against the model's own Monte Carlo;
* a dropout the eval forward does not call (``if not self.training:
  return x``) is audited from the train-mode trace — truth against Monte
  Carlo; an eval-only branch on one site lists that site ("eval and train
  paths differ") and the rest is audited;
* every random draw is a dropout call: the textbook ``h * (rand_like(h) >
  p) / (1 - p)``, ``torch.where(rand_like(h) > p, h / (1 - p), 0)``,
  ``empty_like(h).bernoulli_(q)``, a custom autograd Function drawing with
  ``bernoulli_`` (SEW-D's XDropout), ``nn.Dropout1d/2d`` (the channel
  mask read against the norm's rows) — truth against Monte Carlo — and
  ``nn.AlphaDropout`` (listed: not inverted dropout);
* a mask made for the shape of a tensor carries none of its draws;
* a parallel residual ``x + a + b`` is two bypass sites, not entangled;
* a constant token is left out and counted.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import dropmc.audit as A  # noqa: E402
from dropmc.model.discovery import discover  # noqa: E402
from mc_checks import bonferroni_z, projected_z, train_mode_outputs  # noqa: E402

torch.set_num_threads(1)
D, P = 12, 0.3
RUNS = 2000  # model copies in each Monte Carlo batch


def _seeded_norm(norm):
    with torch.no_grad():
        norm.weight.normal_(1.0, 0.3)
        norm.bias.normal_(0.0, 0.3)
    return norm


def _x(batch=2, length=5, seed=4):
    return torch.randn(batch, length, D, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _agrees_with_monte_carlo(model, x, site, norm, samples=16384):
    audit = A.audit_torch(model, x, sites=[site], samples=samples, seed=3)
    assert [s["name"] for s in audit.sites] == ["->".join(site)], audit.other_sites
    truth, se = audit.truth(0)
    zz = projected_z(truth, se, train_mode_outputs(model, norm, x, RUNS))
    assert np.abs(zz).max() < bonferroni_z(zz.size), np.abs(zz).max()
    return audit


# -- 1. gated and scaled mask products ------------------------------------------------------------


class _Gated(nn.Module):
    """``norm(x + dropout(lin(x)) ⊙ sigmoid(gate(x)))``: the gate carries no
    draw of the dropout; ``how`` picks the product's form."""

    def __init__(self, how="gate"):
        super().__init__()
        torch.manual_seed(11)
        self.how = how
        self.lin, self.gate = nn.Linear(D, D), nn.Linear(D, D)
        self.gamma = nn.Parameter(torch.rand(D) + 0.5)
        self.drop = nn.Dropout(P)
        self.norm = _seeded_norm(nn.LayerNorm(D))

    def forward(self, x):
        v = self.drop(self.lin(x))
        if self.how == "gate":
            u = v * torch.sigmoid(self.gate(x))
        elif self.how == "layer scale":
            u = self.gamma * v
        else:  # a quotient by a number and by a mask-free tensor
            u = v / 2.0 / (1.0 + torch.sigmoid(self.gate(x)))
        return self.norm(x + u)


@pytest.mark.parametrize("how", ["gate", "layer scale", "quotient"])
def test_a_gated_or_scaled_dropout_is_the_site_with_v_times_g(how):
    model = _Gated(how).double()
    found = discover(model, _x())
    assert [(s.dropout, s.norm, s.form) for s in found.sites] == [("drop", "norm", "bypass")]


def test_a_gated_site_truth_matches_the_models_monte_carlo():
    _agrees_with_monte_carlo(_Gated("gate").double(), _x(), ("drop", "norm"), "norm")


def test_a_gate_that_carries_the_mask_is_not_absorbed():
    class _SelfGated(_Gated):
        def forward(self, x):
            v = self.drop(self.lin(x))
            return self.norm(x + v * torch.sigmoid(v))  # g depends on the mask: not v' = v ⊙ g

    found = discover(_SelfGated().double(), _x())
    assert found.sites == []


def test_a_gated_path_that_stops_later_names_the_op_that_stops_it():
    class _GatedThenCumsum(_Gated):
        def forward(self, x):
            return self.norm((self.drop(self.lin(x)) * torch.sigmoid(self.gate(x))).cumsum(-1))

    audit = A.audit_torch(_GatedThenCumsum().double(), _x(), samples=1024)
    assert audit.sites == [] and audit.coverage["reasons"] == {"through cumsum": 1}


def test_a_long_path_past_a_linear_layer_names_the_nonlinearity_that_stops_it():
    class _LongPath(_Gated):
        def forward(self, x):
            y = self.lin(self.drop(x))
            for _ in range(10):  # layout steps: more labels than the old cap of 8
                y = y.transpose(0, 1).contiguous()
            return self.norm(F.gelu(y))

    audit = A.audit_torch(_LongPath().double(), _x(), samples=1024, linear=False)
    assert audit.coverage["reasons"] == {"through gelu": 1}, audit.other_sites


# -- 2. train-only dropouts, eval-only branches ---------------------------------------------------


class _TrainOnlyDropout(nn.Module):
    """AlphaFold-style: no call at all in eval mode."""

    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x):
        if not self.training:
            return x
        return F.dropout(x, self.p, True)


class _TwoSites(nn.Module):
    """``y = norm_a(x + drop_a(lin_a(x)))``, ``norm_b(y + drop_b(lin_b(y)))``
    with ``drop_a`` train-only; with ``eval_branch``, site b's eval forward
    goes through a chunk + cat the train forward does not take."""

    def __init__(self, eval_branch=False):
        super().__init__()
        torch.manual_seed(12)
        self.eval_branch = eval_branch
        self.lin_a, self.lin_b = nn.Linear(D, D), nn.Linear(D, D)
        self.drop_a, self.drop_b = _TrainOnlyDropout(P), nn.Dropout(P)
        self.norm_a, self.norm_b = _seeded_norm(nn.LayerNorm(D)), _seeded_norm(nn.LayerNorm(D))

    def forward(self, x):
        y = self.norm_a(x + self.drop_a(self.lin_a(x)))
        u = self.drop_b(self.lin_b(y))
        if self.eval_branch and not self.training:
            u = torch.cat(u.chunk(2, dim=-1), dim=-1)
        return self.norm_b(y + u)


def test_a_train_only_dropout_is_audited_and_matches_the_models_monte_carlo():
    model = _TwoSites().double()
    audit = _agrees_with_monte_carlo(model, _x(), ("drop_a:dropout", "norm_a"), "norm_a")
    full = A.audit_torch(model, _x(), samples=1024)
    assert sorted(s["name"] for s in full.sites) == ["drop_a:dropout->norm_a", "drop_b->norm_b"]
    assert audit.coverage["calls"] == 2


def test_an_eval_only_branch_lists_its_site_and_audits_the_rest():
    audit = A.audit_torch(_TwoSites(eval_branch=True).double(), _x(), samples=1024)
    assert [s["name"] for s in audit.sites] == ["drop_a:dropout->norm_a"]
    (row,) = [o for o in audit.other_sites if o["name"].startswith("drop_b")]
    assert row["kind"] == "eval and train paths differ", row
    assert audit.coverage["audited"] == 1 and audit.coverage["listed"] == 1


# -- 3. every random draw is a dropout call -------------------------------------------------------


class _HandWritten(nn.Module):
    """``norm(x + drop(lin(x)))`` with the dropout written by hand (``how``)."""

    def __init__(self, how):
        super().__init__()
        torch.manual_seed(13)
        self.how = how
        self.lin = nn.Linear(D, D)
        self.norm = _seeded_norm(nn.LayerNorm(D))

    def forward(self, x):
        h = self.lin(x)
        if self.training:
            if self.how == "textbook":
                h = h * (torch.rand_like(h) > P) / (1 - P)
            elif self.how == "where":
                h = torch.where(torch.rand_like(h) > P, h / (1 - P), 0)
            elif self.how == "bernoulli_":
                h = h * torch.empty_like(h).bernoulli_(1 - P) / (1 - P)
            else:
                h = _XDropout.apply(h, P)
        return self.norm(x + h)


class _XDropout(torch.autograd.Function):
    """SEW-D's XDropout: a drop mask ``1 − bernoulli(q)`` as bool,
    ``masked_fill`` and the ``1/q`` scale."""

    @staticmethod
    def forward(ctx, x, p):
        mask = (1 - torch.empty_like(x).bernoulli_(1 - p)).to(torch.bool)
        ctx.scale = 1.0 / (1 - p)
        ctx.save_for_backward(mask)
        return x.masked_fill(mask, 0) * ctx.scale

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved_tensors
        return grad.masked_fill(mask, 0) * ctx.scale, None


@pytest.mark.parametrize("how", ["textbook", "where", "bernoulli_", "xdropout"])
def test_a_hand_written_dropout_is_a_dropout_call_with_its_site(how):
    found = discover(_HandWritten(how).double(), _x())
    assert [(s.dropout, s.norm, s.form) for s in found.sites] == [("rand_mask", "norm", "bypass")]
    (site,) = found.sites
    assert site.p == pytest.approx(P) and site.mask.kind == "elementwise" and site.mask.scaled_by_inverse_q()
    assert found.draws == []  # the draw made a dropout call: no LayerDrop / drop-path reported


@pytest.mark.parametrize("how", ["textbook", "xdropout"])
def test_a_hand_written_dropout_truth_matches_the_models_monte_carlo(how):
    _agrees_with_monte_carlo(_HandWritten(how).double(), _x(), ("rand_mask", "norm"), "norm")


class _XAttention(nn.Module):
    """SEW-D's eager attention: DeBERTa's XSoftmax (``masked_fill`` of the
    masked keys, softmax, ``masked_fill_`` of them with 0), the rows
    dropped by XDropout in training only, ``bmm`` with the values, then
    ``norm(x + o_proj(context))``."""

    def __init__(self, heads=3):
        super().__init__()
        torch.manual_seed(21)
        self.heads = heads
        self.qkv, self.o_proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.norm = _seeded_norm(nn.LayerNorm(D))

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = (t.reshape(b, n, self.heads, -1).transpose(1, 2).reshape(b * self.heads, n, -1)
                   for t in self.qkv(x).chunk(3, dim=-1))
        keys = torch.ones(b * self.heads, n, n, dtype=torch.bool)
        keys[:, :, -1] = False  # the last key masked
        rows = torch.softmax((q @ k.transpose(1, 2)).masked_fill(~keys, -1e9), -1)
        rows.masked_fill_(~keys, 0)
        if self.training:
            rows = _XDropout.apply(rows, P)
        context = torch.bmm(rows, v).reshape(b, self.heads, n, -1).transpose(1, 2).reshape(b, n, D)
        return self.norm(x + self.o_proj(context))


def test_a_custom_attention_dropout_is_an_attention_site_audited():
    model = _XAttention().double()
    found = discover(model, _x())
    assert [(a.call, a.kind, a.p) for a in found.attention] == [("rand_mask", "eager", pytest.approx(P))]
    audit = A.audit_torch(model, _x(), samples=1024, attention_samples=256)
    assert [a["name"] for a in audit.attention_sites] == ["rand_mask"]
    assert audit.coverage["calls"] == 1 and audit.coverage["audited"] == 1


class _ChannelFirst(nn.Module):
    """A conv-net stage: ``x (N, C, H, W)`` → ``nn.Dropout2d`` → channels
    last → ``LayerNorm(C)`` (and the 1d analogue): per row of the norm each
    channel its own draw, shared along the spatial axes."""

    def __init__(self, dims=2, alpha=False):
        super().__init__()
        torch.manual_seed(14)
        self.dims = dims
        self.drop = nn.AlphaDropout(P) if alpha else (nn.Dropout2d(P) if dims == 2 else nn.Dropout1d(P))
        self.norm = _seeded_norm(nn.LayerNorm(D))

    def forward(self, x):
        y = self.drop(x)
        return self.norm(y.permute(0, 2, 3, 1) if self.dims == 2 else y.transpose(1, 2))


def _conv_x(dims=2):
    g = torch.Generator().manual_seed(15)
    shape = (2, D, 3, 4) if dims == 2 else (2, D, 5)
    return torch.randn(*shape, generator=g, dtype=torch.float64) + 0.5


@pytest.mark.parametrize("dims", [1, 2])
def test_a_channel_dropout_is_an_elementwise_site_shared_over_space(dims):
    found = discover(_ChannelFirst(dims).double(), _conv_x(dims))
    (site,) = found.sites
    assert (site.dropout, site.norm, site.form) == ("drop", "norm", "plain")
    assert site.mask.kind == "elementwise" and site.mask.shared == ((1, 2) if dims == 2 else (1,))


def test_a_channel_dropout_truth_matches_the_models_monte_carlo():
    _agrees_with_monte_carlo(_ChannelFirst(2).double(), _conv_x(2), ("drop", "norm"), "norm")


def test_alpha_dropout_is_counted_and_listed_as_not_inverted():
    audit = A.audit_torch(_ChannelFirst(alpha=True).double(), _conv_x(), samples=1024)
    assert audit.sites == [] and audit.coverage == {"calls": 1, "audited": 0, "listed": 1,
                                                    "reasons": {"not inverted dropout": 1}}
    assert "alpha dropout" in audit.other_sites[0]["reason"]


# -- 4. a mask drawn for the shape of another tensor ----------------------------------------------


class _ShapeFrom(nn.Module):
    """``y = drop_a(x)`` feeds ``norm_a`` and, as the bypass, ``norm_b(y +
    lin(x) ⊙ drop_b(y.new_ones(y[..., 0:1].shape)))``: the mask of
    ``drop_b`` is made for ``y``'s shape, so ``drop_b``'s term carries no
    draw of ``drop_a`` — ``drop_a → norm_b`` is a bypass, not entangled."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(16)
        self.lin = nn.Linear(D, D)
        self.drop_a, self.drop_b = nn.Dropout(P), nn.Dropout(P)
        self.norm_a, self.norm_b = _seeded_norm(nn.LayerNorm(D)), _seeded_norm(nn.LayerNorm(D))

    def forward(self, x):
        y = self.drop_a(x)
        ones = y.new_ones(y[..., 0:1].shape)
        return self.norm_a(y) + self.norm_b(y + self.lin(x) * self.drop_b(ones))


def test_where_a_masks_shape_was_read_from_carries_no_draw():
    found = discover(_ShapeFrom().double(), _x())
    got = {(s.dropout, s.norm): s.form for s in found.sites}
    assert got == {("drop_a", "norm_a"): "plain", ("drop_a", "norm_b"): "bypass", ("drop_b", "norm_b"): "bypass"}


# -- 5. parallel residuals ------------------------------------------------------------------------


class _Parallel(nn.Module):
    """GPT-NeoX: ``norm(x + drop_a(a(ln_a(x))) + drop_b(b(ln_b(x))))``: each
    dropout's other summands carry no draw of it: two bypass sites."""

    def __init__(self, bracket="left"):
        super().__init__()
        torch.manual_seed(17)
        self.bracket = bracket
        self.a, self.b = nn.Linear(D, D), nn.Linear(D, D)
        self.ln_a, self.ln_b = nn.LayerNorm(D), nn.LayerNorm(D)
        self.drop_a, self.drop_b = nn.Dropout(P), nn.Dropout(P)
        self.norm = _seeded_norm(nn.LayerNorm(D))

    def forward(self, x):
        u, w = self.drop_a(self.a(self.ln_a(x))), self.drop_b(self.b(self.ln_b(x)))
        return self.norm(x + u + w if self.bracket == "left" else w + (x + u))


@pytest.mark.parametrize("bracket", ["left", "right"])
def test_a_parallel_residual_is_two_bypass_sites_whatever_the_bracketing(bracket):
    found = discover(_Parallel(bracket).double(), _x())
    got = {(s.dropout, s.norm): s.form for s in found.sites}
    assert got == {("drop_a", "norm"): "bypass", ("drop_b", "norm"): "bypass"}


def test_a_parallel_residual_truth_matches_the_models_monte_carlo():
    model = _Parallel().double()
    model.drop_b.p = 0.0  # the norm's input then depends on drop_a's mask only
    _agrees_with_monte_carlo(model, _x(), ("drop_a", "norm"), "norm")


# -- 7. constant tokens ---------------------------------------------------------------------------


class _ConstantToken(nn.Module):
    """BEiT-like: token 0 of every sequence is constant (zero) before a
    plain ``norm(drop(v))``: no closed form reads σ = 0; left out, counted."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(18)
        self.lin, self.drop = nn.Linear(D, D), nn.Dropout(P)
        self.norm = _seeded_norm(nn.LayerNorm(D))

    def forward(self, x):
        v = self.lin(x)
        v = torch.cat([torch.zeros_like(v[:, :1]), v[:, 1:]], dim=1)
        return self.norm(self.drop(v))


def test_a_constant_token_is_left_out_and_counted():
    audit = A.audit_torch(_ConstantToken().double(), _x(), samples=1024)
    assert [s["name"] for s in audit.sites] == ["drop->norm"]
    assert audit.tokens == {"audited": 8, "total": 10, "constant": 2}


# -- 6. channels-first LayerNorm ------------------------------------------------------------------


class _ChannelsFirstNorm(nn.Module):
    """ConvNeXt's own LayerNorm for ``data_format="channels_first"``: the
    mean and variance over dim 1, by ops."""

    def __init__(self, c, eps=1e-6):
        super().__init__()
        self.weight, self.bias, self.eps = nn.Parameter(torch.rand(c) + 0.5), nn.Parameter(torch.randn(c)), eps

    def forward(self, x):
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


class _ConvStage(nn.Module):
    """``norm(x + dropout(conv(x)))`` in ``(N, C, H, W)`` with a
    channels-first norm (by ops, or an ``nn.LayerNorm`` between permutes)."""

    def __init__(self, by_ops=True):
        super().__init__()
        torch.manual_seed(19)
        self.by_ops = by_ops
        self.conv, self.drop = nn.Conv2d(D, D, 1), nn.Dropout(P)
        self.norm = _ChannelsFirstNorm(D) if by_ops else _seeded_norm(nn.LayerNorm(D))

    def forward(self, x):
        z = x + self.drop(self.conv(x))
        return self.norm(z) if self.by_ops else self.norm(z.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


@pytest.mark.parametrize("by_ops", [True, False])
def test_a_channels_first_layernorm_is_recognised_and_its_site_audited(by_ops):
    model = _ConvStage(by_ops).double()
    found = discover(model, _conv_x())
    assert [(s.dropout, s.norm, s.form) for s in found.sites] == [("drop", "norm", "bypass")]
    assert found.norms["norm"].kind == "layer" and found.norms["norm"].axis == (-3 if by_ops else -1)
    audit = A.audit_torch(model, _conv_x(), samples=1024)
    assert [s["name"] for s in audit.sites] == ["drop->norm"] and audit.tokens["audited"] == 24


def test_a_channels_first_site_truth_matches_the_models_monte_carlo():
    model = _ConvStage(by_ops=True).double()
    x = _conv_x()
    audit = A.audit_torch(model, x, sites=[("drop", "norm")], samples=16384, seed=3)
    truth, se = audit.truth(0)
    runs = train_mode_outputs(model, "norm", x, RUNS)  # runs × (C·H·W) in (C, H, W) order: rows of C channels
    runs = runs.reshape(RUNS, 2, D, 12).transpose(0, 1, 3, 2).reshape(RUNS, -1, D)
    zz = projected_z(truth, se, runs)
    assert np.abs(zz).max() < bonferroni_z(zz.size), np.abs(zz).max()


def test_a_channels_first_norm_is_recognised_when_its_width_equals_its_channels():
    x = torch.randn(2, D, 3, D, generator=torch.Generator().manual_seed(20), dtype=torch.float64)
    found = discover(_ConvStage(by_ops=True).double(), x)  # the last axis has the weight's length too
    assert found.norms["norm"].axis == -3 and [s.form for s in found.sites] == ["bypass"]
