"""BatchNorm layers behind :func:`dropmc.check_batchnorm`:
``dropmc.torch.batchnorm_runner`` and ``dropmc.torch.check_batchnorm``
(re-exported by :mod:`dropmc.torch`)."""

from __future__ import annotations

import copy as _copy
from typing import Any, Callable, Union

import numpy as _np
import torch as _torch

from .. import _dropmc as _rs
from .batchnorm import check_batchnorm as _check_batchnorm
from .core import Result
from .torch_common import _array, _device_of, _dtype_of, one_thread


def _has_running_stats(layer: _torch.nn.Module) -> None:
    """Refuses a BatchNorm without running statistics, saying why."""
    if getattr(layer, "track_running_stats", True) is False or getattr(layer, "running_mean", None) is None \
            or getattr(layer, "running_var", None) is None:
        raise ValueError(
            f"{type(layer).__name__} has no running statistics (track_running_stats=False): its eval "
            "mode normalizes with each batch's own mean and variance, so there are no buffers for "
            "dropmc's running-statistics claims (batchnorm.running_stats, fold_buffers, eval_mean, "
            "variance_shift) to judge; check a layer built with track_running_stats=True"
        )


def _widened_copy(layer: _torch.nn.Module, channels: int, device) -> _torch.nn.Module:
    """A deep copy of ``layer`` (the caller's module untouched) over ``channels``
    channels, ``R = channels / num_features`` replicates of the layer side by side:
    running statistics reset to PyTorch's start (mean 0, variance 1, no batches
    seen), γ and β tiled ``R`` times. Everything else (the class and its
    ``forward``, momentum, eps, affine) is the module's own."""
    features = int(layer.num_features)
    if channels % features:
        raise ValueError(f"{channels} channels are not whole replicates of num_features = {features}")
    r = channels // features
    bn = _copy.deepcopy(layer).to(device)
    ref = bn.running_mean
    bn.num_features = channels
    bn.running_mean = _torch.zeros(channels, dtype=ref.dtype, device=ref.device)
    bn.running_var = _torch.ones(channels, dtype=ref.dtype, device=ref.device)
    if getattr(bn, "num_batches_tracked", None) is not None:
        bn.num_batches_tracked.zero_()
    for name in ("weight", "bias"):
        param = getattr(bn, name, None)
        if isinstance(param, _torch.Tensor) and param.shape == (features,):
            setattr(bn, name, _torch.nn.Parameter(param.detach().repeat(r), requires_grad=False))
    return bn


#: Spatial axes each torch BatchNorm class normalizes over besides the batch
#: (``BatchNorm2d``: ``(N, C, H, W)``, channel statistics over ``N·H·W``).
_SPATIAL_AXES = {"BatchNorm2d": 2, "LazyBatchNorm2d": 2, "BatchNorm3d": 3, "LazyBatchNorm3d": 3}


def _spatial_axes(bn: _torch.nn.Module) -> int:
    """How many spatial axes ``bn``'s input has (0 for ``BatchNorm1d`` and
    modules dropmc does not know, which are fed ``(N, C)``)."""
    for cls in type(bn).__mro__:
        if cls.__name__ in _SPATIAL_AXES and cls.__module__.startswith("torch."):
            return _SPATIAL_AXES[cls.__name__]
    return 0


def _side(rows: int, axes: int) -> int:
    """The side ``s`` of the spatial grid the ``rows`` values of a channel are
    laid out on: 2 when ``s^axes`` divides ``rows`` (so each batch really is
    reduced over ``N·H·W`` with ``H, W > 1``), else 1."""
    return 2 if axes and rows % 2**axes == 0 else 1


