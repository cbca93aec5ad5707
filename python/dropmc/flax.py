"""Flax / JAX dropouts behind dropmc's callables: ``import dropmc.flax`` (needs jax, flax).

::

    import flax.linen as nn, dropmc.flax

    result = dropmc.flax.check_dropout(nn.Dropout(rate=0.1), 0.1)
    assert result.passed, str(result)

``Dropout(layer)`` wraps a ``flax.linen`` module (applied with
``deterministic=not training`` and ``rngs={"dropout": key}``) or a function
``f(x, training, key)`` on JAX arrays (``key`` is ``None`` in eval mode)
into the ``forward``, ``backward`` and ``rng_state`` callables
:func:`dropmc.check_dropout` expects. The adapter owns the generator: a JAX
key split once per training call, so

* ``rng_state()`` is the key's data as a numpy array (a value), and eval
  mode gets no key at all (a Flax module that tries to draw there raises);
* ``backward(x, grad, training)`` differentiates the most recent training
  call with ``jax.vjp`` on the same key (the same mask).

JAX computes in float32 unless ``jax_enable_x64`` is set; ``check_dropout``
here defaults to ``dtype=float32``.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import jax as _jax
import numpy as _np

import dropmc as _dropmc
from dropmc.checks.batchnorm import _with_own_conventions

__all__ = ["Dropout", "batchnorm_runner", "check_batchnorm", "check_dropout"]


class Dropout:
    """A Flax module or ``f(x, training, key)`` as dropmc's callables.

    ``variables``: the module's variables (``{}`` for ``nn.Dropout``);
    ``rng_name``: the rng collection it draws from; ``seed``: the first key.
    """

    def __init__(self, layer, *, variables: Optional[dict] = None, rng_name: str = "dropout", seed: int = 0):
        try:
            from flax import linen as nn
        except ImportError:  # a plain JAX function needs no flax
            nn = None
        if nn is not None and isinstance(layer, nn.Module):
            module, variables = layer, {} if variables is None else variables

            def train(x, key):
                return module.apply(variables, x, deterministic=False, rngs={rng_name: key})

            def evaluate(x):
                return module.apply(variables, x, deterministic=True)

        elif callable(layer):

            def train(x, key):
                return layer(x, True, key)

            def evaluate(x):
                return layer(x, False, None)

        else:
            raise TypeError("layer must be a flax.linen Module or a function f(x, training, key)")
        self._train = _jax.jit(train)
        self._evaluate = evaluate
        self.key = _jax.random.PRNGKey(seed)
        self._last = None

    def forward(self, x, training: bool):
        """The layer on ``x`` (numpy) in train or eval mode, as numpy."""
        if not training:
            return _np.asarray(self._evaluate(x))
        self.key, self._last = _jax.random.split(self.key)
        return _np.asarray(self._train(x, self._last))

    def backward(self, x, grad, training: bool):
        """The gradient of the most recent training call (same key, same mask)."""
        if self._last is None:
            raise RuntimeError("backward called before a training forward")
        _, vjp = _jax.vjp(lambda v: self._train(v, self._last), x)
        return _np.asarray(vjp(grad)[0])

    def rng_state(self):
        """The adapter's key, by value."""
        return _np.array(_jax.random.key_data(self.key))


def _own_rate(layer) -> Optional[float]:
    """The drop rate a Flax module states itself (``nn.Dropout.rate``), or ``None``."""
    rate = getattr(layer, "rate", None)
    return float(rate) if isinstance(rate, (int, float)) and not isinstance(rate, bool) else None


