"""The one call-naming rule (issue 50; dropmc.model.calls): the names
discovery gives the calls of a reused module are the names every other
pass reads back (the linear-path tracer, correct, the network audit)."""

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

from dropmc.model.calls import call_index, call_name, module_of  # noqa: E402
from dropmc.model.discovery import discover  # noqa: E402


def test_names_read_back_to_their_base_and_index():
    for base in ("drop", "layers.0.dropout", "attn:sdpa"):
        names = [call_name(base, k) for k in range(3)]
        assert names == [base, f"{base}#1", f"{base}#2"]
        assert [(module_of(n), call_index(n)) for n in names] == [(base, 0), (base, 1), (base, 2)]


class _Reused(nn.Module):
    """One dropout module called twice, each call before a norm of its own."""

    def __init__(self, d=8):
        super().__init__()
        self.drop = nn.Dropout(0.2)
        self.norm_a, self.norm_b = nn.LayerNorm(d), nn.LayerNorm(d)

    def forward(self, x):
        return self.norm_b(x + self.drop(self.norm_a(x + self.drop(x))))


def test_discovery_names_a_reused_modules_calls_by_the_rule():
    found = discover(_Reused(), torch.randn(3, 8))
    calls = sorted(c for c in found.dropouts if module_of(c) == "drop")
    assert calls == ["drop", "drop#1"]  # the rule as documented: the first call keeps the module's name
