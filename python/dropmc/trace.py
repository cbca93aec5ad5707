"""The data-flow trace of one forward (used by :mod:`dropmc.discovery` and
:mod:`dropmc.capture`).

:class:`Trace` runs the model under a ``torch.overrides.TorchFunctionMode``
with forward hooks on its modules. Every tensor carries

* ``deps``: the dropout calls (and mask draws) its value depends on;
* ``paths``: for each of those not yet through a norm, the first
  :data:`~dropmc.paths.MAX_LABELS` op labels from the dropout to here, the
  path's length;
* ``origin``: ``(kind, payload, tape)``: what made it (``dropout`` — a
  dropout call's output or a mask product, ``add``, ``norm``, ``softmax``,
  ``ones``, ``rand``, ``keepmask``, ``maskdrop``, ``other``) and the tape of
  identity-per-token steps after it (:mod:`dropmc.paths`).

*Neutral* forwards. The trace never draws a mask: ``F.dropout`` returns
its input (its ``p`` is recorded), an SDPA call runs with ``dropout_p =
0``, and a random draw (``torch.rand``/``rand_like``/``bernoulli``) is held
at its likely outcome: ``rand`` returns ``1 − 2⁻²⁴`` so every comparison
with a threshold takes its likely side (LayerDrop keeps its layer; a
``rand ≥ p`` mask keeps every entry), ``bernoulli`` returns ones. A mask
made from a draw and scaled by ``1/q`` (a *keep mask*) is replaced by ones
with its scale recorded, so ``mask · f(z)`` is ``f(z)``: the eval value of
the masked term. The structure the trace sees does not depend on the RNG.
"""

from __future__ import annotations

import inspect
from contextlib import nullcontext
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from .norms import norm_candidate
from .paths import MAX_LABELS, op_label, step_of

__all__ = ["Trace", "tensors"]

_ADD = {"add", "__add__", "__radd__", "add_", "__iadd__"}
_MUL = {"mul", "__mul__", "__rmul__", "mul_", "__imul__"}
_DIV = {"div", "__truediv__", "div_", "__itruediv__", "true_divide"}
_SOFTMAX = {"softmax", "_softmax"}
_MATMUL = {"matmul", "__matmul__", "bmm"}
_ONES = {"ones", "ones_like", "new_ones"}
_RAND = {"rand", "rand_like"}
_BERNOULLI = {"bernoulli", "bernoulli_"}
_COMPARE = {"ge": ">=", "__ge__": ">=", "gt": ">", "__gt__": ">", "le": "<=", "__le__": "<=",
            "lt": "<", "__lt__": "<"}
_NOT = {"logical_not", "__invert__", "bitwise_not"}
_METADATA = {"__get__", "size", "dim", "numel", "stride", "is_contiguous", "__len__", "data_ptr",
             "is_floating_point", "element_size", "get_device", "__format__", "__repr__"}
#: A uniform draw held at its likely side: the largest float32 below 1.
HELD_UNIFORM = 1.0 - 2.0 ** -24


#: Token rows of a norm's first input kept to recognise the norm by
#: (:func:`dropmc.norms.recognize_norm` runs the module on them and checks
#: each output row against the formulas). A LayerNorm/RMSNorm acts on each
#: token alone, so a sample of rows tests the same formula; what it gives
#: up is a module that departs from the formula only on rows outside the
#: sample. 128 evenly spaced rows (the first and last among them) keep
#: discovery's cost independent of the batch: the check on all rows was
#: 0.6 s of a 4 × 256 BERT-base discovery (1024 rows × 25 norms).
RECOGNITION_ROWS = 128


def some_rows(x: torch.Tensor, rows: int) -> torch.Tensor:
    """``x`` (last axis the normalised one) with at most ``rows`` of its
    token rows, evenly spaced, in a tensor of as many axes (the leading
    ones of length 1)."""
    if x.dim() < 2 or x.numel() == 0 or x.numel() // x.shape[-1] <= rows:
        return x
    flat = x.reshape(-1, x.shape[-1])
    pick = torch.linspace(0, flat.shape[0] - 1, rows).round().long()
    return flat[pick].reshape((1,) * (x.dim() - 2) + (rows, x.shape[-1]))


def tensors(obj) -> List[torch.Tensor]:
    return [t for t in tree_flatten(obj)[0] if isinstance(t, torch.Tensor)]


def _name_of(func) -> str:
    return getattr(func, "__name__", "")


def _scalar(x) -> Optional[float]:
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        return float(x)
    return None


