"""Which torch ops keep a tensor's rows (its last axis) intact: the
*identity per token* of the data-flow discovery (:mod:`dropmc.trace`).

A dropout→norm site's closed forms hold per token: the norm normalizes
the last axis, and the dropout's output must reach it with every row of
``d`` channels kept as one row (the tokens may be reordered, regrouped or
selected). These ops do that:

* layout-only ops whose output keeps the last axis: ``view``/``reshape``/
  ``flatten``/``unflatten``/``squeeze``/``unsqueeze``/``view_as``/
  ``reshape_as`` whose output's last size is the input's (row-major
  order keeps every row of ``d`` contiguous elements one row), and
  ``transpose``/``permute``/``movedim``/``swapaxes`` that leave the last
  axis last;
* token permutations: ``roll`` over axes other than the last (Swin's
  shifted windows; the window partition and reverse are views and
  permutes);
* values unchanged: ``contiguous``/``clone``/``detach`` and the dtype
  casts (``to``/``float``/``half``/…);
* a selection of whole tokens: indexing (``x[:, :h]``) that leaves the
  last axis whole.

A reshape whose last size differs (splitting heads, joining tokens into
one row) mixes the normalized axis: not an identity per token.

Each such op on the path is kept as a *step* of a tape
(``(func, args, kwargs, position)``: the op with the traced tensor at
``args[position]``); :func:`replay` applies a tape to another tensor of the
traced one's shape (the capture applies it to the eval-mode ``v``).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

__all__ = ["CASTS", "step_of", "replay", "op_label", "MAX_LABELS"]

#: Ops that keep every value (a cast rounds, which the audit reads as the
#: cast's own input: the closed forms are evaluated in float64).
CASTS = {"to", "float", "double", "half", "bfloat16", "type_as", "contiguous", "clone", "detach",
         "detach_", "type", "cpu", "cuda"}
_SHAPE = {"view", "reshape", "flatten", "unflatten", "squeeze", "unsqueeze", "view_as", "reshape_as",
          "expand", "expand_as"}
_AXES = {"transpose", "swapaxes", "swapdims", "permute", "movedim", "moveaxis", "t"}
_INDEX = {"__getitem__"}

#: Op labels kept per dropout on a tensor's path (the first ones: the op
#: that stops a path is the first that is not an identity per token).
MAX_LABELS = 8


def _last_axis_kept(name: str, x: torch.Tensor, out: torch.Tensor, args, kwargs) -> Optional[str]:
    """None when ``name(x, ...) = out`` keeps every row of ``x`` a row of
    ``out``; else why not (a short phrase)."""
    n = x.dim()
    if n == 0 or out.dim() == 0:
        return "a scalar"
    last = n - 1
    if name in _SHAPE:
        if out.shape[-1] != x.shape[-1] or (name not in ("expand", "expand_as") and out.numel() != x.numel()):
            return f"{name} mixes the normalized axis ({tuple(x.shape)} -> {tuple(out.shape)})"
        return None
    if name in _AXES:
        if name == "t":
            return None if n < 2 else "t moves the normalized axis"
        rest = list(args[1:]) + list(kwargs.values())
        if name == "permute":
            dims = rest[0] if len(rest) == 1 and isinstance(rest[0], (list, tuple)) else rest
            return None if int(dims[-1]) % n == last else "permute moves the normalized axis"
        axes = []
        for a in rest:
            axes += list(a) if isinstance(a, (list, tuple)) else [a]
        if name in ("movedim", "moveaxis"):
            src = rest[0] if isinstance(rest[0], (list, tuple)) else [rest[0]]
            dst = rest[1] if isinstance(rest[1], (list, tuple)) else [rest[1]]
            ok = all(int(s) % n != last and int(t) % n != last for s, t in zip(src, dst))
        else:
            ok = all(int(a) % n != last for a in axes)
        return None if ok else f"{name} moves the normalized axis"
    if name == "roll":
        dims = kwargs.get("dims", args[2] if len(args) > 2 else None)
        if dims is None:
            return "roll over the flattened tensor mixes the normalized axis"
        dims = list(dims) if isinstance(dims, (list, tuple)) else [dims]
        return None if all(int(a) % n != last for a in dims) else "roll along the normalized axis"
    if name in _INDEX:
        if out.shape[-1] != x.shape[-1]:
            return "indexing selects channels of the normalized axis"
        idx = args[1] if len(args) > 1 else None
        idx = idx if isinstance(idx, tuple) else (idx,)
        whole = len(idx) < n or (isinstance(idx[n - 1], slice) and idx[n - 1] == slice(None))
        if not whole or any(i is Ellipsis or i is None or isinstance(i, torch.Tensor) and i.dtype == torch.bool
                            and i.dim() == n for i in idx):
            return "indexing that may touch the normalized axis"
        return None
    if name in CASTS:
        return None if out.shape == x.shape else f"{name} changes the shape"
    return "not an identity per token"


def step_of(name: str, func, args, kwargs, out) -> Tuple[Optional[tuple], Optional[str]]:
    """``(step, None)`` when ``func(*args, **kwargs) = out`` is an identity
    per token of its first argument (module docs), ``(None, why)`` when it
    is one of the layout ops but mixes the normalized axis, ``(None,
    None)`` when it is no layout op at all."""
    if name not in _SHAPE | _AXES | _INDEX | CASTS | {"roll"}:
        return None, None
    if not args or not isinstance(args[0], torch.Tensor) or not isinstance(out, torch.Tensor):
        return None, None
    why = _last_axis_kept(name, args[0], out, args, kwargs)
    if why is not None:
        return None, why
    return (func, tuple(args), dict(kwargs), 0), None


def replay(tape, x: torch.Tensor) -> torch.Tensor:
    """``x`` through the tape's steps (module docs); ``x`` has the shape of
    the tensor the first step was traced on."""
    for func, args, kwargs, pos in tape:
        if getattr(func, "__name__", "") in ("to", "float", "double", "half", "bfloat16", "type_as", "type"):
            continue  # the capture stays in float64
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
