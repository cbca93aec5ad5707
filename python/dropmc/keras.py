"""Keras layers behind dropmc's callables: ``import dropmc.keras`` (needs keras 3).

::

    import keras, dropmc.keras

    result = dropmc.keras.check_batchnorm(keras.layers.BatchNormalization(), 0.3)
    assert result.passed, str(result)

Keras picks its backend from ``KERAS_BACKEND`` when first imported (jax,
torch or tensorflow); the adapter uses whichever is set.
"""

from __future__ import annotations

from typing import Any, Callable

import keras as _keras
import numpy as _np

import dropmc as _dropmc
from dropmc.checks.batchnorm import _with_own_conventions

__all__ = ["batchnorm_runner", "check_batchnorm"]


def _keras_batchnorm(layer):
    """``layer`` as a Keras ``BatchNormalization`` dropmc can drive, or a clear error."""
    if not isinstance(layer, _keras.layers.BatchNormalization):
        raise TypeError(f"layer must be a keras.layers.BatchNormalization, got {type(layer).__name__}")
    if layer.axis not in (-1, 1):
        raise ValueError(f"the BatchNormalization normalizes axis {layer.axis}; dropmc feeds (batch, C) arrays, channels on axis -1")
    if getattr(layer, "renorm", False):
        raise ValueError("batch renormalization (renorm=True) is not the BatchNorm dropmc's claims state")
    return layer


def batchnorm_runner(layer) -> Callable[[Any, Any], Any]:
    """A Keras ``BatchNormalization`` as the ``batchnorm(batches, x)``
    :func:`dropmc.check_batchnorm` expects: each call makes a fresh layer from
    *that* layer's class and config (``from_config(get_config())``: its
    momentum, epsilon, center and scale; Keras's start, moving mean 0,
    moving variance 1, gamma 1, beta 0), trains it on the batches in order
    (``training=True``) and runs it on ``x`` with ``training=False``."""
    layer = _keras_batchnorm(layer)
    cls, config = type(layer), layer.get_config()

    def run(batches, x):
        bn = cls.from_config(config)
        bn.build((batches.shape[1], batches.shape[2]))
        for step in batches:
            bn(step, training=True)
        y = bn(x, training=False)
        as_numpy = _keras.ops.convert_to_numpy
        return as_numpy(bn.moving_mean), as_numpy(bn.moving_variance), as_numpy(y)

    return run


def check_batchnorm(layer, p: float, **kwargs):
    """:func:`dropmc.check_batchnorm` on a Keras ``BatchNormalization``
    through :func:`batchnorm_runner`. The conventions are read from the
    layer: ``momentum`` (Keras's ``moving <- momentum moving + (1 - momentum)
    batch`` is PyTorch's ``1 - momentum``), ``eps`` (``epsilon``) and the
    biased batch variance (``unbiased=False``); ``dtype`` defaults to
    float32. A declared ``momentum``, ``eps`` or ``unbiased`` that
    contradicts the layer's is refused, naming both."""
    layer = _keras_batchnorm(layer)
    own = {"momentum": 1.0 - float(layer.momentum), "eps": float(layer.epsilon), "unbiased": False}
    _with_own_conventions(kwargs, own, "layer")
    kwargs.setdefault("dtype", _np.float32)
    return _dropmc.check_batchnorm(batchnorm_runner(layer), p, **kwargs)
