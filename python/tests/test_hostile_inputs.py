"""Issue 44's hostile Python inputs: each refused with a TypeError or
ValueError naming its argument, before anything runs."""

import numpy as np
import pytest

import dropmc
from implementations import Correct


@pytest.mark.parametrize("p", [True, False, "0.1", b"0.1", np.bool_(True)])
def test_a_rate_that_is_not_a_real_number_is_refused_naming_p(p):
    layer = Correct(0.1)
    with pytest.raises(TypeError, match=r"\bp must be a real number"):
        dropmc.check_dropout(layer.forward, p)


def test_a_budget_beyond_any_count_is_refused_naming_samples():
    layer = Correct(0.1)
    with pytest.raises(ValueError, match=r"samples = \d+ is too large"):
        dropmc.check_dropout(layer.forward, 0.1, samples=2**70)
    with pytest.raises(TypeError, match=r"samples must be an integer"):
        dropmc.check_dropout(layer.forward, 0.1, samples=True)


def test_a_torch_forward_returning_a_list_is_named_as_such():
    torch = pytest.importorskip("torch")
    import dropmc.torch as dt

    torch.set_num_threads(1)
    inner = torch.nn.Dropout(0.1)
    with pytest.raises(TypeError, match=r"forward returned list, not a torch.Tensor"):
        dt.check_dropout(lambda x, training: [inner(x) if training else x], 0.1, samples=1_000)
