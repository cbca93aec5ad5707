"""Issue 40 item 3: dropouts written as mask products with no dropout call.

A pairformer-style block (AlphaFold-3 style, written here): in training
``z = z + mask · f(z)`` with ``mask = (torch.rand(shape) >= p) / q`` drawn
for ``z[:, :, 0:1, 0:1]`` (one draw per row, shared over the other residue
axis and over all channels: token-level) or for ``z[:, :, 0:1, :]`` (one
draw per row and channel: elementwise over the normalized channels); in
eval mode no mask. The discovery names each mask ``owner:rand_mask#k``,
reads how it is shared, and the capture (a neutral train-mode forward)
gives ``v = f(z)``.

* Sites found: the test's own data-flow reading of its forward (each mask
  product feeds the next LayerNorm through a residual add).
* The elementwise rand-mask site's truth agrees with the model's own
  train-mode Monte Carlo (z per token on a random projection, Bonferroni
  over tokens).
* A token-level site carries ``mask_groups`` (all zeros) in its capture
  and, while the engine does not read that key, is listed with the reason,
  never audited with the elementwise closed forms (wrong for it).
"""


import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

import dropmc.audit as A  # noqa: E402
from dropmc.audit.capture_eval import capture_traced  # noqa: E402
from dropmc.model.discovery import discover  # noqa: E402
from mc_checks import bonferroni_z, projected_z, train_mode_outputs  # noqa: E402

torch.set_num_threads(1)
C, L, P = 24, 6, 0.25
RUNS = 3000


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm_a = nn.LayerNorm(C)
        self.lin_a = nn.Linear(C, C)
        self.norm_b = nn.LayerNorm(C)
        self.lin_b = nn.Linear(C, C)

    def _mask(self, z, channels):
        shape = z[:, :, 0:1, :].shape if channels else z[:, :, 0:1, 0:1].shape
        return (torch.rand(shape) >= P) / (1 - P)

    def forward(self, z):
        f = self.lin_a(self.norm_a(z))
        z = z + self._mask(z, channels=False) * f if self.training else z + f
        g = self.lin_b(self.norm_b(z))
        return z + self._mask(z, channels=True) * g if self.training else z + g


