"""The hooks :func:`dropmc.correct.correct` installs, as module-level
callable classes (no closures), so that a corrected model pickles
(``torch.save``/``torch.load``), deep-copies (each copy's hooks share that
copy's slots, not the original's) and traces like any other model.

* :class:`_KeepInputs` — an ``nn.Dropout``'s forward pre-hook: in eval mode
  keeps its input ``v`` in the :class:`_Slot` of this call.
* :class:`_Scope` — a functional ``F.dropout`` call (``owner:dropout#k``,
  ``dropout_add``-style helpers included): the owner module's forward
  pre-hook enters a ``TorchFunctionMode`` that keeps the input of each
  ``F.dropout`` made directly in the owner's forward (calls made inside
  its child modules are the children's own: a pre/forward hook on each
  direct child counts the depth), and the owner's forward hook leaves it.
  The mode runs only during the owner's eval forward; in training nothing
  is entered.
* :class:`_PerCall` — a norm's forward hook: in eval mode hands the call to
  its site hook (:class:`_LayerNormSite`, :class:`_RmsNormSite`,
  :class:`_CompoundSecond`, :class:`dropmc.correct.network.NetworkSite`).
  Where every site hook of the norm reads only its call's input and output,
  :func:`replace_forward` runs it from the module's instance ``forward``
  (:class:`_CorrectedForward`) instead: no hook on the module, so no
  slow path in ``nn.Module.__call__``.
* :class:`_FreshForward` — the model's forward pre-hook: call counters
  restart and stale inputs are dropped (a scope left open by a forward that
  raised is closed).

A plain ``nn.Dropout`` / ``nn.LayerNorm`` gets no hook: :mod:`dropmc.correct.fast`
swaps its class and calls :class:`_KeepInputs` / the site hook (its
``fused`` method, given the norm's own ``rstd``) from its ``forward``.

A slot is read, not consumed, by its norms: one dropout call feeding
several norms (ESMFold's trunk) is each norm's own site, all reading the
same ``v``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from . import forms as _forms
from . import tapes as _tapes


class _Slot:
    """The latest eval-mode input of one dropout call."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.v = None

    def take(self, site, z, steps=()):
        """``v`` for the norm input ``z`` of ``site``, through the site's
        ``steps`` (:mod:`dropmc.correct.tapes`)."""
        v = self.v
        if v is None:
            raise RuntimeError(f"dropmc.correct: site {site!r}: the norm ran without its dropout "
                               "having run first in this forward (is the site right?)")
        if steps:
            v = _tapes.replay(steps, v)
        if v.shape != z.shape:
            raise RuntimeError(f"dropmc.correct: site {site!r}: the dropout's input {tuple(v.shape)} "
                               f"and the norm's input {tuple(z.shape)} differ in shape")
        return v


class _Calls:
    """The call index of a hooked module (or of an owner's functional
    dropouts) within one forward: its ``k``-th call (``name#k``) is ``k``
    modulo ``n``, the calls per forward the discovery forward made (1 for
    module-named sites), so the index stays right even when the model's
    own forward, which resets the count, is not the entry point."""

    def __init__(self, n: int) -> None:
        self.n, self.count = max(int(n), 1), 0

    def next(self) -> int:
        k = self.count % self.n
        self.count += 1
        return k


def _kept(v):
    """``v`` as kept for the norm: detached only when it carries a graph
    (under ``torch.no_grad()`` it does not, and a detach is one op more)."""
    return v.detach() if v.requires_grad else v


class _KeepInputs:
    """An ``nn.Dropout``'s pre-hook: in eval mode keeps its input ``v`` for
    the call whose index has a site."""

    def __init__(self, calls: _Calls, slots: Dict[int, _Slot]) -> None:
        self.calls, self.slots = calls, slots

    def __call__(self, module, args):
        return self.keep(module, args[0])

    def keep(self, module, v):
        if module.training:
            return None
        slot = self.slots.get(self.calls.next())
        if slot is not None:
            slot.v = _kept(v)
        return None


class _KeepOutputs(_KeepInputs):
    """A gated site's module's forward hook: in eval mode keeps its output
    ``v ⊙ g`` (:func:`dropmc.model.discovery._gate_capture`) for the call whose
    index has a site."""

    def __call__(self, module, args, out):
        return self.keep(module, out)


