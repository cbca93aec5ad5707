"""dropmc on PyTorch's dropout: an adapter example for users.

NOT RUN IN THIS REPOSITORY: PyTorch's PyPI wheel needs about 2.5 GB of CUDA
libraries and no CPU-only index was reachable where dropmc is developed, so
this file has never been executed here. It is written against PyTorch's
documented API (torch.nn.Dropout, torch.autograd.grad,
torch.random.get_rng_state); please report what it prints.

    pip install ./python torch      # or the CPU wheel: --index-url https://download.pytorch.org/whl/cpu
    python python/examples/torch_dropout.py
"""

import numpy as np
import torch

import dropmc
from dropmc.testing import assert_dropout


class TorchDropout:
    """``torch.nn.Dropout`` behind dropmc's callables.

    * ``forward(x, training)``: the layer in train or eval mode on a float64
      tensor sharing ``x``'s memory; in training mode the input and output
      tensors are kept, so that
    * ``backward(x, grad, training)`` differentiates *that* call (same mask)
      with ``torch.autograd.grad``;
    * ``rng_state``: ``torch.random.get_rng_state`` (a uint8 tensor; dropmc
      compares snapshots with ``!=`` and reduces with ``any``).
    """

    def __init__(self, p, seed=0):
        torch.manual_seed(seed)
        self.layer = torch.nn.Dropout(p)
        self.last = None

    def forward(self, x, training):
        self.layer.train(training)
        xt = torch.from_numpy(x).requires_grad_(training)
        y = self.layer(xt)
        if training:
            self.last = (xt, y)
        return y.detach().numpy()

    def backward(self, x, grad, training):
        xt, y = self.last
        (g,) = torch.autograd.grad(y, xt, torch.from_numpy(grad))
        return g.numpy()

    @staticmethod
    def rng_state():
        return torch.random.get_rng_state()


def main():
    p = 0.1
    layer = TorchDropout(p)
    result = dropmc.check_dropout(
        layer.forward, p, rng_state=layer.rng_state, backward=layer.backward
    )
    print(result)
    # In a test suite:
    assert_dropout(layer.forward, p, rng_state=layer.rng_state, backward=layer.backward)

    # float32 (PyTorch's default dtype): the same claims in single precision.
    result32 = dropmc.check_dropout(layer.forward, p, dtype=np.float32, backward=layer.backward)
    print(result32)

    # LayerNorm after dropout against dropmc's exact value (d <= 20).
    ln = torch.nn.LayerNorm(6, eps=1e-5, elementwise_affine=False).double()
    drop = TorchDropout(p, seed=1)
    with torch.no_grad():
        site = dropmc.check_norm_site(
            lambda X: drop.forward(X, True),
            lambda Y: ln(torch.from_numpy(Y)).numpy(),
            np.array([0.5, -1.2, 3.0, 0.7, 2.0, -0.4]),
            p,
            eps=1e-5,
        )
    print(site)


if __name__ == "__main__":
    main()
