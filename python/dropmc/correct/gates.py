"""Gated sites in :func:`dropmc.correct.correct`: ``norm(h + dropout(v) ⊙
g)`` with ``g`` a gate, a layer scale or a quotient the forward computes
(``dropout(v) * sigmoid(gate(x))``, ``γ ⊙ dropout(v)``, ``dropout(v) /
c``), issue 50.

Why the site is the ordinary one: ``m ⊙ v ⊙ g = m ⊙ (v ⊙ g)``, so with
``v' = v ⊙ g`` the norm sees ``h + m ⊙ v' / q`` and the per-site factor
holds with ``v'`` in place of ``v`` (discovery reads such a product as a
gate step of the site's tape, :meth:`dropmc.model.trace.Trace.gate_step`). What
the correction needs live is ``v'`` itself, and ``g`` is a tensor of the
forward (a new one each forward): it cannot be replayed from the tape, as
the layout steps are (:mod:`dropmc.correct.tapes`).

How: a :class:`_Follower` per gated site watches the ops of each eval
forward (a ``TorchFunctionMode`` the model's forward pre-hook enters and
its forward hook leaves, :class:`Following`) and follows the site's own
tensor through its tape, step by step: the dropout's output (in eval its
input itself, which the site's slot keeps), then each step's op — the
same function with the followed tensor at the step's position — whose
output becomes the followed tensor. After the last step it is ``v'``, as
the model computed it, with the forward's own ``g``. A step not seen (an
op the tape does not name, another branch) leaves ``v'`` unset, and the
norm's hook raises; :func:`dropmc.correct.correct`'s rehearsal forward
turns that into a ValueError naming the site. The cost: every op of the
eval forward passes the mode (a Python call each) while the model has a
gated site; training is untouched (nothing entered).
"""

from __future__ import annotations

from typing import List, Optional, Tuple

from ..model.paths import GATES

__all__ = ["live_steps", "Following"]


def live_steps(tape) -> Optional[Tuple[tuple, ...]]:
    """``((func, position), ...)`` of a site's tape when its only steps
    with a tensor argument besides the followed one are gate steps
    (:data:`dropmc.model.paths.GATES`) — then the site is corrected by following
    (module docs); None when the tape has no gate step or another step
    with a tensor argument."""
    import torch

    gated = False
    for func, args, kwargs, pos in tape:
        others = [a for i, a in enumerate(args) if i != pos] + list(kwargs.values())
        if any(isinstance(a, torch.Tensor) for a in others):
            if getattr(func, "__name__", "") not in GATES:
                return None
            gated = True
    return tuple((func, pos) for func, _, _, pos in tape) if gated else None


class _Follower:
    """One gated site's ``v'`` in the current eval forward (module docs);
    takes a :class:`dropmc.correct.hooks._Slot`'s place in the site's norm
    hook (``take``, ``v``)."""

    def __init__(self, site, slot, steps) -> None:
        self.site, self.slot, self.steps = site, slot, tuple(steps)
        self.reset()

    def __getstate__(self):
        return {"site": self.site, "slot": self.slot, "steps": self.steps}

    def __setstate__(self, state):
        self.__init__(state["site"], state["slot"], state["steps"])

    def reset(self) -> None:
        self.current, self.k, self.v = None, 0, None

    def see(self, func, args, out) -> None:
        if self.k >= len(self.steps):
            return
        if self.current is None:
            if self.slot.v is None:
                return
            self.current = self.slot.v  # an eval dropout returns its input itself
        f, pos = self.steps[self.k]
        if func is f and pos < len(args) and _same_view(args[pos], self.current):
            self.current, self.k = out, self.k + 1
            if self.k == len(self.steps):
                self.v = out

    def take(self, site, z, steps=()):
        v = self.v
        if v is None or v.shape != z.shape:
            raise RuntimeError(f"dropmc.correct: site {site!r}: the gated path from the dropout to the norm was "
                               f"not followed in this forward (step {self.k + 1} of {len(self.steps)} not seen)")
        self.current, self.k, self.v = None, 0, None  # the next call of the site starts afresh
        return v.detach() if v.requires_grad else v


def _same_view(a, b) -> bool:
    """``a`` is ``b``, or the same view of the same memory (the slot keeps a
    detached alias of the dropout's input when grad is on)."""
    import torch

    return a is b or (isinstance(a, torch.Tensor) and a.data_ptr() == b.data_ptr() and a.dtype == b.dtype
                      and a.shape == b.shape and a.stride() == b.stride())


def _mode_class():
    from torch.overrides import TorchFunctionMode

    class _FollowMode(TorchFunctionMode):
        def __init__(self, followers: List[_Follower]) -> None:
            super().__init__()
            self.followers = followers

        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for f in self.followers:
                f.see(func, args, out)
            return out

    return _FollowMode


class Following:
    """The followers of a corrected model's gated sites and the mode that
    feeds them: :meth:`enter` is the model's forward pre-hook, :meth:`leave`
    its forward hook (always called), around each eval forward (module
    docs); in training nothing is entered."""

    def __init__(self) -> None:
        self.followers: List[_Follower] = []
        self.mode = None

    def __getstate__(self):
        return {"followers": self.followers}

    def __setstate__(self, state):
        self.followers, self.mode = state["followers"], None

    def follower(self, site, slot, steps) -> _Follower:
        f = _Follower(site, slot, steps)
        self.followers.append(f)
        return f

    def enter(self, module, args):
        if module.training:
            return None
        for f in self.followers:
            f.reset()
        self.mode = _mode_class()(self.followers)
        self.mode.__enter__()
        return None

    def leave(self, module, args, out):
        mode, self.mode = self.mode, None
        if mode is not None:
            mode.__exit__(None, None, None)
        return None
