"""PyTorch layers behind dropmc's callables: ``import dropmc.torch`` (needs torch).

::

    import torch, dropmc.torch

    torch.manual_seed(0)
    result = dropmc.torch.check_dropout(torch.nn.Dropout(0.1), 0.1)
    assert result.passed, str(result)

``Dropout(layer)`` wraps an ``nn.Module`` (switched with ``.train()`` /
``.eval()``) or a function ``f(x, training)`` on tensors into the
``forward``, ``backward`` and ``rng_state`` callables
:func:`dropmc.check_dropout` expects:

* ``forward(x, training)`` runs the layer on a tensor sharing ``x``'s
  memory (so an in-place layer is seen writing into its input) and, in
  training mode, keeps the input and output of the call;
* ``backward(x, grad, training)`` differentiates *that* call with
  ``torch.autograd.grad`` (the same mask);
* ``rng_state()`` is the generator's state as ``bytes`` — a value, not the
  generator (``torch.random.get_rng_state()``, or ``generator.get_state()``
  for a layer drawing from its own ``torch.Generator``).

``check_dropout(layer, p, ...)`` runs :func:`dropmc.check_dropout` on the
wrapped layer with torch at one intra-op thread (:func:`one_thread`):
dropmc calls the layer on small batches thousands of times, where torch's
thread pool costs more than it saves (issue 23 measured ``nn.Dropout`` at the default budget:
73 s with 2 threads, 7.8 s with 1, on a 2-core machine).
"""

from __future__ import annotations

import contextlib as _contextlib
from typing import Any, Callable, Optional, Union

import numpy as _np
import torch as _torch

import dropmc as _dropmc
from dropmc.audit import audit_torch as audit  # noqa: F401  (docs/audit.md)
from dropmc.correct import correct, corrected, uncorrect  # noqa: F401  (docs/correct.md)

__all__ = [
    "Dropout",
    "audit",
    "batchnorm_runner",
    "check_batchnorm",
    "check_dropout",
    "check_sdpa",
    "one_thread",
    "sdpa_dropout",
]


def _tensor(x: _np.ndarray) -> "_torch.Tensor":
    """A tensor sharing ``x``'s memory; a bfloat16 array (``ml_dtypes``,
    which torch cannot read) is viewed through its 16 bits."""
    if x.dtype.name == "bfloat16":
        return _torch.from_numpy(x.view(_np.int16)).view(_torch.bfloat16)
    return _torch.from_numpy(x)


