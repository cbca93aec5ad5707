"""``check_dropout``: dropmc's conformance claims on a user's ``forward(x, training)``
(re-exported as ``dropmc.check_dropout``; the conventions are in the package's docstring)."""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as _np

from .. import _dropmc
from .core import (
    Result,
    _changed,
    _check_rate,
    _check_samples,
    _checked,
    _dtype_name,
    _float32_out,
    _in_dtype,
    _input_row,
    _numpy_dtype,
    _snapshot,
    _written_back,
)


def check_dropout(
    forward: Callable[[Any, bool], Any],
    p: float,
    *,
    x=None,
    samples: Optional[int] = None,
    seed: int = 1,
    rng_state: Optional[Callable[[], Any]] = None,
    backward: Optional[Callable[[Any, Any, bool], Any]] = None,
    dtype=_np.float64,
    shared_axes=None,
    rounding: str = "any",
) -> Result:
    """Runs dropmc's conformance claims on ``forward`` at drop rate ``p``.

    ``forward(x, training)`` takes **two** arguments (the ``(n, d)`` array
    and the mode); ``backward(x, grad, training)`` three; ``rng_state()``
    none (see the module docs).

    ``x``: the input row (default: the Rust suite's configurations, per-unit
    moments on ``[0.5, -1.2, 3, 0, 2]`` and the exactness rules on fixed
    values with a signed zero, a subnormal and a huge value). ``samples``
    caps every claim's draws (default: each claim's own budget, 10^6 for the
    moments, 2*10^4 for the rules); a cap below a claim's minimum budget
    makes it ``inconclusive``. ``dtype``: float64, float32, float16 or
    bfloat16 (``"bfloat16"`` or ``ml_dtypes.bfloat16``; needs ``ml_dtypes``):
    the dtype of the arrays ``forward`` gets and must return. In float16
    and bfloat16 the survivors may be any of the dtype's roundings of
    ``x/q`` (``semantics.survivors_exact``), and each moment claim is
    judged against the interval of targets those roundings span (a
    composite null: the estimate is tested against the nearest admissible
    target), so a correctly rounded layer passes; when the real-arithmetic
    target would have failed (PyTorch's bfloat16 survivors are
    ``x*1.109375`` at ``p = 0.1``, -0.16 %), the claims' notes and a
    ``likely_causes`` line starting ``warning:`` state the bias in numbers.
    ``rounding="once"``: admit only ``x/q`` rounded once to the dtype, so
    anything beyond one rounding fails (the best a dtype allows).

    The layer is also called with one row at a time (``calls.one_row_mean``,
    ``E[z_k] = x_k`` on 50 000 one-row calls): a scale or mask that depends
    on the call's size or kept count fails there. The result's JSON field
    ``call_rows`` lists the call sizes used.

    ``shared_axes``: for a dropout whose mask is shared over some axes
    (``nn.Dropout1d/2d/3d``, Flax ``broadcast_dims``, Keras ``noise_shape``).
    ``x`` is then one sample of any shape (say ``(C, H, W)``), ``forward``
    gets arrays of shape ``(n, *x.shape)`` and ``shared_axes`` names the
    axes of that batched array the mask is shared over (``(2, 3)`` for
    ``nn.Dropout2d``; axis 0, the batch, cannot be shared). The mask-shape
    claims run instead of the elementwise ones (which assume one
    independent mask per unit and are listed as skipped): ``mask_shape.mean``
    ``E[z] = x``, ``mask_shape.shared_variance`` ``Var S_k = (p/q)(sum x)^2``
    and ``mask_shape.shared_zero_column`` ``P(group all zero) = p`` per group
    ``k`` of entries sharing a mask; and the semantics rules that hold for
    any mask shape (eval identity, eval draws nothing with ``rng_state``,
    survivors, input preserved, backward mask with ``backward``), on
    batches of ``x``'s shape; an omitted ``backward`` is unchecked as on the
    elementwise path. See ``docs/mask-shape.md``.
    """
    p = _check_rate(p)
    dtype_name = _dtype_name(dtype)
    if not callable(forward):
        raise TypeError("forward must be callable as forward(x, training)")
    if rounding not in ("any", "once"):
        raise ValueError(f'rounding must be "any" or "once", got {rounding!r}')
    if shared_axes is not None:
        return _check_shared_mask(forward, p, x, shared_axes, samples, seed, dtype_name, rng_state, backward)
    if backward is not None and backward is not False and not callable(backward):
        raise TypeError("backward must be callable as backward(x, grad, training), or False for a forward without one")
    if rng_state is not None and not callable(rng_state):
        raise TypeError("rng_state must be a zero-argument callable returning a snapshot")
    samples = _check_samples(samples)
    if int(seed) != seed or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    dt = _numpy_dtype(dtype)
    if x is None:
        moment_x, semantics_x = _dropmc.default_inputs(dtype_name)
    else:
        moment_x = semantics_x = _input_row(x, "x")
        if not _np.all(_np.isfinite(_np.asarray(moment_x).astype(dt))):
            raise ValueError(f"x overflows {dtype_name}")

    def train(X):
        seen = _in_dtype(X, dt)
        out = _checked("forward(x, True)", forward(seen, True), X.shape, dt)
        _written_back(X, seen)
        return _float32_out(out, dt)

    def evaluate(X):
        seen = _in_dtype(X, dt)
        before = _snapshot(rng_state) if rng_state is not None else None
        out = forward(seen, False)
        drew = _changed(before[1], _snapshot(rng_state, before)[0]) if rng_state is not None else None
        out = _checked("forward(x, False)", out, X.shape, dt)
        _written_back(X, seen)
        return _float32_out(out, dt), drew

    def train_and_backward(X, G):
        seen = _in_dtype(X, dt)
        out = _checked("forward(x, True)", forward(seen, True), X.shape, dt)
        grad = _checked("backward(x, grad, True)", backward(seen, _in_dtype(G, dt), True), X.shape, dt)
        _written_back(X, seen)
        return _float32_out(out, dt), _float32_out(grad, dt)

    text, claims = _dropmc.check_dropout(
        train,
        evaluate,
        train_and_backward if callable(backward) else None,
        p,
        dtype_name,
        moment_x,
        semantics_x,
        None if samples is None else int(samples),
        int(seed),
        rng_state is not None,
        rounding,
    )
    return _result_marking_backward(text, claims, backward)


