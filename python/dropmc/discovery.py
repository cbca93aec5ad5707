"""Find a model's dropout→norm and attention-dropout sites from what one
forward does (no ``torch.fx``).

``discover(model, *args, **kwargs)`` runs ONE train-mode forward under a
``torch.overrides.TorchFunctionMode`` and forward hooks on the modules, and
records data flow: every tensor carries the set of dropout calls it
depends on and, when it is one, how it was made (a dropout call's output, a
two-term add, a norm's output, a softmax). ``nn.Dropout`` calls
``F.dropout``, and ``F.dropout`` / ``F.scaled_dot_product_attention`` are
torch functions, so the mode sees every dropout, module or functional.

Names. Each CALL is its own dropout: a module called ``k > 0`` times before
in the forward is ``name#k`` (``layers.0.dropout#1``); a functional call is
named by the module it runs in, ``owner:dropout`` (``owner:dropout#k``; at
the model's top level plain ``dropout``, ``dropout#1``, …), an SDPA call
``owner:sdpa``. A norm module's calls are ``name``, ``name#1``, ….

Sites, per call of a norm (a module :func:`dropmc.norms.recognize_norm`
reads as a LayerNorm or RMSNorm) whose input ``z`` is

* the output of a dropout call ``D``: *plain* ``D → norm``; when the
  norm is an ``nn.LayerNorm`` whose output's only use is a second
  ``nn.LayerNorm``, *compound* ``D → LN1 → LN2`` instead;
* ``a + b`` with ``a`` a dropout call ``D``'s output: *bypass* ``D → norm``
  with ``h = b`` — unless ``b`` itself depends on ``D``'s mask, which makes
  it *entangled* (``E[norm(h + dropout(v))]`` with ``h`` fixed is not the
  model's quantity: GPT-2's ``drop → h.0.ln_2``, BERT's
  ``embeddings.dropout → layer.0.attention.output.LayerNorm``).

Attention sites: an ``F.dropout`` whose input is a softmax (eager
attention: the dropout output's ``matmul`` with the values is the context),
every ``F.scaled_dot_product_attention`` call with ``dropout_p > 0``, and
every ``nn.MultiheadAttention`` with ``dropout > 0`` the forward calls.

The audit's capture runs the model again in eval mode under the same trace
and matches calls by (owner, call index): a call the eval forward does not
make is an error naming it.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from .norms import NormSpec, norm_candidate, recognize_norm

__all__ = ["Site", "AttentionSite", "Discovery", "discover", "Trace", "call_inputs"]

# Functions whose output is their first argument's value (for structure:
# a cast or a layout change between the dropout and the add or norm).
_PASS_THROUGH = {"to", "float", "double", "half", "bfloat16", "type_as", "contiguous", "clone", "view_as"}
_ADD = {"add", "__add__", "__radd__", "add_", "__iadd__"}
_SOFTMAX = {"softmax", "_softmax"}
_MATMUL = {"matmul", "__matmul__", "bmm"}
# Metadata reads, not uses of a tensor's values.
_METADATA = {"__get__", "size", "dim", "numel", "stride", "is_contiguous", "__len__", "data_ptr",
             "is_floating_point", "element_size", "get_device", "__format__", "__repr__"}


@dataclass(frozen=True)
class Site:
    """A dropout→norm site: ``dropout`` and ``norm`` call names, ``form``
    (``plain``/``bypass``/``compound``/``entangled``), the dropout's ``p``,
    ``norm2`` for a compound site, and for an entangled site the
    ``reason``."""

    dropout: str
    norm: str
    form: str
    p: float
    norm2: Optional[str] = None
    reason: str = ""

    @property
    def name(self) -> str:
        return "->".join(self.as_tuple())

    def as_tuple(self) -> Tuple[str, ...]:
        return (self.dropout, self.norm) + ((self.norm2,) if self.norm2 else ())


@dataclass(frozen=True)
class AttentionSite:
    """An attention dropout: ``call`` (``owner:dropout`` eager,
    ``owner:sdpa`` SDPA, or an ``nn.MultiheadAttention``'s module name),
    ``kind`` (``eager``/``sdpa``/``mha``), ``owner`` (the module the call
    runs in) and ``p``."""

    call: str
    kind: str
    owner: str
    p: float


@dataclass
class Discovery:
    """What one train-mode forward showed: ``sites`` (every dropout→norm
    site, entangled ones included, in forward order), ``attention``,
    ``dropouts`` (every dropout call → its ``p``; 0 for a call with
    ``training=False``), ``norms`` (norm call → the module's
    :class:`~dropmc.norms.NormSpec`), ``norm_modules`` (norm call → module
    name), ``refused`` (norm-like module → why it is not read as a norm)
    ``dropout_modules`` (module names of the ``nn.Dropout``\\ s called) and
    ``call_modules`` (every dropout, norm and attention call → the module it
    is: the ``nn.Dropout`` or norm itself, or for a functional call the
    module it runs in). :meth:`module_of` reads the last."""

    sites: List[Site] = field(default_factory=list)
    attention: List[AttentionSite] = field(default_factory=list)
    dropouts: Dict[str, float] = field(default_factory=dict)
    norms: Dict[str, NormSpec] = field(default_factory=dict)
    norm_modules: Dict[str, str] = field(default_factory=dict)
    refused: Dict[str, str] = field(default_factory=dict)
    dropout_modules: List[str] = field(default_factory=list)
    call_modules: Dict[str, str] = field(default_factory=dict)

    def module_of(self, call: str) -> str:
        """The module name of a dropout, norm or attention call (a
        functional call's owner; ``""`` is the model itself)."""
        if call not in self.call_modules:
            raise KeyError(f"{call!r} is not a call of the traced forward")
        return self.call_modules[call]

    def sites_line(self) -> str:
        """The ``sites=[...]`` argument naming every clean site (paste it
        to audit a subset)."""
        clean = [s.as_tuple() for s in self.sites if s.form != "entangled"]
        return "sites=[" + ", ".join(repr(t) for t in clean) + "]"

    def summary(self) -> str:
        """The dropout and norm calls seen (for messages)."""
        drops = ", ".join(f"{k} (p={v:g})" for k, v in self.dropouts.items()) or "none"
        norms = ", ".join(f"{k} ({s.kind})" for k, s in self.norms.items()) or "none"
        out = f"dropout calls: {drops}; norm calls: {norms}"
        if self.refused:
            out += "; not read as norms: " + "; ".join(f"{k}: {v}" for k, v in self.refused.items())
        return out


def call_inputs(inputs=None, kwargs=None) -> Tuple[tuple, dict]:
    """``(args, kwargs)`` of the forward from the audit's ``inputs`` (a
    tensor, a tuple of positional arguments, or a dict of keyword ones) and
    extra ``kwargs``."""
    kwargs = dict(kwargs or {})
    if inputs is None:
        return (), kwargs
    if isinstance(inputs, dict):
        overlap = set(inputs) & set(kwargs)
        if overlap:
            raise ValueError(f"inputs given twice: {sorted(overlap)}")
        return (), {**inputs, **kwargs}
    return (inputs if isinstance(inputs, tuple) else (inputs,)), kwargs


def _tensors(obj) -> List[torch.Tensor]:
    return [t for t in tree_flatten(obj)[0] if isinstance(t, torch.Tensor)]


def _name_of(func) -> str:
    return getattr(func, "__name__", "")


_DROPOUT_SIG = inspect.signature(lambda input, p=0.5, training=True, inplace=False: None)
_SDPA_SIG = inspect.signature(lambda query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                              scale=None, enable_gqa=False: None)


class Trace:
    """The data-flow trace of one forward (module docs). ``keep`` names the
    calls whose tensors to record: for a dropout call its input (and for an
    eager attention dropout the values it multiplies), for a norm call its
    input (and output), for an SDPA call its arguments and output."""

    def __init__(self, model: nn.Module, keep: Optional[set] = None):
        self.model = model
        self.names = {m: n for n, m in model.named_modules()}
        self.keep = keep or set()
        self.info: Dict[int, tuple] = {}  # id(tensor) -> (deps, origin)
        self.alive: List[torch.Tensor] = []  # keeps ids unique during the forward
        self.stack: List[str] = []
        self.counts: Dict[str, int] = {}
        self.dropout_p: Dict[str, float] = {}
        self.dropout_origin: Dict[str, tuple] = {}
        self.dropout_module: Dict[str, str] = {}
        self.sdpa_p: Dict[str, float] = {}
        self.norm_calls: List[Tuple[str, str, tuple]] = []  # (call, module name, input origin)
        self.norm_out: Dict[int, str] = {}  # id(norm output) -> norm call
        self.uses: Dict[str, int] = {}  # norm call -> uses of its output
        self.first_input: Dict[str, torch.Tensor] = {}  # norm-candidate module -> first input
        self.mha: List[str] = []
        self.recorded: Dict[str, Any] = {}
        self.quiet = False

    # -- tensor bookkeeping
    def deps(self, t) -> frozenset:
        rec = self.info.get(id(t))
        return rec[0] if rec else frozenset()

    def origin(self, t) -> tuple:
        rec = self.info.get(id(t))
        return rec[1] if rec else ("other",)

    def tag(self, t, deps, origin):
        self.info[id(t)] = (deps, origin)
        self.alive.append(t)

    def next_call(self, base: str, sep: str = "#") -> str:
        k = self.counts.get(base, 0)
        self.counts[base] = k + 1
        return base if k == 0 else f"{base}{sep}{k}"

    def owner(self) -> str:
        return self.stack[-1] if self.stack else ""

    def functional_base(self, kind: str) -> str:
        owner = self.owner()
        return f"{owner}:{kind}" if owner else kind

    # -- the mode
    def on_call(self, func, args, kwargs):
        if self.quiet:  # the trace's own bookkeeping (copies made in hooks)
            return func(*args, **kwargs)
        name = _name_of(func)
        if func is F.dropout:
            return self.on_dropout(func, args, kwargs)
        if func is F.scaled_dot_product_attention:
            return self.on_sdpa(func, args, kwargs)
        ins = _tensors((args, kwargs))
        if name not in _METADATA:
            for t in ins:
                call = self.norm_out.get(id(t))
                if call is not None:
                    self.uses[call] = self.uses.get(call, 0) + 1
        deps = frozenset().union(*(self.deps(t) for t in ins)) if ins else frozenset()
        origin: tuple = ("other",)
        if name in _ADD and len(args) >= 2 and all(isinstance(a, torch.Tensor) for a in args[:2]) \
                and kwargs.get("alpha", 1) == 1:
            origin = ("add", ((self.origin(args[0]), self.deps(args[0])),
                              (self.origin(args[1]), self.deps(args[1]))))
        elif name in _SOFTMAX:
            origin = ("softmax",)
        elif name in _PASS_THROUGH and args and isinstance(args[0], torch.Tensor):
            origin = self.origin(args[0])
        elif name in _MATMUL and len(args) >= 2:
            o = self.origin(args[0])
            if o[0] == "dropout" and o[1] in self.keep and isinstance(args[1], torch.Tensor):
                self.recorded.setdefault(("values", o[1]), self.copy(args[1]))
        out = func(*args, **kwargs)
        if name in _METADATA:
            return out
        outs = _tensors(out)
        inplace = name.endswith("_") or name in ("__setitem__", "__iadd__") or "out" in kwargs
        if inplace and args and isinstance(args[0], torch.Tensor):
            self.tag(args[0], deps, origin if name in _ADD else ("other",))
        in_ids = {id(t) for t in ins}
        for t in outs:
            if id(t) in in_ids and not inplace:
                self.tag(t, self.deps(t) | deps, self.origin(t))
            else:
                self.tag(t, deps, origin)
        return out

    def on_dropout(self, func, args, kwargs):
        b = _DROPOUT_SIG.bind(*args, **kwargs)
        b.apply_defaults()
        x, p, training = b.arguments["input"], float(b.arguments["p"]), bool(b.arguments["training"])
        owner = self.owner()
        module = self.name_to_module(owner)
        if isinstance(module, nn.modules.dropout._DropoutNd):
            call = self.next_call(owner)
            self.dropout_module[call] = owner
        else:
            call = self.next_call(self.functional_base("dropout"))
        self.dropout_p[call] = p if training else 0.0
        in_origin = self.origin(x)
        self.dropout_origin[call] = in_origin
        if call in self.keep:
            self.recorded[("input", call)] = self.copy(x)
        deps = self.deps(x)
        out = func(*args, **kwargs)
        if out is x and not b.arguments["inplace"]:
            out = x.view_as(x)
        self.tag(out, deps | ({call} if training and p > 0 else set()), ("dropout", call))
        return out

    def on_sdpa(self, func, args, kwargs):
        b = _SDPA_SIG.bind(*args, **kwargs)
        b.apply_defaults()
        a = b.arguments
        call = self.next_call(self.functional_base("sdpa"))
        p = float(a["dropout_p"])
        self.sdpa_p[call] = p
        ins = _tensors((args, kwargs))
        deps = frozenset().union(*(self.deps(t) for t in ins))
        out = func(*args, **kwargs)
        if call in self.keep:
            self.recorded[("sdpa", call)] = dict(a, output=self.copy(out))
        self.tag(out, deps | ({call} if p > 0 else set()), ("other",))
        return out

    def copy(self, t):
        """A detached copy of ``t`` made outside the trace."""
        self.quiet = True
        try:
            return t.detach().clone()
        finally:
            self.quiet = False

    def name_to_module(self, name):
        return self._modules.get(name) if hasattr(self, "_modules") else None

    # -- module hooks
    def run(self, args, kwargs, norm_modules: Optional[set] = None):
        """Runs ``model(*args, **kwargs)`` under the trace. ``norm_modules``
        (names) are the modules whose calls are norm calls; None: every
        norm candidate (discovery)."""
        self._modules = dict(self.model.named_modules())
        candidates = {m for m in self._modules.values() if norm_candidate(m)} if norm_modules is None \
            else {self._modules[n] for n in norm_modules}
        handles = []

        def pre(module, a, kw):
            name = self.names.get(module, "")
            self.stack.append(name)
            if isinstance(module, nn.MultiheadAttention):
                self.mha.append(name)
            if module in candidates:
                x = a[0] if a else next(iter(_tensors(kw)), None)
                if isinstance(x, torch.Tensor):
                    call = self.next_call("norm:" + name)[len("norm:"):]
                    self.norm_calls.append((call, name, self.origin(x), self.deps(x)))
                    if name not in self.first_input:
                        self.first_input[name] = self.copy(x)
                    if call in self.keep:
                        self.recorded[("input", call)] = self.copy(x)
                    module._dropmc_call = call
            return None

        def post(module, a, kw, out):
            if self.stack:
                self.stack.pop()
            call = module.__dict__.pop("_dropmc_call", None)
            if call is not None and isinstance(out, torch.Tensor):
                self.tag(out, self.deps(out), ("norm", call))
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
            with _Mode():
                return self.model(*args, **kwargs)
        finally:
            for h in handles:
                h.remove()
            for m in self._modules.values():
                m.__dict__.pop("_dropmc_call", None)
            self.alive.clear()
            self.info.clear()


def _sites_of(trace: Trace, norms: Dict[str, NormSpec], norm_module: Dict[str, str]) -> List[Site]:
    def is_site_dropout(call):
        return call in trace.dropout_p and trace.dropout_origin[call][0] != "softmax"

    calls = [c for c in trace.norm_calls if c[0] in norms]
    modules = trace._modules
    out: List[Site] = []
    compound_first = {}
    for call, name, origin, _ in calls:
        if origin[0] == "norm" and origin[1] in norms and trace.uses.get(origin[1], 0) == 1:
            first = origin[1]
            if isinstance(modules[norm_module[first]], nn.LayerNorm) and isinstance(modules[name], nn.LayerNorm):
                compound_first[first] = call
    for call, name, origin, _ in calls:
        if origin[0] == "dropout" and is_site_dropout(origin[1]):
            d = origin[1]
            if call in compound_first:
                out.append(Site(d, call, "compound", trace.dropout_p[d], norm2=compound_first[call]))
            else:
                out.append(Site(d, call, "plain", trace.dropout_p[d]))
        elif origin[0] == "add":
            (oa, da), (ob, db) = origin[1]
            for (o, _), (_, other_deps) in (((oa, da), (ob, db)), ((ob, db), (oa, da))):
                if o[0] == "dropout" and is_site_dropout(o[1]):
                    d = o[1]
                    if d in other_deps:
                        out.append(Site(d, call, "entangled", trace.dropout_p[d], reason=(
                            f"the bypass h of {call} also depends on {d}'s mask (h is not fixed "
                            "given the mask, as the closed forms assume)")))
                    else:
                        out.append(Site(d, call, "bypass", trace.dropout_p[d]))
    return out


def _attention_of(trace: Trace) -> List[AttentionSite]:
    out = []
    for call, p in trace.dropout_p.items():
        if trace.dropout_origin[call][0] == "softmax":
            owner = call.rsplit(":", 1)[0] if ":" in call else ""
            out.append(AttentionSite(call, "eager", owner, p))
    for call, p in trace.sdpa_p.items():
        owner = call.rsplit(":", 1)[0] if ":" in call else ""
        out.append(AttentionSite(call, "sdpa", owner, p))
    modules = trace._modules
    for name in dict.fromkeys(trace.mha):
        out.append(AttentionSite(name, "mha", name, float(modules[name].dropout)))
    return out


def discover(model: nn.Module, *args, norms: Optional[Dict[str, NormSpec]] = None, **kwargs) -> Discovery:
    """The sites of ``model`` from one train-mode forward on ``args`` /
    ``kwargs`` (module docs). ``norms`` maps module names to a
    :class:`NormSpec` for norms :func:`recognize_norm` cannot read (or to
    override it). The model's mode is restored; its RNG draws one set of
    dropout masks."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    norms = dict(norms or {})
    trace = Trace(model)
    was_training = model.training
    model.train()
    try:
        with torch.no_grad():
            trace.run(args, kwargs)
    finally:
        model.train(was_training)
    found = Discovery()
    specs: Dict[str, NormSpec] = {}
    for name, x in trace.first_input.items():
        if name in norms:
            specs[name] = norms[name]
            continue
        try:
            specs[name] = recognize_norm(trace._modules[name], x, name)
        except ValueError as e:
            if "norm" in type(trace._modules[name]).__name__.lower():
                found.refused[name] = str(e)
    for call, name, _, _ in trace.norm_calls:
        if name in specs:
            found.norms[call] = specs[name]
            found.norm_modules[call] = name
    found.dropouts = dict(trace.dropout_p)
    found.dropout_modules = list(dict.fromkeys(trace.dropout_module.values()))
    for call in list(trace.dropout_p) + list(trace.sdpa_p):
        found.call_modules[call] = trace.dropout_module.get(call, call.rsplit(":", 1)[0] if ":" in call else "")
    found.call_modules.update(found.norm_modules)
    for a in found.attention:
        found.call_modules.setdefault(a.call, a.owner)
    found.sites = _sites_of(trace, found.norms, found.norm_modules)
    found.attention = _attention_of(trace)
    return found
