"""The data-flow trace of one forward (used by :mod:`dropmc.model.discovery` and
:mod:`dropmc.audit.capture_eval`).

:class:`Trace` runs the model under a ``torch.overrides.TorchFunctionMode``
with forward hooks on its modules. Every tensor carries

* ``deps``: the dropout calls (and mask draws) its value depends on;
* ``paths``: for each of those not yet through a norm, the first
  :data:`~dropmc.model.paths.MAX_LABELS` op labels from the dropout to here, the
  path's length;
* ``origin``: ``(kind, payload, tape)``: what made it (``dropout`` — a
  dropout call's output or a mask product, ``add``, ``norm``, ``softmax``,
  ``ones``, ``rand``, ``keepmask``, ``maskdrop``, ``other``) and the tape of
  identity-per-token steps after it (:mod:`dropmc.model.paths`).

Data flow, not op names: an op whose tensor arguments give only their
shape (``new_ones``, ``*_like``: :data:`_SHAPE_ONLY`) passes on no
dependence; a dropout's output times or over a number or a tensor that
carries no draw of its mask is the same site with ``v' = v ⊙ g``
(:meth:`Trace.gate_step`); every dropout function is a dropout call
(:data:`_DROPOUTS`), and every draw and mask product is followed by
:mod:`dropmc.model.trace_masks`.

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

from .attention_product import SDPA_SIGNATURE, canonical, canonical_steps, einsum_layout
from .calls import call_name
from .norms import norm_candidate
from .paths import MAX_LABELS, op_label, step_of
from .trace_masks import ADD, BERNOULLI, DIV, MUL, OTHER, RAND, MaskDraws, scalar

__all__ = ["Trace", "tensors", "ALPHA_REASON", "tensor_gate", "HELD_MASK"]

_SOFTMAX = {"softmax", "_softmax"}
_MATMUL = {"matmul", "__matmul__", "bmm"}
_ONES = {"ones", "ones_like", "new_ones"}
#: Ops that read only the shape, dtype and device of their tensor
#: arguments: their output depends on no data (a mask drawn for
#: ``z[:, :, 0:1, 0:1].shape`` or ``t.new_ones(shape)`` carries no draw of
#: ``z`` or ``t``).
_SHAPE_ONLY = {"ones_like", "zeros_like", "empty_like", "full_like", "new_ones", "new_zeros", "new_empty",
               "new_full", "randn_like", "randint_like"}
_METADATA = {"__get__", "size", "dim", "numel", "stride", "is_contiguous", "__len__", "data_ptr",
             "is_floating_point", "element_size", "get_device", "__format__", "__repr__"}
_MASK_KINDS = ("rand", "keepmask", "dropmask", "maskdrop")
#: The path label of a drawn mask over a dropout's output, for that dropout
#: (:attr:`Trace.nested`): held at its eval value, the identity.
HELD_MASK = "held mask"


#: Token rows of a norm's first input kept to recognise the norm by
#: (:func:`dropmc.model.norms.recognize_norm` runs the module on them and checks
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


def tensor_gate(step) -> bool:
    """Whether a tape step is a gate step (:meth:`Trace.gate_step`) whose
    gate is a tensor (made anew each forward, unlike a number)."""
    func, args, _, pos = step
    return (_name_of(func) in MUL or _name_of(func) in DIV) and any(
        isinstance(a, torch.Tensor) for i, a in enumerate(args) if i != pos)


_DROPOUT_SIG = inspect.signature(lambda input, p=0.5, training=True, inplace=False: None)
_ALPHA_SIG = inspect.signature(lambda input, p=0.5, training=False, inplace=False: None)
#: The dropout functions: ``(kind, spatial axes)``. A channel dropout
#: (``dropout1d/2d/3d``) draws one mask entry per channel of the input's
#: ``(N, C, *spatial)`` layout; alpha dropout is not inverted dropout.
_DROPOUTS = {F.dropout: ("inverted", 0), F.dropout1d: ("channel", 1), F.dropout2d: ("channel", 2),
             F.dropout3d: ("channel", 3), F.alpha_dropout: ("alpha", 0), F.feature_alpha_dropout: ("alpha", 0)}
#: Why an alpha dropout has no site (listed with it).
ALPHA_REASON = ("alpha dropout: not inverted dropout (a dropped entry is set to α' and an affine map "
                "a·x + b follows), so the closed forms of norm(h + m ⊙ v / q) do not apply")


class Trace(MaskDraws):
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
        self.dropout_shape: Dict[str, tuple] = {}  # a dropout call's input shape
        self.dropout_reason: Dict[str, str] = {}  # a dropout call no family reads -> why
        self.mask_draws: set = set()  # draws that made a mask product (a dropout call, not LayerDrop)
        self.sources: Dict[str, dict] = {}  # mask-product sites: call -> mask description
        self.nested: Dict[str, tuple] = {}  # rand-mask product of a dropout's output -> that output's origin
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
        self.mode = "train-mode"  # the forward's mode, for messages (set by the capture)
        self.module_calls: Dict[str, int] = {}  # module -> its calls so far (counted as they return)
        self.gate_outputs: Dict[str, list] = {}  # dropout call -> [(module, call index, tape)] (gated_output)

    # -- bookkeeping
    def rec(self, t) -> tuple:
        return self.info.get(id(t)) or (frozenset(), {}, OTHER)

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
        return call_name(base, k)

    def owner(self) -> str:
        return self.stack[-1] if self.stack else ""

    def functional_base(self, kind: str) -> str:
        owner = self.owner()
        return f"{owner}:{kind}" if owner else kind

    def copy(self, t, rows: Optional[int] = None):
        """A copy of ``t`` outside the trace; with ``rows``, of at most that
        many of its token rows (:func:`some_rows`)."""
        with self.quietly():
            return (t if rows is None else some_rows(t, rows)).detach().clone()

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
        if func in _DROPOUTS:
            return self.on_dropout(func, args, kwargs)
        if func is F.scaled_dot_product_attention:
            return self.on_sdpa(func, args, kwargs)
        if name in RAND or name in BERNOULLI:
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
        deps = frozenset().union(*(self.deps(t) for t in ins)) if ins and name not in _SHAPE_ONLY else frozenset()
        outs = tensors(out)
        first = outs[0] if outs else None
        origin, out = self.origin_of(name, func, args, kwargs, out, first)
        paths = self._paths(ins, op_label(name, self.owner())) if name not in _SHAPE_ONLY else {}
        if origin[0] == "dropout" and origin[2] and origin[2][-1][0] is func and origin[1] in paths \
                and (name in MUL or name in DIV):  # a gate step on the site's own path (gate_step)
            labels, n = paths[origin[1]]
            paths[origin[1]] = (labels[:-1] + ("gate",), n) if len(labels) == n else (labels, n)
        if origin[0] == "dropout" and origin[2] == () and origin[1] in self.sources:
            deps = deps | {origin[1]}
            paths[origin[1]] = ((), 0)
            inner = self.nested.get(origin[1])
            while inner is not None:  # a drawn mask over a dropout's output: at eval the identity for it
                labels, n = paths.get(inner[1], ((), 0))
                if labels and len(labels) == n:
                    paths[inner[1]] = (labels[:-1] + (HELD_MASK,), n)
                inner = self.nested.get(inner[1])
        inplace = (name.endswith("_") and not name.startswith("__")) or "out" in kwargs \
            or name in ("__setitem__", "__iadd__", "__imul__", "__itruediv__", "__isub__")
        if inplace and args and isinstance(args[0], torch.Tensor):
            self.tag(args[0], deps, paths, origin if name in ADD or origin[0] in ("keepmask", "rand", "softmax")
                     else OTHER)
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
        if name in ADD and two and kwargs.get("alpha", 1) == 1:
            a, b = args[0], args[1]
            return ("add", ((self.origin(a), self.deps(a)), (self.origin(b), self.deps(b))), ()), out
        if name in _SOFTMAX:
            return ("softmax", None, ()), out
        if name in ("masked_fill", "masked_fill_") and len(args) > 2 and isinstance(args[0], torch.Tensor) \
                and self.origin(args[0])[0] == "softmax" and scalar(args[2]) == 0.0 \
                and not (isinstance(args[1], torch.Tensor) and self.origin(args[1])[0] in _MASK_KINDS):
            return ("softmax", None, ()), out  # masked keys zeroed (DeBERTa's XSoftmax): still the rows
        if name in _ONES:
            return ("ones", None, ()), out
        o0 = self.origin(args[0]) if args and isinstance(args[0], torch.Tensor) else OTHER
        o1 = self.origin(args[1]) if len(args) > 1 and isinstance(args[1], torch.Tensor) else OTHER
        met = self.mask_meets_value(name, args, kwargs, first)
        if met is not None:
            return met, out
        if name in MUL and two:
            for m, x, om in ((args[0], args[1], o0), (args[1], args[0], o1)):
                if om[0] in ("maskdrop", "keepmask") and self.origin(x)[0] not in ("maskdrop", "keepmask"):
                    return self.on_mask_product(om, m, x, first), out
        if o0[0] in ("rand", "keepmask", "dropmask") or o1[0] in ("rand", "keepmask", "dropmask"):
            return self.on_draw_op(name, args, o0, o1, out)
        folded = self.fold_scale(name, args, o0 if o0[0] == "dropout" else o1, first)
        if folded is not None:
            return folded, out
        gated = self.gate_step(name, func, args, kwargs, first)
        if gated is not None:
            return gated, out
        c = scalar(args[1]) if len(args) > 1 else None
        if c and isinstance(args[0], torch.Tensor) and (name in MUL or name in DIV):
            return ("scaled", c if name in MUL else 1.0 / c, ()), out  # drop-path's input.div(q)
        step, _ = step_of(name, func, args, kwargs, first)
        if step is not None and o0[0] != "other":
            return (o0[0], o0[1], o0[2] + (step,)), out
        return OTHER, out

    def gate_step(self, name, func, args, kwargs, out) -> Optional[tuple]:
        """``dropout(v) ⊙ g`` or ``dropout(v) / g`` with ``g`` a number or a
        tensor that carries no draw of this dropout's mask (a gate, a layer
        scale, ``1/(1 − p)``): ``m ⊙ v ⊙ g = m ⊙ (v ⊙ g)``, the same site
        with ``v' = v ⊙ g``. A step of the site's tape (the capture replays
        it with the eval forward's ``g``), provided the product keeps the
        masked operand's shape (a broadcast would share one draw over
        channels)."""
        if not (name in MUL or name in DIV) or len(args) < 2 or not isinstance(out, torch.Tensor):
            return None
        for pos in ((0, 1) if name in MUL else (0,)):
            x, g = args[pos], args[1 - pos]
            if not isinstance(x, torch.Tensor) or tuple(out.shape) != tuple(x.shape):
                continue
            o = self.origin(x)
            if o[0] != "dropout":
                continue
            if isinstance(g, torch.Tensor):
                if o[1] in self.deps(g) or self.origin(g)[0] in _MASK_KINDS:
                    continue
            elif scalar(g) is None:
                continue
            return (o[0], o[1], o[2] + ((func, tuple(args), dict(kwargs), pos),))
        return None

    def gated_output(self, name: str, out) -> None:
        """Counts ``name``'s call and, when its output is a dropout's output
        through a gate step with a tensor gate (``dropout(v) ⊙ g``), records
        ``(name, call index, tape)`` under the dropout call: in eval (masks
        all ones) that module's output is ``v ⊙ g`` itself, which
        ``correct`` captures there (the gate is made anew each forward)."""
        k = self.module_calls.get(name, 0)
        self.module_calls[name] = k + 1
        o = self.origin(out) if isinstance(out, torch.Tensor) else OTHER
        if o[0] == "dropout" and any(tensor_gate(step) for step in o[2]):
            self.gate_outputs.setdefault(o[1], []).append((name, k, o[2]))

    # -- dropout calls and mask products
    def on_dropout(self, func, args, kwargs):
        """A dropout call (:data:`_DROPOUTS`), run neutral: its output is
        its input. A channel dropout's output is a mask product (its mask
        ``(N, C, 1, …)``, one draw per channel); an alpha dropout is counted
        with its reason (:data:`ALPHA_REASON`)."""
        kind, spatial = _DROPOUTS[func]
        b = (_ALPHA_SIG if kind == "alpha" else _DROPOUT_SIG).bind(*args, **kwargs)
        b.apply_defaults()
        x, p, training = b.arguments["input"], float(b.arguments["p"]), bool(b.arguments["training"])
        owner = self.owner()
        if isinstance(self._modules.get(owner), nn.modules.dropout._DropoutNd):
            call = self.next_call(owner)
            self.dropout_module[call] = owner
        else:
            call = self.next_call(self.functional_base(_name_of(func)))
        p = p if training else 0.0
        self.dropout_p[call] = p
        self.dropout_shape[call] = tuple(x.shape)
        in_origin = self.origin(x)
        self.dropout_origin[call] = in_origin
        if kind == "alpha":
            self.dropout_reason[call] = ALPHA_REASON
        if call in self.keep and in_origin[0] != "ones":
            self.recorded[("input", call)] = self.copy(x)
        deps, paths = self.deps(x), dict(self.rec(x)[1])
        out = x if b.arguments["inplace"] else x.view_as(x)  # neutral: the eval output
        if in_origin[0] == "ones" and kind == "inverted":  # x * dropout(ones): the product is the site's source
            self.tag(out, deps, paths, ("maskdrop", (call, p, tuple(x.shape)), ()))
            return out
        if kind == "channel" and p > 0:
            lead = max(x.dim() - spatial, 1)
            self.sources[call] = {"mask_shape": tuple(x.shape[:lead]) + (1,) * (x.dim() - lead),
                                  "value_shape": tuple(x.shape), "out_shape": tuple(x.shape),
                                  "scale": 1.0 / (1.0 - p) if p < 1 else float("inf"),
                                  "kind": f"channel dropout ({_name_of(func)})", "p": p, "mask_tape": ()}
        if p > 0:
            deps = deps | {call}
            paths[call] = ((), 0)
        self.tag(out, deps, paths, ("dropout", call, ()))
        return out

    # -- attention
    def on_product(self, name, args):
        """Eager attention: a dropout of softmax rows times the values (an
        ``einsum`` read by its equation: :func:`dropmc.model.attention_product.einsum_layout`,
        the rows' steps then end in its permutation to ``(B, H, L, S)``)."""
        if name == "einsum":
            operands = tensors(args)
            for k, t in enumerate(operands):
                o = self.origin(t)
                if o[0] != "dropout" or self.dropout_origin.get(o[1], OTHER)[0] != "softmax":
                    continue
                layout = einsum_layout(args[0], k) if len(operands) == 2 and isinstance(args[0], str) else None
                if layout is None:
                    self.attention_use.setdefault(o[1], "einsum (not read)")
                    continue
                self.attention_use.setdefault(o[1], "einsum")
                if o[1] in self.keep:
                    rows_perm, values_perm, _, batch = layout
                    values = canonical(operands[1 - k], values_perm, batch)
                    steps = canonical_steps(t.shape, rows_perm, batch)
                    self.recorded.setdefault(("values", o[1]), (self.copy(values), o[2] + steps))
            return
        if len(args) < 2 or not isinstance(args[1], torch.Tensor):
            return
        o = self.origin(args[0])
        if o[0] == "dropout" and self.dropout_origin.get(o[1], OTHER)[0] == "softmax":
            self.attention_use.setdefault(o[1], name)
            if o[1] in self.keep:
                self.recorded.setdefault(("values", o[1]), (self.copy(args[1]), o[2]))

    def on_sdpa(self, func, args, kwargs):
        b = SDPA_SIGNATURE.bind(*args, **kwargs)
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
        self.tag(out, deps | ({call} if p > 0 else set()), self._paths(ins, "sdpa"), OTHER)
        return out

    # -- module hooks
    def run(self, args, kwargs, norm_modules: Optional[set] = None, inner=None):
        """Runs ``model(*args, **kwargs)`` under the trace. ``norm_modules``
        (names) are the modules whose calls are norm calls; None: every
        norm candidate (discovery). ``inner``: a further
        ``TorchFunctionMode`` entered inside the trace's (it sees each call
        first and its ``func`` runs through the trace: the linear-path
        tracer of :mod:`dropmc.model.linear_path`, sharing the capture forward)."""
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
                        w = getattr(module, "weight", None)  # channels-first (weight not along the last axis): whole
                        last = not isinstance(w, torch.Tensor) or w.dim() != 1 or w.shape[0] == x.shape[-1]
                        self.first_input[name] = self.copy(x, RECOGNITION_ROWS if last else None)
                    if call in self.keep:
                        self.recorded[("input", call)] = self.copy(x)
                    module._dropmc_call = call
            return None

        def post(module, a, kw, out):
            if self.stack:
                self.stack.pop()
            self.gated_output(self.names.get(module, ""), out)
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
