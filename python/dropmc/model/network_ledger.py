"""The network noise ledger: per norm call, how much dropout noise reaches
its input from every dropout upstream — not only its own site's.

In a pre-norm stack ``x + drop(f(norm(x)))`` each dropout's noise stays in
the residual stream and reaches every later norm. The ledger measures it
in one forward on example inputs: a ``TorchFunctionMode``
(:class:`LedgerMode`) carries beside each tensor the per-coordinate
variance ``s`` of its dropout noise (diagonal: coordinates treated as
uncorrelated; first order in the noise), moved through each op by the
rules of :mod:`dropmc.model.network_rules` (their derivations are there). The
forward is the neutral train-mode forward of :class:`dropmc.model.trace.Trace`
(every dropout at its train-mode rate, but no mask drawn: its output is
the eval value, a random draw held at its likely side), the ledger's mode
entered inside it, so each ``F.dropout`` and SDPA call is seen with its
training rate and its injection ``(p/q) v² + s/q`` is added.

At each norm call (the calls :func:`dropmc.model.discovery.discover` recognised,
named as there: ``module``, ``module#k``) the ledger records, per token:

* ``noise``: ``s̄``, the mean over the normalised axis of the noise
  variance a LayerNorm sees after its centring, ``(1 − 1/d) mean_k s_k``
  (``E var_k(x + e) = var_k x + (1 − 1/d) mean_k s_k`` for uncorrelated
  zero-mean ``e``), or an RMSNorm's ``mean_k s_k`` (``E mean_k (x + e)² =
  mean_k x² + mean_k s_k``);
* ``spread``: ``V``, the eval input's variance over that axis (LayerNorm)
  or its mean square (RMSNorm);
* ``own``: at a norm that is a plain or bypass site of one dropout call
  (discovery's sites, ``h + dropout(v)`` with no step between), that
  dropout's own injection ``(p/q) mean_k v_k²`` as the norm sees it
  (times ``1 − 1/d`` for a LayerNorm), so that the rest, ``s̄ − own``, can
  be told apart from the part :mod:`dropmc.correct.network` keeps live.

An op with a noisy input and no rule is never silent: it is listed in
:attr:`NetworkLedger.uncovered` (``(op, module)``), and its output carries
no noise onwards (what reaches a later norm through it is missing: a
lower bound there). Random draws the neutral forward held (drop-path,
``rand`` masks) are listed too: their noise is not in the ledger.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from . import network_rules as _rules
from .calls import call_name
from .trace import Trace, tensors

__all__ = ["NormNoise", "NetworkLedger", "LedgerMode", "network_ledger"]

_QUIET = {"size", "dim", "numel", "stride", "is_contiguous", "__len__", "data_ptr", "is_floating_point",
          "element_size", "get_device", "__format__", "__repr__", "item", "tolist", "__bool__"}


class NormNoise:
    """The noise at one norm call's input: ``kind`` (``"layer"``/``"rms"``),
    ``noise`` (``s̄`` per token) and ``spread`` (``V`` per token), float64
    tensors of the tokens (the leading axes flattened), ``d`` the width,
    ``positions`` the length of the input's position axis (its last but
    one; 1 for a 1-d input); ``own`` (per token, or None) and ``own_site``
    (module docs)."""

    def __init__(self, kind: str, noise: torch.Tensor, spread: torch.Tensor, d: int, positions: int = 1) -> None:
        self.kind, self.noise, self.spread, self.d, self.positions = kind, noise, spread, d, positions
        self.own: Optional[torch.Tensor] = None
        self.own_site: Optional[Tuple[str, str]] = None  # (dropout call, norm call) of ``own``

    @property
    def kappa(self) -> float:
        """The pooled ratio ``κ = Σ s̄ / Σ V`` over the tokens (see
        :mod:`dropmc.correct.network` for why this pooling)."""
        total = float(self.spread.sum())
        return float(self.noise.sum()) / total if total > 0 else 0.0

    @property
    def kappa_rest(self) -> float:
        """``κ`` of the noise other than the norm's own site's, ``max(0, Σ
        (s̄ − own)) / Σ V`` (``κ`` when there is no own site)."""
        if self.own is None:
            return self.kappa
        total = float(self.spread.sum())
        rest = float(self.noise.sum() - self.own.sum())
        return max(rest, 0.0) / total if total > 0 else 0.0

    def kappa_by_position(self, rest: bool = False) -> torch.Tensor:
        """``κ`` pooled per position (the input's last-but-one axis) over
        the other leading axes: ``Σ s̄ / Σ V`` of each position (``rest``:
        ``max(0, Σ (s̄ − own)) / Σ V``, the own site taken out), float64,
        of length ``positions``; a position with ``Σ V = 0`` takes the
        pooled ``κ``."""
        noise = self.noise if not rest or self.own is None else self.noise - self.own
        by = noise.reshape(-1, self.positions).sum(0).clamp_min(0.0)
        spread = self.spread.reshape(-1, self.positions).sum(0)
        pooled = self.kappa_rest if rest else self.kappa
        return torch.where(spread > 0, by / spread.clamp_min(torch.finfo(spread.dtype).tiny),
                           torch.full_like(spread, pooled))


class NetworkLedger:
    """The ledger of one forward: ``norms`` (norm call → :class:`NormNoise`,
    in call order), ``uncovered`` (``(op, module)`` of each op whose
    noisy input had no rule, and of each random draw held) and
    ``activations`` (activation module → the noise at its input,
    :class:`dropmc.model.network_shift.ActivationNoise`: the mean shift's)."""

    def __init__(self) -> None:
        self.norms: Dict[str, NormNoise] = {}
        self.uncovered: List[Tuple[str, str]] = []
        self.activations: Dict[str, object] = {}

    def reached(self) -> List[str]:
        """The norm calls some dropout's noise reaches (``κ > 0``)."""
        return [c for c, n in self.norms.items() if n.kappa > 0]


def _name(func) -> str:
    return getattr(func, "__name__", "")


def _inplace(name: str) -> bool:
    return (name.endswith("_") and not name.endswith("__")) or name in (
        "__iadd__", "__isub__", "__imul__", "__itruediv__", "__setitem__")


class LedgerMode(TorchFunctionMode):
    """Carries the noise variance of each tensor (module docs). ``trace``
    is the neutral trace it runs inside (its module stack names where an
    uncovered op ran, its dropout calls their names)."""

    def __init__(self, trace: Trace, ledger: NetworkLedger, rules=None) -> None:
        super().__init__()
        self.trace, self.ledger = trace, ledger
        self.rules = _rules.RULES if rules is None else rules
        self.var: Dict[int, torch.Tensor] = {}
        self.injected: Dict[str, torch.Tensor] = {}  # dropout call -> (p/q) mean_k v² per token, float64
        self.alive: List[torch.Tensor] = []  # keeps every tracked tensor alive: ids stay unique

    def s_of(self, t) -> Optional[torch.Tensor]:
        return self.var.get(id(t)) if isinstance(t, torch.Tensor) else None

    def _set(self, t, s) -> None:
        if s is None or not isinstance(t, torch.Tensor) or not t.is_floating_point():
            self.var.pop(id(t), None)
            return
        self.var[id(t)] = s if s.shape == t.shape else torch.broadcast_to(s, t.shape)
        self.alive.append(t)

    def _clone_noisy(self, t):
        """An in-place op's target as it was before the op, carrying the
        target's noise: the rule reads ``s`` of the clone (without it, the
        ``x`` of ``x /= c`` or ``scores += bias`` lost its noise there)."""
        with torch._C.DisableTorchFunction():
            clone = t.clone()
        s = self.var.get(id(t))
        if s is not None:
            self.var[id(clone)] = s
            self.alive.append(clone)
        return clone

    def _uncovered(self, name: str) -> None:
        self.ledger.uncovered.append((name, self.trace.owner() or "<model>"))

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _name(func)
        if name in _QUIET:
            return func(*args, **kwargs)
        ins = tensors((args, kwargs))
        noisy = any(id(t) in self.var for t in ins)
        special = func is F.dropout or func is F.scaled_dot_product_attention or name in _rules.INJECTING
        if not noisy and not special:
            out = func(*args, **kwargs)
            if _inplace(name) and args and isinstance(args[0], torch.Tensor):
                self.var.pop(id(args[0]), None)  # overwritten by noise-free values
            return out
        before = args
        if _inplace(name) and args and isinstance(args[0], torch.Tensor):
            before = (self._clone_noisy(args[0]),) + tuple(args[1:])
        run = kwargs
        if name == "multi_head_attention_forward" and kwargs.get("training"):
            run = dict(kwargs, training=False)  # neutral: its inner dropout is below the trace's reach
        out = func(*args, **run)
        with torch._C.DisableTorchFunction(), torch.no_grad():
            self._after(func, name, before, kwargs, out, args)
        return out

    def _after(self, func, name, args, kwargs, out, original) -> None:
        target = original[0] if _inplace(name) and original else out
        if func is F.dropout:
            self._dropout(args, kwargs, target)
            return
        if name == "multi_head_attention_forward":
            from .network_mha import mha_variance

            s = mha_variance(_rules.Op(func, name, args, kwargs, out), self.s_of)
            if s is None:
                self._uncovered(name)
            self._set(tensors(out)[0], s)
            return
        if name in _rules.INJECTING:
            self._uncovered(name)
            for t in tensors(out):
                self.var.pop(id(t), None)
            return
        op = _rules.Op(func, name, args, kwargs, out if not _inplace(name) else original[0])
        if func is F.scaled_dot_product_attention:
            self._set(out, _rules.sdpa_variance(op, self.s_of))
            return
        outs = tensors(out) if not _inplace(name) else [target]
        floats = [t for t in outs if t.is_floating_point()]
        if not floats:
            return  # comparisons, indices: no noise to carry
        rule = self.rules.get(name)
        s = None
        if rule is not None:
            try:
                s = rule(op, self.s_of)
            except (RuntimeError, TypeError, ValueError, IndexError):
                s = None  # a rule that does not fit this call's form: listed below
        if s is None:
            self._uncovered(name)
            for t in outs:
                self.var.pop(id(t), None)
            return
        if isinstance(s, (list, tuple)):
            for t, st in zip(outs, s):
                self._set(t, st)
        else:
            self._set(outs[0], s)

    def _dropout(self, args, kwargs, out) -> None:
        x = args[0] if args else kwargs["input"]
        p = float(kwargs.get("p", args[1] if len(args) > 1 else 0.5))
        training = bool(kwargs.get("training", args[2] if len(args) > 2 else True))
        s = self.s_of(x)
        if not training or p == 0:
            self._set(out, s)
        elif p >= 1:
            self._set(out, None)  # a dropout that zeroes everything: no noise, no value
        else:
            self._set(out, _rules.dropout_variance(x, s, p))
            if self.trace.dropout_p:
                call = next(reversed(self.trace.dropout_p))  # the call the trace just named
                self.injected[call] = (x.detach().double().square().mean(-1) * (p / (1 - p))).reshape(-1)

    # -- norm calls (forward pre-hooks)
    def norm_input(self, call: str, kind: str, x, axis: int = -1) -> None:
        with torch._C.DisableTorchFunction(), torch.no_grad():
            xx = x.detach().double().movedim(axis, -1)  # the normalised axis last (channels-first: axis -3)
            d = xx.shape[-1]
            s = self.s_of(x)
            s = torch.zeros_like(xx) if s is None else s.double().movedim(axis, -1)
            if kind == "layer":
                noise = (1.0 - 1.0 / d) * s.mean(-1)
                spread = xx.var(-1, unbiased=False)
            else:
                noise, spread = s.mean(-1), xx.square().mean(-1)
            positions = xx.shape[-2] if xx.dim() >= 2 else 1
            self.ledger.norms[call] = NormNoise(kind, noise.reshape(-1), spread.reshape(-1), d, positions)


class _NormHook:
    """A norm module's forward pre-hook: hands its call's input to the
    ledger, under the call name discovery gives it."""

    def __init__(self, mode: LedgerMode, name: str, kinds: Dict[str, tuple]) -> None:
        self.mode, self.name, self.kinds, self.count = mode, name, kinds, 0

    def __call__(self, module, args, kwargs):
        k = self.count
        self.count += 1
        call = call_name(self.name, k)
        x = args[0] if args else next(iter(tensors(kwargs)), None)
        if call in self.kinds and isinstance(x, torch.Tensor):
            kind, axis = self.kinds[call]
            self.mode.norm_input(call, kind, x, axis)


def _own_sites(ledger: NetworkLedger, injected: Dict[str, torch.Tensor], found) -> None:
    """Each norm's own site injection (module docs): a plain or bypass site,
    one per norm, no tape, no mask product, its dropout's tokens the
    norm's."""
    by_norm: Dict[str, list] = {}
    for site in found.sites:
        by_norm.setdefault(site.norm, []).append(site)
    for call, sites in by_norm.items():
        noise = ledger.norms.get(call)
        if noise is None or len(sites) != 1:
            continue
        site = sites[0]
        own = injected.get(site.dropout)
        if site.form not in ("plain", "bypass") or site.tape or site.mask is not None or own is None \
                or own.numel() != noise.noise.numel() or found.norms[call].axis != -1:  # own: a last-axis mean
            continue
        d = noise.d
        noise.own = own * (1.0 - 1.0 / d) if noise.kind == "layer" else own
        noise.own_site = (site.dropout, call)


def network_ledger(model, args: tuple, kwargs: dict, found, rules=None) -> NetworkLedger:
    """The ledger of ``model`` on ``args``/``kwargs``: one neutral
    train-mode forward (:func:`dropmc.model.discovery.run_neutral`) with the
    ledger's mode inside the trace's. ``found``: the forward's
    :class:`~dropmc.model.discovery.Discovery` (which calls are norms, of which
    kind). ``rules``: the op rules (default :data:`dropmc.model.network_rules.RULES`)."""
    from .discovery import run_neutral
    from .network_shift import record_activations

    ledger = NetworkLedger()
    trace = Trace(model)
    mode = LedgerMode(trace, ledger, rules)
    modules = dict(model.named_modules())
    kinds: Dict[str, Dict[str, tuple]] = {}
    for call, spec in found.norms.items():
        if spec.kind in ("layer", "rms"):
            kinds.setdefault(found.norm_modules[call], {})[call] = (spec.kind, spec.axis)
    handles = [modules[n].register_forward_pre_hook(_NormHook(mode, n, k), with_kwargs=True)
               for n, k in kinds.items()]
    handles += record_activations(model, mode, ledger.activations)
    try:
        run_neutral(model, trace, args, kwargs, training=True, inner=mode)
    finally:
        for h in handles:
            h.remove()
    _own_sites(ledger, mode.injected, found)
    for draw, p, what in trace.draws:
        if p > 0:
            ledger.uncovered.append((f"random draw {draw} held ({what}, p = {p:g})", draw.rsplit(":", 1)[0]))
    return ledger