class _Pairformer(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(5)
        self.blocks = nn.ModuleList([_Block(), _Block()])
        self.norm = nn.LayerNorm(C)
        with torch.no_grad():
            for n in self.modules():
                if isinstance(n, nn.LayerNorm):
                    n.weight.normal_(1.0, 0.3)
                    n.bias.normal_(0.0, 0.3)

    def forward(self, z):
        for b in self.blocks:
            z = b(z)
        return self.norm(z)


def _z():
    return torch.randn(1, L, L, C, generator=torch.Generator().manual_seed(4), dtype=torch.float64)


def _expected():
    """From the forward above: block i's first mask feeds its norm_b, its
    second the next block's norm_a (the last block's: the final norm)."""
    return {("blocks.0:rand_mask", "blocks.0.norm_b"): "token",
            ("blocks.0:rand_mask#1", "blocks.1.norm_a"): "elementwise",
            ("blocks.1:rand_mask", "blocks.1.norm_b"): "token",
            ("blocks.1:rand_mask#1", "norm"): "elementwise"}


def test_rand_masks_are_sites_with_their_sharing():
    model = _Pairformer().double()
    found = discover(model, _z())
    got = {(s.dropout, s.norm): s.mask.kind for s in found.sites}
    assert got == _expected()
    assert all(s.form == "bypass" and s.p == pytest.approx(P) for s in found.sites)
    assert all(s.mask.scaled_by_inverse_q() for s in found.sites)
    token = [s for s in found.sites if s.mask.kind == "token"]
    assert all(s.mask.shared == (2,) and "one draw per token" in s.mask.text for s in token)
    caps = capture_traced(model, (_z(),), {}, found, token, [])[0]
    assert all(c["mask_groups"].tolist() == [0] * C for c in caps)
    elementwise = [s for s in found.sites if s.mask.kind == "elementwise"]
    caps = capture_traced(model, (_z(),), {}, found, elementwise, [])[0]
    assert all("mask_groups" not in c for c in caps)


def test_elementwise_rand_mask_truth_matches_the_models_monte_carlo():
    # Block 0 with its first update unmasked (_second_mask_only): the
    # input of blocks.1.norm_a then depends on one mask only, block 0's
    # elementwise one (the forward's first draw, blocks.0:rand_mask).
    model = _Pairformer().double()
    model.blocks[0].forward = lambda z, b=model.blocks[0]: _second_mask_only(b, z)
    z = _z()
    audit = A.audit_torch(model, z, sites=[("blocks.0:rand_mask", "blocks.1.norm_a")], samples=16384, seed=3)
    (site,) = audit.sites
    assert site["d"] == C
    truth, se = audit.truth(0)
    runs = train_mode_outputs(model, "blocks.1.norm_a", z, RUNS)
    zz = projected_z(truth, se, runs)
    assert np.abs(zz).max() < bonferroni_z(zz.size), np.abs(zz).max()


def _second_mask_only(b, z):
    """Block 0 with its first update unmasked: its second (elementwise)
    mask is the forward's first draw, named blocks.0:rand_mask."""
    z = z + b.lin_a(b.norm_a(z))
    g = b.lin_b(b.norm_b(z))
    return z + b._mask(z, channels=True) * g if b.training else z + g


def test_token_level_rand_mask_truth_matches_the_models_monte_carlo():
    # blocks.0.norm_b's input depends on one mask only: block 0's first,
    # token-level one (one draw per row of z, shared over the other residue
    # axis and the channels). Per token E = q·norm(h + v/q) + p·norm(h).
    model = _Pairformer().double()
    z = _z()
    audit = A.audit_torch(model, z, sites=[("blocks.0:rand_mask", "blocks.0.norm_b")], samples=16384, seed=4)
    (site,) = audit.sites
    assert site["mask"] == "token"
    truth, se = audit.truth(0)
    runs = train_mode_outputs(model, "blocks.0.norm_b", z, RUNS)
    zz = projected_z(truth, se, runs)
    assert np.abs(zz).max() < bonferroni_z(zz.size), np.abs(zz).max()


class _HeadMask(nn.Module):
    """``norm(x + (mask · f(x)).reshape(…, d))`` with one draw per head:
    the mask ``(…, heads, 1)`` is shared by the head's channels."""

    def __init__(self, heads=4, dh=6):
        super().__init__()
        torch.manual_seed(6)
        self.heads, self.dh = heads, dh
        self.lin = nn.Linear(heads * dh, heads * dh)
        self.norm = nn.LayerNorm(heads * dh)

    def forward(self, x):
        f = self.lin(x).reshape(*x.shape[:-1], self.heads, self.dh)
        if self.training:
            f = f * ((torch.rand(*f.shape[:-1], 1) >= P) / (1 - P))
        return self.norm(x + f.reshape(*x.shape))


def test_a_mask_shared_by_each_heads_channels_gives_channel_groups():
    model = _HeadMask().double()
    x = torch.randn(2, 5, 24, dtype=torch.float64)
    found = discover(model, x)
    (site,) = found.sites
    assert (site.dropout, site.norm, site.form, site.mask.kind) == ("rand_mask", "norm", "bypass", "groups")
    assert "4 draws per token" in site.mask.text
    (cap,) = capture_traced(model, (x,), {}, found, found.sites, [])[0]
    assert cap["mask_groups"].tolist() == [h for h in range(4) for _ in range(6)]
    assert cap["form"] == "bypass" and cap["d"] == 24


class _DropPath(nn.Module):
    """A pre-LN block with Hugging Face's drop-path: ``x.div(q) ·
    floor(q + rand(batch, 1, 1))``, one draw per sample."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(7)
        self.norm_a, self.lin, self.norm_b = nn.LayerNorm(C), nn.Linear(C, C), nn.LayerNorm(C)

    def forward(self, x):
        y = self.lin(self.norm_a(x))
        if self.training:
            keep = 1 - P
            mask = keep + torch.rand((x.shape[0], 1, 1), dtype=x.dtype)
            mask.floor_()
            y = y.div(keep) * mask
        return self.norm_b(x + y)


def test_drop_path_is_a_token_level_mask_product_of_the_undivided_input():
    model = _DropPath().double()
    x = torch.randn(3, 4, C, dtype=torch.float64)
    found = discover(model, x)
    (site,) = found.sites
    assert (site.dropout, site.norm, site.form, site.p) == ("rand_mask", "norm_b", "bypass", pytest.approx(P))
    assert site.mask.kind == "token" and site.mask.shared == (1,) and site.mask.scaled_by_inverse_q()
    assert found.draws == []  # its draw made the site's mask (a dropout call), not a held draw (issue 50)
    (cap,) = capture_traced(model, (x,), {}, found, found.sites, [])[0]
    with torch.no_grad():  # v is the block's branch itself, not divided by q
        v = model.lin(model.norm_a(x)).reshape(-1, C).numpy()
    assert np.allclose(cap["v"].reshape(-1, C), v, rtol=1e-12, atol=1e-12)
    assert np.allclose(cap["h"].reshape(-1, C), x.reshape(-1, C).numpy(), rtol=1e-12, atol=1e-12)