def _array(t: "_torch.Tensor") -> _np.ndarray:
    """``t`` as numpy (a bfloat16 tensor as an ``ml_dtypes`` bfloat16 array)."""
    t = t.detach().cpu()
    if t.dtype == _torch.bfloat16:
        import ml_dtypes

        return t.contiguous().view(_torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


@_contextlib.contextmanager
def one_thread():
    """Runs the block with torch at one intra-op thread, restoring the
    previous setting after (also when the block raises)."""
    before = _torch.get_num_threads()
    _torch.set_num_threads(1)
    try:
        yield
    finally:
        _torch.set_num_threads(before)


class Dropout:
    """A torch dropout (``nn.Module`` or ``f(x, training)``) as dropmc's callables.

    ``generator``: the ``torch.Generator`` the layer draws from (default:
    torch's global CPU generator, which ``nn.Dropout`` and ``F.dropout``
    use). ``grad``: track gradients in training mode so ``backward`` can
    differentiate the call (an in-place layer cannot be differentiated from
    a leaf tensor; use ``grad=False`` to check its forward).
    """

    def __init__(
        self,
        layer: Union[_torch.nn.Module, Callable[[Any, bool], Any]],
        *,
        generator: Optional[_torch.Generator] = None,
        grad: bool = True,
    ):
        if not (isinstance(layer, _torch.nn.Module) or callable(layer)):
            raise TypeError("layer must be a torch.nn.Module or a function f(x, training)")
        if generator is not None and not isinstance(generator, _torch.Generator):
            raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
        self.layer = layer
        self.generator = generator
        self.grad = bool(grad)
        self._last = None

    def _run(self, xt, training: bool):
        if isinstance(self.layer, _torch.nn.Module):
            self.layer.train(training)
            return self.layer(xt)
        return self.layer(xt, training)

    def forward(self, x, training: bool):
        """The layer on ``x`` (a numpy array) in train or eval mode, as numpy."""
        xt = _tensor(x)
        if training and self.grad:
            xt.requires_grad_(True)
            try:
                y = self._run(xt, True)
            except RuntimeError as e:
                if "in-place" not in str(e):
                    raise
                raise ValueError(
                    "the layer works in place on its input, which autograd cannot differentiate "
                    "from a leaf tensor; it also overwrites the caller's array: check its forward "
                    "with dropmc.torch.check_dropout(layer, p, backward=False) "
                    "(semantics.forward_preserves_input)"
                ) from e
            self._last = (xt, y)
            return _array(y)
        with _torch.no_grad():
            y = self._run(xt, training)
        return _array(y)

    def backward(self, x, grad, training: bool):
        """The gradient of the most recent training ``forward`` call."""
        if self._last is None:
            raise RuntimeError("backward called before a training forward (or with grad=False)")
        xt, y = self._last
        if not y.requires_grad:
            raise ValueError("the layer's training output does not depend on its input through autograd")
        (g,) = _torch.autograd.grad(y, xt, _tensor(grad))
        self._last = None
        return _array(g)

    def rng_state(self) -> bytes:
        """The generator's state, by value."""
        if self.generator is not None:
            state = self.generator.get_state()
        else:
            state = _torch.random.get_rng_state()
        return state.numpy().tobytes()


def check_dropout(
    layer: Union[_torch.nn.Module, Callable[[Any, bool], Any], Dropout],
    p: float,
    *,
    backward: bool = True,
    generator: Optional[_torch.Generator] = None,
    **kwargs,
) -> "_dropmc.Result":
    """:func:`dropmc.check_dropout` on a torch layer, at one intra-op thread.

    ``backward``: check the backward pass through autograd (``False`` for a
    layer without one, or an in-place layer). Other keyword arguments
    (``x``, ``samples``, ``seed``, ``dtype``, ...) are
    :func:`dropmc.check_dropout`'s; ``dtype`` defaults to float64
    (``np.float16`` and ``"bfloat16"`` check torch's half-precision
    dropout).
    """
    wrapped = layer if isinstance(layer, Dropout) else Dropout(layer, generator=generator, grad=backward)
    dtype = kwargs.pop("dtype", _np.float64)
    with one_thread():
        return _dropmc.check_dropout(
            wrapped.forward,
            p,
            rng_state=wrapped.rng_state,
            backward=wrapped.backward if backward else False,
            dtype=dtype,
            **kwargs,
        )


def sdpa_dropout(p: float, *, attention: Optional[Callable[..., Any]] = None) -> Callable[[Any], Any]:
    """``F.scaled_dot_product_attention(q, k, v, dropout_p=p)`` as the
    ``dropout(A)`` :func:`dropmc.check_attention_dropout` expects.

    For rows ``A`` of the softmax row ``a`` over ``T`` keys: one query per
    row, ``q = ln a``, the keys ``k = I_T`` and ``scale=1`` make the logits
    ``q k^T = ln a`` and the softmax ``a``; the values ``v = I_T`` make the
    output the dropped attention row itself. ``attention``: any function
    with SDPA's signature (``attention(q, k, v, dropout_p=p, scale=1.0)``;
    default torch's own).
    """
    p = _dropmc._check_rate(p)
    attend = _torch.nn.functional.scaled_dot_product_attention if attention is None else attention
    if not callable(attend):
        raise TypeError("attention must be callable as attention(q, k, v, dropout_p=p, scale=1.0)")

    def dropout(A):
        a = _torch.from_numpy(A)
        n, t = a.shape
        identity = _torch.eye(t, dtype=a.dtype).expand(n, t, t)
        with _torch.no_grad():
            out = attend(_torch.log(a).unsqueeze(1), identity, identity, dropout_p=p, scale=1.0)
        return out.squeeze(1).detach().cpu().numpy()

    return dropout


def check_sdpa(p: float, *, attention: Optional[Callable[..., Any]] = None, **kwargs) -> "_dropmc.Result":
    """:func:`dropmc.check_attention_dropout` on SDPA (or ``attention``, a
    function with its signature) through :func:`sdpa_dropout`, at one
    intra-op thread. Keyword arguments (``a``, ``values``, ``samples``,
    ``seed``, ``dtype``) are :func:`dropmc.check_attention_dropout`'s."""
    with one_thread():
        return _dropmc.check_attention_dropout(sdpa_dropout(p, attention=attention), p, **kwargs)


def batchnorm_runner(layer: Union[_torch.nn.Module, Callable[[int], Any]]) -> Callable[[Any, Any], Any]:
    """A torch BatchNorm as the ``batchnorm(batches, x)`` :func:`dropmc.check_batchnorm` expects.

    ``layer``: an ``nn.BatchNorm1d`` (or a module of a class with its
    constructor, ``cls(num_features, eps=, momentum=, affine=, dtype=)``),
    whose class and settings make a fresh layer over ``C`` channels per
    call; or a factory ``make(C)`` returning a fresh module.
    """
    if isinstance(layer, _torch.nn.Module):
        cls, settings = type(layer), dict(eps=layer.eps, momentum=layer.momentum, affine=layer.affine)
        if layer.momentum is None:
            raise ValueError("momentum=None (a cumulative average) is not an EMA: dropmc checks an EMA buffer")

        def make(c, dtype):
            return cls(c, dtype=dtype, **settings)
    elif callable(layer):
        def make(c, dtype):
            return layer(c).to(dtype)
    else:
        raise TypeError("layer must be a torch BatchNorm module or a factory make(num_features)")

    def run(batches, x):
        b = _torch.from_numpy(batches)
        bn = make(b.shape[2], b.dtype)
        with _torch.no_grad():
            bn.train()
            for step in b:
                bn(step)
            bn.eval()
            y = bn(_torch.from_numpy(x))
        return bn.running_mean.numpy().copy(), bn.running_var.numpy().copy(), y.numpy()

    return run


def check_batchnorm(layer: Union[_torch.nn.Module, Callable[[int], Any]], p: float, **kwargs) -> "_dropmc.Result":
    """:func:`dropmc.check_batchnorm` on a torch BatchNorm through
    :func:`batchnorm_runner`, at one intra-op thread. ``momentum`` and
    ``eps`` default to the module's; ``unbiased`` to True (torch's running
    variance convention). Other keyword arguments are
    :func:`dropmc.check_batchnorm`'s."""
    if isinstance(layer, _torch.nn.Module):
        kwargs.setdefault("momentum", layer.momentum)
        kwargs.setdefault("eps", layer.eps)
    with one_thread():
        return _dropmc.check_batchnorm(batchnorm_runner(layer), p, **kwargs)
