"""How a mask-product dropout's mask is shared (issue 40 item 3).

A mask product ``x · m`` (``m`` from ``dropout(ones(shape))`` or drawn with
``torch.rand``/``bernoulli`` and scaled by ``1/q``) broadcasts ``m`` over
the axes where ``m`` has size 1. Read against the norm's input, whose last
axis (length ``d``) the norm normalizes:

* ``m`` has the full last axis: each normalized channel draws its own
  Bernoulli — per token the elementwise closed forms hold
  (``mask = "elementwise"``, ``mask_groups`` absent);
* ``m`` has size 1 on the last axis: one draw per token, shared by all
  its channels (``mask = "token"``, ``mask_groups`` all zeros): per token
  ``E[norm(h + m v)] = q·norm(h + v/q) + p·norm(h)`` exactly, and the
  elementwise forms are wrong for it.

In both cases the axes of ``x`` other than the last where ``m`` has size 1
share one draw: the tokens along them are correlated (the gap's standard
error must not treat them as independent); :attr:`MaskInfo.text` says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as _np

__all__ = ["MaskInfo", "mask_info", "mask_groups"]


@dataclass(frozen=True)
class MaskInfo:
    """``kind`` (``elementwise``/``token``), ``shared`` (the axes of the
    masked tensor, other than the last, along which one draw is shared),
    ``shape`` (the mask's and the masked tensor's), ``source`` (``dropout
    of ones`` or ``rand mask``), ``scale`` (the kept entries' value) and
    ``p``."""

    kind: str
    shared: Tuple[int, ...]
    mask_shape: Tuple[int, ...]
    value_shape: Tuple[int, ...]
    source: str
    scale: float
    p: float = 0.0

    @property
    def text(self) -> str:
        """One line: how the mask is shared, and that tokens sharing it are
        correlated."""
        what = ("one draw per token, shared by its normalized channels" if self.kind == "token"
                else "each normalized channel its own draw")
        out = f"{self.source} {self.mask_shape} on {self.value_shape}: {what}"
        if self.shared:
            out += (f"; shared along axes {list(self.shared)}: the tokens along them share one draw "
                    "(correlated)")
        return out

    def scaled_by_inverse_q(self) -> bool:
        q = 1.0 - self.p
        return q > 0 and abs(self.scale * q - 1.0) <= 1e-6


def mask_info(source: dict, d: int) -> MaskInfo:
    """The :class:`MaskInfo` of a traced mask product (``source``: the
    trace's record) read against a norm over ``d`` channels."""
    out = source["out_shape"] or source["value_shape"]
    m = (1,) * (len(out) - len(source["mask_shape"])) + tuple(source["mask_shape"])
    shared = tuple(i for i in range(len(out) - 1) if m[i] == 1 and out[i] > 1)
    kind = "token" if m[-1] == 1 and d > 1 else "elementwise"
    return MaskInfo(kind, shared, tuple(source["mask_shape"]), tuple(out), source["kind"],
                    float(source["scale"]), float(source.get("p", 0.0)))


def mask_groups(info: Optional[MaskInfo], d: int) -> Optional[_np.ndarray]:
    """The capture's ``mask_groups`` (normalized channel → group id; one
    Bernoulli draw per group): None for an elementwise mask, zeros for a
    token-level one."""
    if info is None or info.kind == "elementwise":
        return None
    return _np.zeros(d, dtype=_np.int64)