class _Scope:
    """The functional dropout calls of one owner module: ``calls`` counts
    the ``F.dropout`` calls made directly in its forward, ``slots`` the
    sites' calls by index; ``depth`` (child modules running) and ``mode``
    (the capture mode while the owner's eval forward runs) are transient."""

    def __init__(self, calls: _Calls, slots: Dict[int, _Slot]) -> None:
        self.calls, self.slots = calls, slots
        self.depth, self.mode, self.open = 0, None, 0

    def __getstate__(self):
        return {"calls": self.calls, "slots": self.slots}

    def __setstate__(self, state):
        self.__init__(state["calls"], state["slots"])

    def enter(self) -> None:
        self.open += 1
        if self.mode is None:
            self.mode = _CaptureMode(self)
            self.mode.__enter__()

    def leave(self) -> None:
        self.open -= 1
        if self.open <= 0 and self.mode is not None:
            mode, self.mode, self.open, self.depth = self.mode, None, 0, 0
            mode.__exit__(None, None, None)

    def reset(self) -> None:
        """Closes a scope a raising forward left open (only when its mode is
        the innermost one, as it is then)."""
        if self.mode is not None:
            stack = torch._C._len_torch_function_stack()
            if stack and torch._C._get_function_stack_at(stack - 1) is self.mode:
                self.mode.__exit__(None, None, None)
        self.depth, self.mode, self.open = 0, None, 0


class _CaptureMode(TorchFunctionMode):
    """Keeps the input of each ``F.dropout`` call a :class:`_Scope`'s owner
    makes directly (``depth`` 0) in the slot of that call's index."""

    def __init__(self, scope: _Scope) -> None:
        super().__init__()
        self.scope = scope

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        scope = self.scope
        if func is F.dropout and scope.depth == 0:
            slot = scope.slots.get(scope.calls.next())
            if slot is not None:
                slot.v = _kept(args[0] if args else kwargs["input"])
        return func(*args, **kwargs)


class _ScopeHook:
    """A hook of a :class:`_Scope`: ``enter``/``leave`` on the owner (pre-
    and forward hook), ``down``/``up`` on each direct child (its calls are
    not the owner's). In training mode nothing happens."""

    def __init__(self, scope: _Scope, action: str) -> None:
        self.scope, self.action = scope, action

    def __call__(self, module, *rest):
        scope = self.scope
        if self.action == "enter":
            if not module.training:
                scope.enter()
        elif self.action == "leave":
            if scope.mode is not None:
                scope.leave()
        elif scope.mode is not None:
            scope.depth += 1 if self.action == "down" else -1
        return None


class _PerCall:
    """A norm's forward hook: in eval mode, the site hook of this call's
    index (none: the output as it is)."""

    def __init__(self, calls: _Calls, hooks: Dict[int, Any]) -> None:
        self.calls, self.hooks = calls, hooks

    def __call__(self, module, args, out):
        if module.training:
            return None
        site_hook = self.hooks.get(self.calls.next())
        return None if site_hook is None else site_hook(module, args, out)


class _OwnForward:
    """A norm module's own, uncorrected forward: the instance ``forward`` it
    had before :func:`correct` (a patched one), else its class's. Set as
    the module's ``_dropmc_own_forward`` (:func:`dropmc.model.norms.recognize_norm`
    reads it) while :class:`_CorrectedForward` is its ``forward``."""

    def __init__(self, module, original=None) -> None:
        self.module, self.original = module, original

    def __call__(self, *args, **kwargs):
        if self.original is not None:
            return self.original(*args, **kwargs)
        return type(self.module).forward(self.module, *args, **kwargs)


class _CorrectedForward:
    """A norm's forward, set as the module's instance attribute ``forward``
    in place of a forward hook (:func:`replace_forward`): training mode,
    or a call whose index has no site, is the own forward itself (bit for
    bit); in eval the site hook of the call's index (:class:`_PerCall`'s
    counting) corrects its output — a network norm by its own call on the
    scaled input (``forward``: :meth:`dropmc.correct.network.NetworkSite.forward`).
    Module hooks run around it as around any forward: pre-hooks see the
    input as given, forward hooks (the user's, registered before or after
    ``correct``) the corrected output. Without a hook on the module,
    ``nn.Module.__call__`` keeps its fast path."""

    def __init__(self, per_call: _PerCall, own: _OwnForward) -> None:
        self.per_call, self.own = per_call, own

    def __call__(self, *args, **kwargs):
        own = self.own
        module = own.module
        if module.training:
            return own(*args, **kwargs)
        per_call = self.per_call
        hook = per_call.hooks.get(per_call.calls.next())
        if hook is None:
            return own(*args, **kwargs)
        run = getattr(hook, "forward", None)
        if run is not None:
            return run(own, args[0], args[1:], kwargs)
        out = own(*args, **kwargs)
        fixed = hook(module, args, out)
        return out if fixed is None else fixed


