"""What dropmc's torch adapters share: tensors to and from numpy, and
torch at one intra-op thread (:func:`one_thread`)."""

from __future__ import annotations

import contextlib as _contextlib
import itertools as _itertools
from typing import Optional

import numpy as _np
import torch as _torch


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


def _device_of(module: _torch.nn.Module) -> "_torch.device":
    """The device of the module's first parameter or buffer (CPU for none)."""
    for t in _itertools.chain(module.parameters(), module.buffers()):
        return t.device
    return _torch.device("cpu")


def _dtype_of(module: _torch.nn.Module, what: str, cast_hint: str) -> Optional[str]:
    """The floating dtype of the module's parameters and buffers, as numpy's
    name, when it is float64 or float32; ``None`` for a module without
    floating tensors. Any other floating dtype (float16, bfloat16) is a
    TypeError naming the argument ``what``: these checks' tolerances are
    derived for float32/float64 rounding, so a half-precision module is
    refused rather than checked in float64 as if it were exact;
    ``cast_hint`` says how to check its formula in float32 instead."""
    for t in _itertools.chain(module.parameters(), module.buffers()):
        if t.is_floating_point():
            name = {_torch.float64: "float64", _torch.float32: "float32"}.get(t.dtype)
            if name is None:
                raise TypeError(
                    f"{what} ({type(module).__name__}) has {str(t.dtype).replace('torch.', '')} parameters: this "
                    "check runs in float32 or float64 (its tolerances are derived for their rounding), so a "
                    f"half-precision module is not checked; {cast_hint}"
                )
            return name
    return None