def _to_rank(t: "_torch.Tensor", axes: int) -> "_torch.Tensor":
    """``t`` of shape ``(rows, C)`` as ``(rows / s^axes, C, s, ..., s)``: the
    same ``rows`` values per channel, so a BatchNorm2d/3d's channel statistics
    over ``N·H·W`` are the batch's statistics over its rows."""
    if not axes:
        return t
    s = _side(t.shape[0], axes)
    grid = t.reshape(t.shape[0] // s**axes, *([s] * axes), t.shape[1])
    return grid.permute(0, axes + 1, *range(1, axes + 1))


def _from_rank(y: "_torch.Tensor", axes: int) -> "_torch.Tensor":
    """The inverse of :func:`_to_rank`: ``(N, C, s, ..., s)`` back to ``(rows, C)``."""
    if not axes:
        return y
    return y.permute(0, *range(2, axes + 2), 1).reshape(-1, y.shape[1])


def _affine_of(bn: _torch.nn.Module, channels: int):
    """The module's per-channel ``(γ, β)`` as tensors over ``channels`` (``None``
    for a layer without them), or a ValueError for a γ with a zero entry (its
    output cannot be mapped back to the normalized value)."""
    weight, bias = getattr(bn, "weight", None), getattr(bn, "bias", None)
    if not isinstance(weight, _torch.Tensor):
        return None
    if bool((weight == 0).any()):
        raise ValueError("the BatchNorm's weight (gamma) has a zero entry: its eval output does not depend on x there")
    beta = bias if isinstance(bias, _torch.Tensor) else _torch.zeros_like(weight)
    return weight.detach(), beta.detach()


def _replicate_inputs(layer: _torch.nn.Module, kwargs: dict) -> None:
    """``mu`` and ``sigma`` over the module's ``num_features`` channels (one
    replicate is one copy of the layer): the family's defaults repeated, or the
    caller's, which must have one entry per feature."""
    features = int(layer.num_features)
    mu0, sigma0, *_ = _rs.batchnorm_defaults()
    for name, default in (("mu", mu0), ("sigma", sigma0)):
        value = kwargs.get(name)
        if value is None:
            kwargs[name] = [default[i % len(default)] for i in range(features)]
        elif len(_np.atleast_1d(_np.asarray(value))) != features:
            raise ValueError(
                f"{name} must have one entry per feature of the module (num_features = {features}), "
                f"got {len(_np.atleast_1d(_np.asarray(value)))}"
            )


def batchnorm_runner(layer: Union[_torch.nn.Module, Callable[[int], Any]], *, device=None) -> Callable[[Any, Any], Any]:
    """A torch BatchNorm as the ``batchnorm(batches, x)`` :func:`dropmc.check_batchnorm` expects.

    ``layer``: the BatchNorm module to check (``nn.BatchNorm1d``,
    ``nn.BatchNorm2d``/``3d`` or any module with its buffers
    ``running_mean``/``running_var`` and ``num_features``). A BatchNorm2d/3d
    is fed each batch of ``B`` rows as ``(B / s^k, C, s, ..., s)`` (``s = 2``
    when ``2^k`` divides ``B``, else 1): its channel statistics over
    ``N·H·W`` are then the batch's over its ``B`` rows, which is what the
    claims are stated for.
    Each call trains a deep copy of *that* module (its class and ``forward``,
    momentum, eps, affine; the caller's buffers are untouched) widened to
    ``R`` replicates of its ``num_features`` channels, its running statistics
    reset to PyTorch's start (0, 1); an affine layer's output is mapped back
    through its own γ and β. A module without running statistics
    (``track_running_stats=False``) is refused. Or a factory ``make(C)``
    returning a fresh module over ``C`` channels. ``device``: where the layer
    runs (default the module's own; results come back to the CPU).
    """
    if isinstance(layer, _torch.nn.Module):
        _has_running_stats(layer)
        if not hasattr(layer, "num_features"):
            raise TypeError(f"{type(layer).__name__} has no num_features: pass a BatchNorm module or a factory make(C)")
        place = _device_of(layer) if device is None else _torch.device(device)

        def make(c, dtype):
            return _widened_copy(layer, c, place)
    elif callable(layer):
        place = _torch.device("cpu" if device is None else device)

        def make(c, dtype):
            return layer(c).to(device=place, dtype=dtype)
    else:
        raise TypeError("layer must be a torch BatchNorm module or a factory make(num_features)")

    def run(batches, x):
        b = _torch.from_numpy(batches)
        bn = make(b.shape[2], b.dtype)
        _has_running_stats(bn)
        b = b.to(device=place, dtype=bn.running_mean.dtype)
        with _torch.no_grad():
            bn.train()
            axes = _spatial_axes(bn)
            for step in b:
                bn(_to_rank(step, axes))
            bn.eval()
            y = _from_rank(bn(_to_rank(_torch.from_numpy(x).to(device=place, dtype=b.dtype), axes)), axes)
            affine = _affine_of(bn, b.shape[2]) if isinstance(layer, _torch.nn.Module) else None
            if affine is not None:
                y = (y - affine[1]) / affine[0]
        return _array(bn.running_mean).copy(), _array(bn.running_var).copy(), _array(y)

    return run


def check_batchnorm(
    layer: Union[_torch.nn.Module, Callable[[int], Any]], p: float, *, device=None, **kwargs
) -> Result:
    """:func:`dropmc.check_batchnorm` on a torch BatchNorm through
    :func:`batchnorm_runner` (the module itself, deep-copied), at one
    intra-op thread. ``momentum``, ``eps`` and ``dtype`` default to the
    module's (``momentum=None``, PyTorch's cumulative average, runs one
    training step, where the cumulative average is the batch's statistic
    exactly: an EMA with momentum 1); ``mu`` and ``sigma`` have one entry per
    ``num_features`` (default: the family's, repeated); ``unbiased`` defaults
    to True (torch's running variance convention). Other keyword arguments
    are :func:`dropmc.check_batchnorm`'s."""
    if isinstance(layer, _torch.nn.Module):
        _has_running_stats(layer)
        if layer.momentum is None:
            if kwargs.get("momentum") is not None:
                raise ValueError(
                    f"the module's momentum is None (a cumulative average), momentum={kwargs['momentum']} was declared"
                )
            if kwargs.get("steps", 1) != 1:
                raise ValueError(
                    "momentum=None (a cumulative average) is checked over one training step, where it is "
                    "the batch's statistic exactly (an EMA with momentum 1); dropmc's buffer formulas are "
                    f"stated for an EMA, so steps={kwargs['steps']} cannot be checked"
                )
            kwargs["momentum"], kwargs["steps"] = 1.0, 1
        kwargs.setdefault("momentum", layer.momentum)
        kwargs.setdefault("eps", layer.eps)
        dtype = _dtype_of(layer, "layer", "check a float32 copy (layer.float()) for its formula")
        if dtype is not None:
            kwargs.setdefault("dtype", dtype)
        if hasattr(layer, "num_features"):
            _replicate_inputs(layer, kwargs)
    with one_thread():
        return _check_batchnorm(batchnorm_runner(layer, device=device), p, **kwargs)