_DROPOUT_SIG = inspect.signature(lambda input, p=0.5, training=True, inplace=False: None)
_SDPA_SIG = inspect.signature(lambda query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                              scale=None, enable_gqa=False: None)
_OTHER: tuple = ("other", None, ())


class Trace:
    """The trace of one neutral forward (module docs). ``keep`` names the
    dropout, norm and attention calls whose tensors to record."""

    def __init__(self, model: nn.Module, keep: Optional[set] = None):
        self.model = model
        self.names = {m: n for n, m in model.named_modules()}
        self._modules = dict(model.named_modules())
        self.keep = keep or set()
        self.info: Dict[int, tuple] = {}  # id(tensor) -> (deps, paths, origin)
        self.alive: List[torch.Tensor] = []
        self.stack: List[str] = []
        self.counts: Dict[str, int] = {}
        self.dropout_p: Dict[str, float] = {}
        self.dropout_origin: Dict[str, tuple] = {}
        self.dropout_module: Dict[str, str] = {}
        self.sources: Dict[str, dict] = {}  # mask-product sites: call -> mask description
        self.draws: List[Tuple[str, float, str]] = []  # (draw, P(unlikely side), what)
        self.sdpa_p: Dict[str, float] = {}
        self.norm_calls: List[tuple] = []  # (call, module, origin, deps, paths)
        self.norm_out: Dict[int, str] = {}
        self.uses: Dict[str, int] = {}
        self.first_input: Dict[str, torch.Tensor] = {}
        self.mha: List[str] = []
        self.attention_use: Dict[str, str] = {}  # eager attention dropout -> how its output was used
        self.recorded: Dict[Any, Any] = {}
        self.quiet = False

    # -- bookkeeping
    def rec(self, t) -> tuple:
        return self.info.get(id(t)) or (frozenset(), {}, _OTHER)

    def deps(self, t) -> frozenset:
        return self.rec(t)[0]

    def origin(self, t) -> tuple:
        return self.rec(t)[2]

    def tag(self, t, deps, paths, origin):
        self.info[id(t)] = (deps, paths, origin)
        self.alive.append(t)

    def next_call(self, base: str) -> str:
        k = self.counts.get(base, 0)
        self.counts[base] = k + 1
        return base if k == 0 else f"{base}#{k}"

    def owner(self) -> str:
        return self.stack[-1] if self.stack else ""

    def functional_base(self, kind: str) -> str:
        owner = self.owner()
        return f"{owner}:{kind}" if owner else kind

    def copy(self, t, rows: Optional[int] = None):
        """A copy of ``t`` outside the trace; with ``rows``, of at most that
        many of its token rows (:func:`some_rows`)."""
        self.quiet = True
        try:
            return (t if rows is None else some_rows(t, rows)).detach().clone()
        finally:
            self.quiet = False

    def _paths(self, ins, label) -> dict:
        out: dict = {}
        for t in ins:
            for d, (labels, n) in self.rec(t)[1].items():
                if d not in out or n + 1 < out[d][1]:
                    out[d] = ((labels + (label,))[:MAX_LABELS], n + 1)
        return out

    # -- the mode
    def on_call(self, func, args, kwargs):
        if self.quiet:
            return func(*args, **kwargs)
        name = _name_of(func)
        if func is F.dropout:
            return self.on_dropout(func, args, kwargs)
        if func is F.scaled_dot_product_attention:
            return self.on_sdpa(func, args, kwargs)
        if name in _RAND or name in _BERNOULLI:
            return self.on_draw(name, func, args, kwargs)
        ins = tensors((args, kwargs))
        if name not in _METADATA:
            for t in ins:
                call = self.norm_out.get(id(t))
                if call is not None:
                    self.uses[call] = self.uses.get(call, 0) + 1
        if name in _MATMUL | {"einsum"}:
            self.on_product(name, args)
        out = func(*args, **kwargs)
        if name in _METADATA:
            return out
        deps = frozenset().union(*(self.deps(t) for t in ins)) if ins else frozenset()
        outs = tensors(out)
        first = outs[0] if outs else None
        origin, out = self.origin_of(name, func, args, kwargs, out, first)
        paths = self._paths(ins, op_label(name, self.owner()))
        if origin[0] == "dropout" and origin[2] == () and origin[1] in self.sources:
            deps = deps | {origin[1]}
            paths[origin[1]] = ((), 0)
        inplace = name.endswith("_") or name in ("__setitem__", "__iadd__", "__imul__", "__itruediv__") \
            or "out" in kwargs
        if inplace and args and isinstance(args[0], torch.Tensor):
            self.tag(args[0], deps, paths, origin if name in _ADD or origin[0] in ("keepmask", "rand")
                     else _OTHER)
        in_ids = {id(t) for t in ins}
        for t in tensors(out):
            if id(t) in in_ids and not inplace:
                d0, p0, o0 = self.rec(t)
                self.tag(t, d0 | deps, {**paths, **p0}, o0)
            else:
                self.tag(t, deps, paths, origin)
        return out

    def origin_of(self, name, func, args, kwargs, out, first) -> Tuple[tuple, Any]:
        """The output's origin (module docs) and the output (a keep mask
        replaced by ones)."""
        two = len(args) >= 2 and all(isinstance(a, torch.Tensor) for a in args[:2])
        if name in _ADD and two and kwargs.get("alpha", 1) == 1:
            a, b = args[0], args[1]
            return ("add", ((self.origin(a), self.deps(a)), (self.origin(b), self.deps(b))), ()), out
        if name in _SOFTMAX:
            return ("softmax", None, ()), out
        if name in _ONES:
            return ("ones", None, ()), out
        o0 = self.origin(args[0]) if args and isinstance(args[0], torch.Tensor) else _OTHER
        o1 = self.origin(args[1]) if len(args) > 1 and isinstance(args[1], torch.Tensor) else _OTHER
        if name in _MUL and two:
            for m, x, om in ((args[0], args[1], o0), (args[1], args[0], o1)):
                if om[0] in ("maskdrop", "keepmask") and self.origin(x)[0] not in ("maskdrop", "keepmask"):
                    return self.on_mask_product(om, m, x, first), out
        if o0[0] in ("rand", "keepmask", "dropmask") or o1[0] in ("rand", "keepmask", "dropmask"):
            return self.on_draw_op(name, args, o0, o1, out)
        c = _scalar(args[1]) if len(args) > 1 else None
        if c and isinstance(args[0], torch.Tensor) and (name in _MUL or name in _DIV):
            return ("scaled", c if name in _MUL else 1.0 / c, ()), out  # drop-path's input.div(q)
        step, _ = step_of(name, func, args, kwargs, first)
        if step is not None and o0[0] != "other":
            return (o0[0], o0[1], o0[2] + (step,)), out
        merged = self.merge_step(name, func, args, kwargs, first, o0)
        if merged is not None:
            return merged, out
        return _OTHER, out

    def merge_step(self, name, func, args, kwargs, out, o0) -> Optional[tuple]:
        """A mask product's own ``(…, a1, …, ak) → (…, a1·…·ak)`` reshape
        right after the product (heads joined back into channels): the
        identity per token with the channels regrouped, which the mask's
        groups record (:func:`dropmc.masks.mask_info`)."""
        if o0[0] != "dropout" or o0[2] or o0[1] not in self.sources or name not in ("view", "reshape", "flatten"):
            return None
        x = args[0]
        if not isinstance(out, torch.Tensor) or out.dim() >= x.dim() or out.numel() != x.numel():
            return None
        k = x.dim() - out.dim() + 1
        if tuple(out.shape[:-1]) != tuple(x.shape[:-k]):
            return None
        self.sources[o0[1]]["merged"] = tuple(x.shape[-k:])
        return (o0[0], o0[1], ((func, tuple(args), dict(kwargs), 0),))

    # -- dropout calls and mask products
    def on_dropout(self, func, args, kwargs):
        b = _DROPOUT_SIG.bind(*args, **kwargs)
        b.apply_defaults()
        x, p, training = b.arguments["input"], float(b.arguments["p"]), bool(b.arguments["training"])
        owner = self.owner()
        if isinstance(self._modules.get(owner), nn.modules.dropout._DropoutNd):
            call = self.next_call(owner)
            self.dropout_module[call] = owner
        else:
            call = self.next_call(self.functional_base("dropout"))
        p = p if training else 0.0
        self.dropout_p[call] = p
        in_origin = self.origin(x)
        self.dropout_origin[call] = in_origin
        if call in self.keep and in_origin[0] != "ones":
            self.recorded[("input", call)] = self.copy(x)
        deps, paths = self.deps(x), dict(self.rec(x)[1])
        out = x if b.arguments["inplace"] else x.view_as(x)  # neutral: the eval output
        if in_origin[0] == "ones":  # x * dropout(ones): the product is the site's source
            self.tag(out, deps, paths, ("maskdrop", (call, p, tuple(x.shape)), ()))
            return out
        if p > 0:
            deps = deps | {call}
            paths[call] = ((), 0)
        self.tag(out, deps, paths, ("dropout", call, ()))
        return out

    def on_mask_product(self, om, mask, x, out) -> tuple:
        """``mask · x`` with a mask from a dropout of ones or from a draw:
        the product is a site's source (module docs of dropmc.masks)."""
        if om[0] == "maskdrop":
            call, p, _ = om[1]
            scale = 1.0 / (1.0 - p) if p < 1 else float("inf")
        else:
            draw, p, scale = om[1]
            ox = self.origin(x)
            if ox[0] == "scaled" and out is not None:  # x = y · f: the mask keeps y at scale · f
                scale *= ox[1]
                self.quiet = True
                try:
                    with torch.no_grad():
                        out.div_(ox[1])  # neutral: the product is y, its eval value
                finally:
                    self.quiet = False
            call = self.next_call(self.functional_base("rand_mask"))
            self.dropout_p[call] = p
            self.dropout_origin[call] = _OTHER
        self.sources[call] = {"mask_shape": tuple(mask.shape), "value_shape": tuple(x.shape),
                              "out_shape": tuple(out.shape) if out is not None else (), "scale": scale,
                              "kind": "dropout of ones" if om[0] == "maskdrop" else "rand mask", "p": p,
                              "mask_tape": om[2]}
        if call in self.keep and out is not None:
            self.recorded[("input", call)] = self.copy(out)  # neutral: mask · x is x
        return ("dropout", call, ())

    # -- random draws, held at their likely side
    def on_draw(self, name, func, args, kwargs):
        out = func(*args, **kwargs)
        draw = self.functional_base("draw")
        with torch.no_grad():
            self.quiet = True
            try:
                if name in _RAND:
                    out.fill_(HELD_UNIFORM)
                    origin = ("rand", (draw, 0.0), ())
                else:
                    prob = kwargs.get("p", args[1] if len(args) > 1 else None)
                    prob = float(prob) if _scalar(prob) is not None else (
                        float(args[0].float().mean()) if name == "bernoulli" else 0.5)
                    target = args[0] if name == "bernoulli_" else out
                    target.fill_(1.0)
                    self.draws.append((draw, 1.0 - prob, "bernoulli"))
                    origin = ("keepmask", (draw, 1.0 - prob, 1.0), ())
            finally:
                self.quiet = False
        self.tag(out, frozenset(), {}, origin)
        return out

    def on_draw_op(self, name, args, o0, o1, out) -> Tuple[tuple, Any]:
        """An op on a draw: comparisons make masks, scalars scale them."""
        o = o0 if o0[0] in ("rand", "keepmask", "dropmask") else o1
        c = _scalar(args[1]) if len(args) > 1 else None
        kind, payload, _ = o
        if kind == "rand" and name in _ADD and c is not None:
            return ("rand", (payload[0], payload[1] + c), ()), out
        if kind == "rand" and name in ("floor", "floor_"):  # floor(c + U) = 1 with probability c
            p_keep = min(max(payload[1], 0.0), 1.0)
            return self.held_mask(payload[0], 1.0 - p_keep, out), out
        if kind == "rand" and name in _COMPARE and c is not None and o is o0:
            op, t = _COMPARE[name], c - payload[1]
            p_true = min(max(t, 0.0), 1.0) if op in ("<", "<=") else min(max(1.0 - t, 0.0), 1.0)
            if isinstance(out, torch.Tensor) and out.numel() == 1:
                self.draws.append((payload[0], min(p_true, 1 - p_true), "a one-draw decision (stochastic depth)"))
            if p_true >= 0.5:
                return self.held_mask(payload[0], 1.0 - p_true, out), out
            return ("dropmask", (payload[0], p_true, 1.0), ()), out
        if kind == "dropmask" and (name in _NOT or name in ("rsub", "__rsub__")):
            return self.held_mask(payload[0], payload[1], out), out
        if kind == "keepmask":
            scale = payload[2]
            if name in _MUL and c is not None:
                scale *= c
            elif name in _DIV and c is not None and o is o0:
                scale /= c
            elif name not in ("to", "float", "half", "double", "bfloat16", "type_as", "contiguous",
                              "clone", "expand", "expand_as", "view", "reshape", "type"):
                return _OTHER, out
            if isinstance(out, torch.Tensor) and out.dtype.is_floating_point:
                self.quiet = True
                try:
                    with torch.no_grad():
                        out.fill_(1.0)  # neutral: the mask's eval value
                finally:
                    self.quiet = False
            return ("keepmask", (payload[0], payload[1], scale), ()), out
        return _OTHER, out

    def held_mask(self, draw, p_drop, out) -> tuple:
        if isinstance(out, torch.Tensor) and out.numel() > 1:
            self.draws.append((draw, p_drop, "a mask"))
        return ("keepmask", (draw, p_drop, 1.0), ())

    # -- attention
    def on_product(self, name, args):
        """Eager attention: a dropout of softmax rows times the values."""
        if name == "einsum":
            for t in tensors(args):
                o = self.origin(t)
                if o[0] == "dropout" and self.dropout_origin.get(o[1], _OTHER)[0] == "softmax":
                    self.attention_use.setdefault(o[1], "einsum (not read)")
            return
        if len(args) < 2 or not isinstance(args[1], torch.Tensor):
            return
        o = self.origin(args[0])
        if o[0] == "dropout" and self.dropout_origin.get(o[1], _OTHER)[0] == "softmax":
            self.attention_use.setdefault(o[1], name)
            if o[1] in self.keep:
                self.recorded.setdefault(("values", o[1]), (self.copy(args[1]), o[2]))

    def on_sdpa(self, func, args, kwargs):
        b = _SDPA_SIG.bind(*args, **kwargs)
        b.apply_defaults()
        a = b.arguments
        call = self.next_call(self.functional_base("sdpa"))
        p = float(a["dropout_p"])
        self.sdpa_p[call] = p
        ins = tensors((args, kwargs))
        deps = frozenset().union(*(self.deps(t) for t in ins))
        args, kwargs = list(args), dict(kwargs)
        if len(args) > 4:  # neutral: no attention mask drawn
            args[4] = 0.0
        else:
            kwargs["dropout_p"] = 0.0
        a["dropout_p"] = 0.0
        out = func(*args, **kwargs)
        if call in self.keep:
            self.recorded[("sdpa", call)] = dict(a, output=self.copy(out))
        self.tag(out, deps | ({call} if p > 0 else set()), self._paths(ins, "sdpa"), _OTHER)
        return out

    # -- module hooks
    def run(self, args, kwargs, norm_modules: Optional[set] = None, inner=None):
        """Runs ``model(*args, **kwargs)`` under the trace. ``norm_modules``
        (names) are the modules whose calls are norm calls; None: every
        norm candidate (discovery). ``inner``: a further
        ``TorchFunctionMode`` entered inside the trace's (it sees each call
        first and its ``func`` runs through the trace: the linear-path
        tracer of :mod:`dropmc.linear_path`, sharing the capture forward)."""
        candidates = {m for m in self._modules.values() if norm_candidate(m)} if norm_modules is None \
            else {self._modules[n] for n in norm_modules}
        handles = []

        def pre(module, a, kw):
            name = self.names.get(module, "")
            self.stack.append(name)
            if isinstance(module, nn.MultiheadAttention):
                self.mha.append(name)
            if module in candidates:
                x = a[0] if a else next(iter(tensors(kw)), None)
                if isinstance(x, torch.Tensor):
                    call = self.next_call("norm:" + name)[len("norm:"):]
                    d0, p0, o0 = self.rec(x)
                    self.norm_calls.append((call, name, o0, d0, p0))
                    if name not in self.first_input:
                        self.first_input[name] = self.copy(x, RECOGNITION_ROWS)
                    if call in self.keep:
                        self.recorded[("input", call)] = self.copy(x)
                    module._dropmc_call = call
            return None

        def post(module, a, kw, out):
            if self.stack:
                self.stack.pop()
            call = module.__dict__.pop("_dropmc_call", None)
            if call is not None and isinstance(out, torch.Tensor):
                self.tag(out, self.deps(out), {}, ("norm", call, ()))  # paths end at a norm
                self.norm_out[id(out)] = call
                if call in self.keep:
                    self.recorded[("output", call)] = self.copy(out)
            return None

        for m in self._modules.values():
            handles.append(m.register_forward_pre_hook(pre, with_kwargs=True))
            handles.append(m.register_forward_hook(post, with_kwargs=True))
        trace = self

        class _Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                return trace.on_call(func, args, kwargs or {})

        try:
            with _Mode(), (inner if inner is not None else nullcontext()):
                return self.model(*args, **kwargs)
        finally:
            for h in handles:
                h.remove()
            for m in self._modules.values():
                m.__dict__.pop("_dropmc_call", None)
            self.alive.clear()
            self.info.clear()
