"""``correct(model)`` without inputs finds dropout→BatchNorm pairs by the one call order a
model states without running, its ``nn.Sequential`` containers (no symbolic tracing); a pair in a
hand-written ``forward`` needs example inputs, which find it from one forward
(docs/correct.md, python/dropmc/model/batchnorm_pairs.py)."""

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import dropmc.correct as C  # noqa: E402
from dropmc.model.batchnorm_pairs import sequential_batchnorm_pairs  # noqa: E402


class ByHand(nn.Module):
    """``bn(drop(lin(x)))`` written out: no container states the order."""

    def __init__(self):
        super().__init__()
        self.lin, self.drop, self.bn = nn.Linear(3, 4), nn.Dropout(0.5), nn.BatchNorm1d(4)

    def forward(self, x):
        return self.bn(self.drop(self.lin(x)))


def test_nested_containers_are_read_as_their_children_in_order():
    inner = nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.5))
    model = nn.Sequential(inner, nn.BatchNorm1d(4), nn.Dropout(0.1), nn.Sequential(nn.BatchNorm1d(4)))
    assert sequential_batchnorm_pairs(model) == [("0.1", "1"), ("2", "3.0")]
    assert C.resolve_sites(model) == [("0.1", "1"), ("2", "3.0")]


def test_only_adjacent_dropout_then_batchnorm_is_a_pair():
    model = nn.Sequential(nn.Dropout(0.5), nn.ReLU(), nn.BatchNorm1d(3), nn.BatchNorm1d(3), nn.Dropout(0.5))
    assert sequential_batchnorm_pairs(model) == []


def test_a_pair_in_a_hand_written_forward_asks_for_inputs_then_is_found_with_them():
    model = ByHand()
    with pytest.raises(ValueError, match=r"nn\.Sequential.*give example inputs, correct\(model, inputs\)"):
        C.correct(model, scope="site")
    assert C.resolve_sites(model, inputs=torch.randn(8, 3)) == [("drop", "bn")]