def _forward_safe(hooks: Dict[int, Any]) -> bool:
    """Whether a replaced forward can run every site hook: each says so
    (``in_forward``) when it reads only its call's input and output (a
    token-level mask's calls the norm's forward again: it keeps the
    forward hook)."""
    return all(getattr(h, "in_forward", False) for h in hooks.values())


def replace_forward(correction, module, per_call: _PerCall) -> bool:
    """Corrects ``module`` through :class:`_CorrectedForward` as its
    instance ``forward`` (recorded in ``correction``: ``uncorrect`` restores
    the forward it had) when every site hook of it can run there; else
    False (the caller hooks it)."""
    if not _forward_safe(per_call.hooks):
        return False
    original = module.__dict__.get("forward")
    own = _OwnForward(module, original)
    correction._add(module, "_dropmc_own_forward", own)
    if original is None:
        correction._add(module, "forward", _CorrectedForward(per_call, own))
    else:
        correction._set(module, "forward", _CorrectedForward(per_call, own))
    return True


class _CompoundState:
    """What a compound site's LN1 leaves for LN2: ``c1``, ``S = mean γ1²
    x²`` and ``σ² + ε1`` per token."""

    def __init__(self) -> None:
        self.c1 = self.s = self.spread = None

    def keep(self, x, c1, ln1) -> None:
        dt = _forms._stats_dtype(x)
        xx = x.to(dt)
        gamma = ln1.gamma()
        g2 = 1.0 if gamma is None else gamma.to(dt).square()
        self.s = (g2 * xx.square()).mean(dim=-1, keepdim=True)
        self.spread = xx.var(dim=-1, unbiased=False, keepdim=True) + ln1.eps(x)
        self.c1 = c1


class _LayerNormSite:
    """A LayerNorm call's correction: ``β + c (LN(x) − β)``, ``c`` from the
    norm's input ``x`` and the dropout's input ``v``; a compound site's LN1
    keeps its pieces in ``state``."""

    in_forward = True  # runs in a replaced forward (replace_forward)

    steps: tuple = ()  # the site's steps from the dropout to the norm (set by correct)

    def __init__(self, site, slot: _Slot, p: float, params, order: int = 1,
                 state: Optional[_CompoundState] = None) -> None:
        self.site, self.slot, self.p, self.params, self.order, self.state = site, slot, p, params, order, state

    def __call__(self, module, args, out):
        x = args[0]
        v = self.slot.take(self.site, x, self.steps)
        axis = self.params.axis  # a channels-first norm: its rows moved last (dropmc.correct.forms._last)
        x, v, out = _forms._last(axis, x, v, out)
        eps = self.params.eps(x)
        if self.order == 2:
            return _forms._back(axis, _forms._second_order(v, x, self.p, True, eps, self.params, out))
        return _forms._back(axis, self._apply(x, _forms._factor(v, x, self.p, True, eps), out))

    def fused(self, x, out, rstd):
        """The same correction given the norm's own output and ``rstd``
        (:class:`dropmc.correct.fast._CorrectedLayerNorm`): ``rstd`` is
        used for the factor at full precision and first order."""
        v = self.slot.v
        if self.order == 2 or self.steps or v is None or v.shape != x.shape or v.dtype != x.dtype \
                or x.dtype.itemsize < 4:  # the general path (and its errors)
            return self(None, (x,), out)
        return self._apply(x, _forms._factor(v, x, self.p, True, 0.0, rstd), out)

    def _apply(self, x, c, out):
        """``β + c (out − β)``, and a compound site's LN1 pieces kept."""
        if self.state is not None:
            self.state.keep(x, c, self.params)
        return _forms._shrink_towards_beta(out, c, _forms._beta(self.params, out))


