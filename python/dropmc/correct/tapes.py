"""The steps between a dropout's output and its norm's input, replayed on
the captured ``v`` by :func:`dropmc.correct.correct`.

Discovery records, per site, the identity-per-token steps from the
dropout's output (or mask product) to the norm's input
(:attr:`dropmc.model.discovery.Site.tape`: transposes, permutes, reshapes that
keep the normalized axis). The norm sees ``v`` *after* them: in ESMFold's
``tri_att_end`` the pair state is transposed (``x.transpose(-2, -3)``)
before its LayerNorm, so token ``(i, j)`` of the norm is token ``(j, i)``
of the dropout's ``v``. Square ``L × L`` shapes make the untransposed ``v``
pass every shape check while pairing each token's ``x`` with another
token's ``v``: the steps must be replayed.

:func:`light_tape` keeps what the replay needs and nothing of the traced
forward's tensors (the corrected model pickles and holds no activation):
casts are dropped (the factor is computed in the statistics dtype anyway)
and every other step keeps its function and non-tensor arguments (a
``view``/``reshape`` with its leading size freed: :func:`_free_leading`);
discovery already leaves the traced input out of the stored steps. A step with another
tensor argument has no light form: the site is refused with that reason.
"""

from __future__ import annotations

from typing import Optional, Tuple

_CASTS = ("to", "float", "double", "half", "bfloat16", "type_as", "type")


def light_tape(tape) -> Tuple[Optional[tuple], Optional[str]]:
    """``(steps, None)``: the replayable steps (``(func, args with the
    input left None, kwargs, position)``), or ``(None, why)``."""
    import torch

    out = []
    for func, args, kwargs, pos in tape:
        name = getattr(func, "__name__", "")
        if name in _CASTS:
            continue
        others = [a for i, a in enumerate(args) if i != pos] + list(kwargs.values())
        if any(isinstance(a, torch.Tensor) for a in others):
            return None, (f"the path from the dropout to the norm goes through {name}() with a tensor "
                          "argument, which correct does not replay")
        args = _free_leading(name, args, pos)
        out.append((func, tuple(None if i == pos else a for i, a in enumerate(args)), dict(kwargs), pos))
    return tuple(out), None


def _free_leading(name: str, args: tuple, pos: int) -> tuple:
    """A ``view``/``reshape`` to sizes with no ``-1``: its leading size as
    ``-1``, so the step replays at another batch size (the traced sizes
    are the example inputs'). A layout whose batch is not leading then
    gives a shape the norm's input does not have, which
    :meth:`dropmc.correct.hooks._Slot.take` refuses (never a silent
    mismatch)."""
    if name not in ("view", "reshape") or pos != 0 or len(args) < 2:
        return args
    packed = len(args) == 2 and isinstance(args[1], (tuple, list))
    sizes = list(args[1]) if packed else list(args[1:])
    if not sizes or not all(isinstance(n, int) and not isinstance(n, bool) for n in sizes) or -1 in sizes:
        return args
    sizes[0] = -1
    return (args[0], tuple(sizes)) if packed else (args[0], *sizes)


def replay(steps, v):
    """``v`` through the light steps (``v`` as the dropout saw it)."""
    for func, args, kwargs, pos in steps:
        a = list(args)
        a[pos] = v
        v = func(*a, **kwargs)
    return v