def _result_marking_backward(text: str, claims: list, backward) -> Result:
    """The result, with ``semantics.backward_mask`` marked unchecked when no
    ``backward`` was given (``None``; ``False`` declares a forward without one)."""
    if backward is None:
        for c in claims:
            if c["id"] == "semantics.backward_mask" and c["verdict"] == "skipped":
                c["unchecked"] = "backward (pass backward=..., or backward=False for a forward without one)"
    return Result(text, claims)


def _shared_groups(shape: tuple, shared_axes) -> _np.ndarray:
    """Each entry's mask group for one sample of ``shape`` whose mask is
    shared over ``shared_axes`` (axes of the batched ``(n, *shape)`` array)."""
    try:
        axes = tuple(int(a) for a in shared_axes)
    except TypeError:
        raise TypeError("shared_axes must be a tuple of ints, e.g. (2, 3)") from None
    ndim = len(shape) + 1
    norm = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise ValueError(f"shared_axes: axis {a} is out of range for the batched array of {ndim} dimensions (n, *x.shape)")
        a %= ndim
        if a == 0:
            raise ValueError("shared_axes: axis 0 is the batch axis; dropmc needs a fresh mask per sample")
        norm.append(a)
    if len(set(norm)) != len(norm) or not norm:
        raise ValueError(f"shared_axes must name distinct axes, at least one, got {shared_axes!r}")
    group_shape = [1 if (i + 1) in norm else n for i, n in enumerate(shape)]
    ids = _np.arange(int(_np.prod(group_shape))).reshape(group_shape)
    return _np.broadcast_to(ids, shape).ravel()


def _check_shared_mask(forward, p, x, shared_axes, samples, seed, dtype_name, rng_state, backward) -> Result:
    """``check_dropout(..., shared_axes=...)``: the mask-shape claims and the
    semantics rules that hold for any mask shape (eval identity, eval draws
    nothing, survivors, input preserved, backward mask), each on batches of
    ``x``'s shape; what an omitted argument left unchecked is listed, as on
    the elementwise path."""
    if x is None:
        raise ValueError("shared_axes needs x: one sample of the shape your layer takes, e.g. np.ones((C, L))")
    if backward is not None and backward is not False and not callable(backward):
        raise TypeError("backward must be callable as backward(x, grad, training), or False for a forward without one")
    if rng_state is not None and not callable(rng_state):
        raise TypeError("rng_state must be a zero-argument callable returning a snapshot")
    sample = _np.asarray(x, dtype=_np.float64)
    if sample.ndim < 1 or sample.size == 0:
        raise ValueError(f"x must be a non-empty array, got shape {sample.shape}")
    if not _np.all(_np.isfinite(sample)):
        raise ValueError("x must be finite")
    samples = _check_samples(samples)
    if int(seed) != seed or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    dt = _numpy_dtype(dtype_name)
    if not _np.all(_np.isfinite(sample.astype(dt))):
        raise ValueError(f"x overflows {dtype_name}")
    shape = sample.shape
    groups = _shared_groups(shape, shared_axes)

    def shaped(X):
        """The batch as the layer takes it, ``(n, *x.shape)`` in its dtype."""
        return _in_dtype(X, dt).reshape((X.shape[0],) + shape)

    def flat(name, out, X, seen):
        out = _checked(name, out, seen.shape, dt)
        _written_back(X, seen.reshape(X.shape))
        return _np.ascontiguousarray(_float32_out(out, dt).reshape(X.shape[0], -1))

    def train(X):
        seen = shaped(X)
        return flat("forward(x, True)", forward(seen, True), X, seen)

    def evaluate(X):
        seen = shaped(X)
        before = _snapshot(rng_state) if rng_state is not None else None
        out = forward(seen, False)
        drew = _changed(before[1], _snapshot(rng_state, before)[0]) if rng_state is not None else None
        return flat("forward(x, False)", out, X, seen), drew

    def train_and_backward(X, G):
        seen = shaped(X)
        out = forward(seen, True)
        grad = backward(seen, _in_dtype(G, dt).reshape(seen.shape), True)
        return flat("forward(x, True)", out, X, seen), flat("backward(x, grad, True)", grad, X, seen)

    text, claims = _dropmc.check_mask_shape(
        train, evaluate, train_and_backward if callable(backward) else None,
        p, dtype_name, [float(v) for v in sample.ravel()], [int(g) for g in groups],
        None if samples is None else int(samples), int(seed), rng_state is not None,
    )
    return _result_marking_backward(text, claims, backward)
