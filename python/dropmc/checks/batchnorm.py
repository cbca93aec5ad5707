"""The BatchNorm family on a Python BatchNorm trained on dropped-out batches:
:func:`check_batchnorm`. See ``docs/python-attention-batchnorm.md``."""

from __future__ import annotations

import math as _math
from typing import Any, Callable, Optional

import numpy as _np

from .. import _dropmc
from .core import Result, _check_rate, _check_samples, _dtype_name, _input_row

__all__ = ["check_batchnorm"]

_MU, _SIGMA, _BATCH, _STEPS, _MOMENTUM = _dropmc.batchnorm_defaults()


def _array(name: str, out, shape) -> _np.ndarray:
    try:
        arr = _np.asarray(out, dtype=_np.float64)
    except (TypeError, ValueError) as e:
        raise TypeError(f"batchnorm returned {name} as {type(out).__name__}, which numpy cannot read as numbers: {e}") from e
    if arr.shape != tuple(shape):
        raise ValueError(f"batchnorm returned {name} of shape {arr.shape}, expected {tuple(shape)}")
    if not _np.all(_np.isfinite(arr)):
        raise ValueError(f"batchnorm returned a non-finite {name}")
    return _np.ascontiguousarray(arr)


def _with_own_conventions(kwargs: dict, own: dict, what: str) -> dict:
    """``kwargs`` with the layer's own conventions ``own`` (``momentum`` in
    PyTorch's sense, ``eps``, ``unbiased``) set, as a framework adapter reads
    them off the layer (``what`` names it); a declared value that
    contradicts the layer's is refused, naming both. ``1 - momentum`` rounds,
    so a declaration equal to it up to that rounding agrees."""
    for name, value in own.items():
        declared = kwargs.get(name)
        if declared is not None and not _math.isclose(declared, value, rel_tol=1e-12, abs_tol=1e-15):
            shown = value if isinstance(value, bool) else f"{value:.12g}"
            raise ValueError(f"declared {name}={declared!r}, but the {what}'s is {shown} (in PyTorch's convention)")
        kwargs[name] = value
    return kwargs


def check_batchnorm(
    batchnorm: Callable[[Any, Any], Any],
    p: float,
    *,
    momentum: float = _MOMENTUM,
    unbiased: bool = True,
    eps: float = 1e-5,
    mu=None,
    sigma=None,
    batch: int = _BATCH,
    steps: int = _STEPS,
    samples: Optional[int] = None,
    seed: int = 1,
    dtype=_np.float64,
) -> Result:
    """Runs dropmc's BatchNorm claims on ``batchnorm`` after dropout at rate ``p``.

    ``batchnorm(batches, x)`` takes **two** arguments: ``batches``, an array
    of shape ``(steps, batch, C)`` of ``dtype``, and ``x``, of shape
    ``(2, C)``. It must make a *fresh* BatchNorm over ``C`` channels (running
    mean 0, running variance 1, gain 1, shift 0), run it in train mode on
    ``batches[0]``, ``batches[1]``, ... in order, then in eval mode on ``x``,
    and return ``(running_mean, running_var, y)``: the buffers after
    training (``C`` entries each) and the eval output (``(2, C)``). For
    ``torch.nn.BatchNorm1d`` use :func:`dropmc.torch.check_batchnorm`.

    dropmc draws the batches: channel ``k`` of ``K = len(mu)`` is clean
    data ``N(mu_k, sigma_k^2)`` through dropmc's own dropout at ``p``, and
    ``C = R K`` packs ``R`` independent replicates side by side (BatchNorm
    keeps channels apart, so one call trains ``R`` layers).

    The layer's conventions are arguments: ``momentum`` in PyTorch's sense
    (``rm <- (1 - momentum) rm + momentum * mean``; Keras and Flax call
    ``1 - momentum`` their momentum), ``unbiased``: the running variance
    takes the unbiased batch variance (PyTorch; ``False`` for burn, Flax and
    Keras, which take the biased one), ``eps`` the eval denominator's
    ``sqrt(rv + eps)``.

    Claims (40 000 replicates each): ``batchnorm.running_stats`` (``E[rm_t]``
    and ``E[rv_t]`` with the EMA transient from (0, 1) after ``steps``
    batches), ``batchnorm.fold_buffers`` (``E[q rv - p rm^2]``),
    ``batchnorm.eval_mean`` (eval uses the buffers: ``E[y] =
    (mu - rm)/sqrt(rv + eps)``) and ``batchnorm.variance_shift`` (eval
    divides by ``sqrt(rv + eps)``: ``(y - y')^2/2 (rv + eps)/sigma^2`` has
    mean 1; the shift ``Delta = c^2`` at the expected buffer). ``samples``
    caps the replicates; below the minimum budget a claim is
    ``inconclusive``.
    """
    p = _check_rate(p)
    dtype_name = _dtype_name(dtype, "check_batchnorm")
    if not callable(batchnorm):
        raise TypeError("batchnorm must be callable as batchnorm(batches, x)")
    mu = _input_row(_MU if mu is None else mu, "mu")
    sigma = _input_row(_SIGMA if sigma is None else sigma, "sigma")
    if len(sigma) != len(mu):
        raise ValueError(f"sigma must have one entry per channel of mu ({len(mu)}), got {len(sigma)}")
    if not all(s > 0 for s in sigma):
        raise ValueError("every sigma must be > 0")
    for name, value in (("batch", batch), ("steps", steps)):
        if isinstance(value, bool) or int(value) != value:
            raise TypeError(f"{name} must be an integer, got {value!r}")
    if batch < 2:
        raise ValueError(f"batch must be >= 2 (a batch variance needs two examples), got {batch}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    momentum, eps = float(momentum), float(eps)
    if not 0.0 < momentum <= 1.0:
        raise ValueError(f"momentum must be in (0, 1] (PyTorch's convention), got {momentum}")
    if not (eps >= 0.0 and _math.isfinite(eps)):
        raise ValueError(f"eps must be finite and >= 0, got {eps}")
    if not isinstance(unbiased, (bool, _np.bool_)):
        raise TypeError(f"unbiased must be True or False, got {unbiased!r}")
    samples = _check_samples(samples)
    if int(seed) != seed or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    dt = _np.dtype(dtype_name)

    def run(batches, x):
        c = batches.shape[2]
        out = batchnorm(batches.astype(dt), x.astype(dt))
        if not (isinstance(out, (tuple, list)) and len(out) == 3):
            raise TypeError("batchnorm must return (running_mean, running_var, y)")
        rm, rv, y = out
        return _array("running_mean", rm, (c,)), _array("running_var", rv, (c,)), _array("y", y, (2, c))

    text, claims = _dropmc.check_batchnorm(
        run, p, mu, sigma, int(batch), int(steps), momentum, bool(unbiased), eps,
        None if samples is None else int(samples), int(seed),
    )
    return Result(text, claims)