class _RmsNormSite:
    """An RMSNorm call's correction: ``c · RMSNorm(x)`` (no β)."""

    in_forward = True  # runs in a replaced forward (replace_forward)

    steps: tuple = ()

    def __init__(self, site, slot: _Slot, p: float, params, order: int = 1) -> None:
        self.site, self.slot, self.p, self.params, self.order = site, slot, p, params, order

    def __call__(self, module, args, out):
        x = args[0]
        v = self.slot.take(self.site, x, self.steps)
        axis = self.params.axis
        x, v, out = _forms._last(axis, x, v, out)
        eps = self.params.eps(x)
        if self.order == 2:
            return _forms._back(axis, _forms._second_order(v, x, self.p, False, eps, self.params, out))
        c = _forms._factor(v, x, self.p, False, eps)
        return _forms._back(axis, out * c.to(out.dtype))


class _CompoundSecond:
    """A compound site's LN2: ``c2² = (Var ĉ1 + ε2)/(Var ĉ1 + (p/q) c1² S/(σ²
    + ε1) + ε2)``, LN2's input being ``ĉ1`` (src/formulas/compound.rs)."""

    in_forward = True

    def __init__(self, site, p: float, ln2, state: _CompoundState) -> None:
        self.site, self.p, self.ln2, self.state = site, p, ln2, state

    def __call__(self, module, args, out):
        st = self.state
        if st.c1 is None:
            raise RuntimeError(f"dropmc.correct: compound site {self.site!r}: LN2 ran without LN1")
        u = args[0]
        dt = _forms._stats_dtype(u)
        signal = u.to(dt).var(dim=-1, unbiased=False, keepdim=True)
        noise = st.c1.square() * st.s / st.spread
        eps2 = self.ln2.eps(u)
        c2 = ((signal + eps2) / (signal + (self.p / (1.0 - self.p)) * noise + eps2)).sqrt()
        st.c1 = st.s = st.spread = None
        return _forms._shrink_towards_beta(out, c2, _forms._beta(self.ln2, out))


class _FreshForward:
    """The model's forward pre-hook: a new forward, so call indices restart,
    a dropout whose norm did not run last forward leaves no stale ``v``, and
    a scope a raising forward left open is closed."""

    def __init__(self, slots: List[_Slot], counters: Dict[str, _Calls], scopes: List[_Scope]) -> None:
        self.slots, self.counters, self.scopes = slots, counters, scopes

    def __call__(self, module, args):
        for slot in self.slots:
            slot.v = None
        for calls in self.counters.values():
            calls.count = 0
        for scope in self.scopes:
            scope.reset()
        return None


def rehearse(model, call, advice: str) -> None:
    """One eval forward of ``model`` on ``call`` (``(args, kwargs)``) under
    no_grad, its training mode restored: a hook's ``dropmc.correct: site …``
    RuntimeError becomes a ValueError naming the site, then ``advice``."""
    from ..model.inputs import eval_forward

    try:
        eval_forward(model, *call)
    except RuntimeError as e:
        if "dropmc.correct: site" not in str(e):
            raise
        raise ValueError(f"{str(e)[len('dropmc.correct: '):]}: {advice}") from None


class _NoScript:
    """``__prepare_scriptable__`` of a corrected module: ``torch.jit.script``
    asks every module for it before compiling, so a corrected model is
    refused here, naming the correction, instead of failing inside
    TorchScript on a hook object it cannot type."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self):
        raise TypeError(
            f"torch.jit.script: {self.name} is corrected by dropmc.correct, whose corrections are Python "
            "forward hooks and swapped classes TorchScript cannot compile. Script the uncorrected model "
            "(dropmc.torch.uncorrect(model)), or torch.jit.trace the corrected one (it records the "
            "corrected eval forward)")


def _is_corrected(module) -> bool:
    hooks = list(module._forward_hooks.values()) + list(module._forward_pre_hooks.values())
    hooks.append(module.__dict__.get("forward"))  # a replaced forward (_CorrectedForward)
    return type(module).__module__.startswith("dropmc.") or any(
        type(h).__module__.startswith("dropmc.") for h in hooks)


def refuse_scripting(correction, model) -> None:
    """Gives the model and each module holding a correction (a dropmc hook
    or a swapped class) a :class:`_NoScript` (``correction._add``, so
    ``uncorrect`` removes it)."""
    for name, module in model.named_modules():
        if module is model or _is_corrected(module):
            correction._add(module, "__prepare_scriptable__", _NoScript("the model" if module is model
                                                                        else f"module {name!r}"))