def check_dropout(layer, p: Optional[float] = None, *, backward: bool = True, seed_key: int = 0, variables=None, **kwargs):
    """:func:`dropmc.check_dropout` on a Flax module or JAX function.

    ``p``: the drop rate; by default the module's own (``rate``), and a
    declared ``p`` that contradicts it is refused, naming both (a JAX
    function has none: pass ``p``). ``backward``: check the backward pass
    through ``jax.vjp``; ``seed_key``: the adapter's first key. Other
    keyword arguments are :func:`dropmc.check_dropout`'s; ``dtype``
    defaults to float32.
    """
    if not isinstance(layer, Dropout):
        p = _dropmc._declared_or_own_rate(p, _own_rate(layer), f"{type(layer).__name__}.rate")
    elif p is None:
        raise TypeError("p is required with a prebuilt dropmc.flax.Dropout")
    wrapped = layer if isinstance(layer, Dropout) else Dropout(layer, variables=variables, seed=seed_key)
    dtype = kwargs.pop("dtype", _np.float32)
    return _dropmc.check_dropout(
        wrapped.forward,
        p,
        rng_state=wrapped.rng_state,
        backward=wrapped.backward if backward else False,
        dtype=dtype,
        **kwargs,
    )


def _flax_batchnorm(module):
    """``module`` as a Flax ``nn.BatchNorm`` dropmc can drive, or a clear error."""
    from flax import linen as nn

    if not isinstance(module, nn.BatchNorm):
        raise TypeError(f"module must be a flax.linen.BatchNorm, got {type(module).__name__}")
    if module.axis not in (-1, 1):
        raise ValueError(f"the BatchNorm normalizes axis {module.axis}; dropmc feeds (batch, C) arrays, channels on axis -1")
    if module.axis_name is not None:
        raise ValueError("a BatchNorm that averages over a named axis (axis_name) needs pmap; check it without")
    # use_running_average is given per call here (Flax refuses it twice).
    return module.clone(use_running_average=None)


def batchnorm_runner(module) -> Callable[[Any, Any], Any]:
    """A Flax ``nn.BatchNorm`` as the ``batchnorm(batches, x)``
    :func:`dropmc.check_batchnorm` expects: each call initializes the module
    over the batches' ``C`` channels (mean 0, variance 1, scale 1, bias 0,
    Flax's start), trains it on the batches in order (``use_running_average=False``,
    the ``batch_stats`` collection updated, one ``lax.scan``) and runs it with
    ``use_running_average=True`` on ``x``. The module's own momentum, epsilon
    and dtype are used."""
    bn = _flax_batchnorm(module)

    @_jax.jit
    def run_jax(batches, x):
        variables = bn.init(_jax.random.PRNGKey(0), batches[0], use_running_average=False)
        params = variables.get("params", {})

        def step(stats, batch):
            _, updated = bn.apply(
                {"params": params, "batch_stats": stats}, batch, use_running_average=False, mutable=["batch_stats"]
            )
            return updated["batch_stats"], None

        stats, _ = _jax.lax.scan(step, variables["batch_stats"], batches)
        y = bn.apply({"params": params, "batch_stats": stats}, x, use_running_average=True)
        return stats["mean"], stats["var"], y

    def run(batches, x):
        rm, rv, y = run_jax(batches, x)
        return _np.asarray(rm), _np.asarray(rv), _np.asarray(y)

    return run


def check_batchnorm(module, p: float, **kwargs):
    """:func:`dropmc.check_batchnorm` on a Flax ``nn.BatchNorm`` through
    :func:`batchnorm_runner`. The conventions are read from the module:
    ``momentum`` (Flax's ``ra <- momentum ra + (1 - momentum) batch`` is
    PyTorch's ``1 - momentum``), ``eps`` (``epsilon``), and the biased batch
    variance (``unbiased=False``); ``dtype`` defaults to float32 (JAX's).
    A declared ``momentum`` or ``eps`` that contradicts the module's is
    refused, naming both."""
    bn = _flax_batchnorm(module)
    own = {"momentum": 1.0 - float(bn.momentum), "eps": float(bn.epsilon), "unbiased": False}
    _with_own_conventions(kwargs, own, "module")
    kwargs.setdefault("dtype", _np.float32)
    return _dropmc.check_batchnorm(batchnorm_runner(bn), p, **kwargs)
