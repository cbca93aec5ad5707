"""Which torch ops only rearrange a tensor's entries: the layout *steps*
of the data-flow discovery (:mod:`dropmc.model.trace`).

A dropout→norm site's closed forms hold per row of the norm: the row's
``d`` entries are entries of the dropout's output, each with its own mask
draw (or draws shared as :mod:`dropmc.model.masks` reads them). Any op that only
moves, selects or repeats entries keeps that true, whichever axis it
touches — the norm's rows are what the capture replays the steps to:

* layout: ``view``/``reshape``/``flatten``/``unflatten``/``squeeze``/
  ``unsqueeze``/``view_as``/``reshape_as`` (the same entries, any last
  size: heads joined or split), ``expand`` (entries repeated: the draws'
  sharing is read by :func:`dropmc.model.masks.mask_info` on the replayed draw
  ids; ``repeat``/``tile``/``repeat_interleave`` likewise),
  ``transpose``/``permute``/``movedim``/``swapaxes`` (channels-first
  ↔ last included), ``roll`` (Swin's shifted windows; window partitions
  are views and permutes);
* values unchanged: ``contiguous``/``clone``/``detach`` and the dtype
  casts (``to``/``float``/``half``/…);
* selection: indexing (``x[:, :h]``, a token or channel slice).

Nothing here asks which axis the norm normalizes: the draw-id replay of
:func:`dropmc.model.masks.mask_info` reads, per row of the norm's input, which
draws it holds (distinct: elementwise; one: token-level; else groups).

Each such op on the path is kept as a *step* of a tape
(``(func, args, kwargs, position)``: the op with the traced tensor at
``args[position]``); :func:`replay` applies a tape to another tensor of the
traced one's shape (the capture applies it to the eval-mode ``v``).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

__all__ = ["CASTS", "GATES", "step_of", "replay", "op_label", "MAX_LABELS"]

#: Ops that keep every value (a cast rounds, which the audit reads as the
#: cast's own input: the closed forms are evaluated in float64).
CASTS = {"to", "float", "double", "half", "bfloat16", "type_as", "contiguous", "clone", "detach",
         "detach_", "type", "cpu", "cuda"}
_SHAPE = {"view", "reshape", "flatten", "unflatten", "squeeze", "unsqueeze", "view_as", "reshape_as",
          "expand", "expand_as"}
_AXES = {"transpose", "swapaxes", "swapdims", "permute", "movedim", "moveaxis", "t"}
_INDEX = {"__getitem__"}
#: Ops that repeat entries (the draws' sharing is read on the replayed ids).
_REPEAT = {"repeat", "tile", "repeat_interleave"}

#: Op labels kept per dropout on a tensor's path (the first ones: the op
#: that stops a path is the first that is not a layout step; past a linear
#: layer, the next one that is not linear — SEW-D's relative-position path
#: reaches its bmm 10 ops after its key projection).
MAX_LABELS = 32


def _rearranges(name: str, x: torch.Tensor, out: torch.Tensor) -> Optional[str]:
    """None when ``out = name(x, ...)`` only moves, selects or repeats
    entries of ``x`` (every entry of ``out`` is one entry of ``x``); else
    why not (a short phrase)."""
    if x.dim() == 0 or out.dim() == 0:
        return "a scalar"
    if name in _SHAPE and name not in ("expand", "expand_as") and out.numel() != x.numel():
        return f"{name} changes the number of entries ({tuple(x.shape)} -> {tuple(out.shape)})"
    if name in CASTS and out.shape != x.shape:
        return f"{name} changes the shape"
    return None


def step_of(name: str, func, args, kwargs, out) -> Tuple[Optional[tuple], Optional[str]]:
    """``(step, None)`` when ``func(*args, **kwargs) = out`` is an identity
    per token of its first argument (module docs), ``(None, why)`` when it
    is one of the layout ops but mixes the normalized axis, ``(None,
    None)`` when it is no layout op at all."""
    if name not in _SHAPE | _AXES | _INDEX | _REPEAT | CASTS | {"roll"}:
        return None, None
    if not args or not isinstance(args[0], torch.Tensor) or not isinstance(out, torch.Tensor):
        return None, None
    why = _rearranges(name, args[0], out)
    if why is not None:
        return None, why
    return (func, tuple(args), dict(kwargs), 0), None


#: A gate step's op (:meth:`dropmc.model.trace.Trace.gate_step`): ``v ⊙ g``, ``v / g``.
GATES = {"mul", "__mul__", "__rmul__", "mul_", "div", "__truediv__", "div_", "true_divide"}


def replay(tape, x: torch.Tensor, layout_only: bool = False) -> torch.Tensor:
    """``x`` through the tape's steps (module docs); ``x`` has the shape of
    the tensor the first step was traced on. ``layout_only``: the gate
    steps (:data:`GATES`) left out (a mask's draw ids follow the layout
    only)."""
    for func, args, kwargs, pos in tape:
        name = getattr(func, "__name__", "")
        if name in ("to", "float", "double", "half", "bfloat16", "type_as", "type"):
            continue  # the capture stays in float64
        if layout_only and name in GATES:
            continue
        a = list(args)
        a[pos] = x
        x = func(*a, **kwargs)
    return x


def op_label(name: str, owner: str) -> str:
    """A path's label for one op: ``linear:<module>`` for a linear layer,
    ``<op>`` (``<op>:<module>`` inside a module) for the rest."""
    if name == "linear":
        return f"linear:{owner}" if owner else "linear"
    return f"{name}:{owner}" if owner and name in ("matmul", "bmm", "einsum", "conv1d", "conv2d") else name
