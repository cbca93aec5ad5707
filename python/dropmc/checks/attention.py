"""The attention family on a Python attention dropout: :func:`check_attention_dropout`.

See ``docs/python-attention-batchnorm.md``.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as _np

from .. import _dropmc
from .core import Result, _check_rate, _checked, _dtype_name, _input_row, _python_words

__all__ = ["check_attention_dropout"]

_DEFAULT_A, _DEFAULT_VALUES = _dropmc.attention_defaults()


def _budget(samples, seed):
    if samples is not None and (int(samples) != samples or samples < 2):
        raise ValueError(f"samples must be an integer >= 2, got {samples!r}")
    if int(seed) != seed or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return None if samples is None else int(samples), int(seed)


def check_attention_dropout(
    dropout: Callable[[Any], Any],
    p: float,
    *,
    a=None,
    values=None,
    samples: Optional[int] = None,
    seed: int = 1,
    dtype=_np.float64,
) -> Result:
    """Runs dropmc's attention claims on ``dropout`` at drop rate ``p``.

    ``dropout(A)`` takes **one** argument: an ``(n, T)`` array of ``dtype``
    whose rows are copies of the softmax row ``a``, and returns the dropped
    rows ``b`` (same shape and dtype), ``b_i = m_i a_i / q`` with a fresh
    keep bit per entry and row. It is always called in training mode. For
    ``F.scaled_dot_product_attention`` use :func:`dropmc.torch.sdpa_dropout`
    (the values ``V = I_T`` make SDPA's output the dropped row).

    ``a``: the attention row, positive entries summing to 1 (default the
    seed's ``(0.2, 0.3, 0.5)``): the rule of ``dropmc eval attn``, a row off 1
    by more than a float32 softmax's rounding is refused, one off by
    rounding renormalised (the JSON's ``renormalised`` says so).
    ``values``: one scalar value per key (default ``(1, -2, 3)`` repeated
    over the keys); dropmc forms the output ``o = sum_i b_i v_i`` from each
    returned row.

    Claims: ``attention.entry_mean`` ``E[b_i] = a_i``,
    ``attention.row_sum_mean`` ``E[R] = 1``, ``attention.row_sum_variance``
    ``Var R = (p/q) sum a_i^2``, ``attention.output_mean``
    ``E[o] = sum a_i v_i``, ``attention.output_variance``
    ``Var o = (p/q) sum a_i^2 v_i^2`` (400 000 draws each, two calls' rows
    per draw for the variances), and the rule ``attention.dropped_row``
    (every entry 0 or ``a_i/q`` within a few ulps, on 20 000 rows).
    ``samples`` caps every claim's draws; below a claim's minimum budget it
    is ``inconclusive``. ``attention.row_sum_pmf`` (the seed row's law of
    ``R``) is listed as skipped.
    """
    p = _check_rate(p)
    dtype_name = _dtype_name(dtype, "check_attention_dropout")
    if not callable(dropout):
        raise TypeError("dropout must be callable as dropout(A) on an (n, T) array of attention rows")
    samples, seed = _budget(samples, seed)
    row = _np.asarray(_input_row(_DEFAULT_A if a is None else a, "a"))
    if not _np.all(row > 0):
        raise ValueError("a must have positive entries (a softmax row; a zero entry cannot be told dropped from kept)")
    if values is None:
        # The default values, repeated over the keys of the caller's row.
        v = [_DEFAULT_VALUES[i % len(_DEFAULT_VALUES)] for i in range(row.size)]
    else:
        v = _input_row(values, "values")
        if len(v) != row.size:
            raise ValueError(f"values must have one entry per key: len(a) = {row.size}, got {len(v)}")
    dt = _np.dtype(dtype_name)
    if not _np.all(row.astype(dt) > 0):
        raise ValueError(f"a has an entry that rounds to 0 in {dtype_name}")

    def train(A):
        return _checked("dropout(A)", dropout(A), A.shape, dt)

    try:
        text, claims = _dropmc.check_attention(
            train, p, dtype_name, [float(x) for x in row], v, samples, seed,
        )
    except ValueError as e:
        raise ValueError(_python_words(str(e))) from None
    return Result(text, claims)
