"""dropmc on PyTorch's dropout (run by python/tests/test_torch.py in CI).

    pip install ./python torch
    python python/examples/torch_dropout.py

``dropmc.torch`` wraps a layer into the callables ``dropmc.check_dropout``
expects (autograd for the backward, the generator's state by value) and
runs the check with torch at one intra-op thread.
"""

import numpy as np
import torch

import dropmc
import dropmc.torch
from dropmc.testing import assert_dropout


def main():
    p = 0.1
    torch.manual_seed(0)
    result = dropmc.torch.check_dropout(torch.nn.Dropout(p), p)
    print(result)

    # float32 (PyTorch's default dtype): the same claims in single precision.
    result32 = dropmc.torch.check_dropout(torch.nn.Dropout(p), p, dtype=np.float32)
    print(result32)

    # The callables themselves, for assert_dropout or dropmc.check_dropout.
    layer = dropmc.torch.Dropout(lambda x, training: torch.nn.functional.dropout(x, p, training))
    with dropmc.torch.one_thread():
        assert_dropout(layer.forward, p, backward=layer.backward, rng_state=layer.rng_state)

    # LayerNorm after dropout against dropmc's exact value (d <= 20).
    ln = torch.nn.LayerNorm(6, eps=1e-5, elementwise_affine=False).double()
    drop = dropmc.torch.Dropout(torch.nn.Dropout(p), grad=False)
    with dropmc.torch.one_thread(), torch.no_grad():
        site = dropmc.check_norm_site(
            lambda X: drop.forward(X, True),
            lambda Y: ln(torch.from_numpy(Y)).numpy(),
            np.array([0.5, -1.2, 3.0, 0.7, 2.0, -0.4]),
            p,
            eps=1e-5,
        )
    print(site)
    assert result.passed and result32.passed and site.passed


if __name__ == "__main__":
    main()
