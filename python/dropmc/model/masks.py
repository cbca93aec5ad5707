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
  elementwise forms are wrong for it;
* the product's trailing axes joined into the normalized one right after
  it (``(…, heads, head_dim) → (…, d)``) with ``m`` shared along some of
  them: the channels sharing one draw form a group (``mask = "groups"``,
  ``mask_groups`` the group id of each channel: for a mask of size 1 on
  ``head_dim``, the head index).

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
    groups: Optional[Tuple[int, ...]] = None

    @property
    def text(self) -> str:
        """One line: how the mask is shared, and that tokens sharing it are
        correlated."""
        what = {"token": "one draw per token, shared by its normalized channels",
                "groups": f"{len(set(self.groups or ()))} draws per token, each shared by a group of channels "
                          "(heads joined after the mask)"}.get(self.kind, "each normalized channel its own draw")
        out = f"{self.source} {self.mask_shape} on {self.value_shape}: {what}"
        if self.shared:
            out += (f"; shared along axes {list(self.shared)}: the tokens along them share one draw "
                    "(correlated)")
        return out

    def scaled_by_inverse_q(self) -> bool:
        q = 1.0 - self.p
        return q > 0 and abs(self.scale * q - 1.0) <= 1e-6


def mask_info(source: dict, d: int, tape=(), axis: int = -1) -> MaskInfo:
    """The :class:`MaskInfo` of a traced mask (``source``: the trace's
    record) read against a norm over ``d`` channels whose input the mask's
    value reaches through ``tape`` (:mod:`dropmc.model.paths`). Each draw gets an
    id; the ids are broadcast to the value's shape and replayed through the
    tape's layout steps: per row of the norm's input, ``d`` distinct ids is
    an elementwise mask, one id a token-level mask, else groups of channels
    (the same pattern in every row, or a ValueError); ``axis``: the norm's
    axis of its input (channels-first norms). An axis along which
    the ids do not change shares its draws (correlated tokens)."""
    import torch

    from .paths import replay

    out = tuple(source["out_shape"] or source["value_shape"])
    m = (1,) * (len(out) - len(source["mask_shape"])) + tuple(source["mask_shape"])
    ids = torch.arange(int(_np.prod(m)), dtype=torch.float64).reshape(m).expand(out).contiguous()
    ids = replay(tape, ids, layout_only=True).movedim(axis, -1)  # the norm's axis last
    if ids.dim() == 0 or ids.shape[-1] != d:
        raise ValueError(f"the mask's value reaches the norm as {tuple(ids.shape)}, not rows of {d} channels")
    rows = ids.reshape(-1, d).numpy()
    ranked = _np.sort(rows, axis=1)
    distinct = 1 + (_np.diff(ranked, axis=1) != 0).sum(1)
    groups = None
    if (distinct == d).all():
        kind = "elementwise"
    elif (distinct == 1).all():
        kind = "token"
    else:
        pattern = _np.unique(rows[0], return_inverse=True)[1]
        for row in rows[1:]:
            if not _np.array_equal(_np.unique(row, return_inverse=True)[1], pattern):
                raise ValueError("the mask's draws are shared by different channels in different rows of the norm")
        kind, groups = "groups", tuple(int(g) for g in pattern)
    shared = tuple(i for i in range(ids.dim() - 1) if ids.shape[i] > 1
                   and bool((ids.narrow(i, 0, 1) == ids).all()))
    return MaskInfo(kind, shared, tuple(source["mask_shape"]), out, source["kind"], float(source["scale"]),
                    float(source.get("p", 0.0)), groups)


def mask_groups(info: Optional[MaskInfo], d: int) -> Optional[_np.ndarray]:
    """The capture's ``mask_groups`` (normalized channel → group id; one
    Bernoulli draw per group): None for an elementwise mask, zeros for a
    token-level one."""
    if info is None or info.kind == "elementwise":
        return None
    if info.kind == "groups":
        return _np.asarray(info.groups, dtype=_np.int64)
    return _np.zeros(d, dtype=_np.int64)
