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

__all__ = ["Dropout", "check_dropout"]


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


def check_dropout(layer, p: float, *, backward: bool = True, seed_key: int = 0, variables=None, **kwargs):
    """:func:`dropmc.check_dropout` on a Flax module or JAX function.

    ``backward``: check the backward pass through ``jax.vjp``; ``seed_key``:
    the adapter's first key. Other keyword arguments are
    :func:`dropmc.check_dropout`'s; ``dtype`` defaults to float32.
    """
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
