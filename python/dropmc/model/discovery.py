"""Find a model's dropout→norm and attention-dropout sites from what one
forward does (no symbolic graph): the one site discovery of dropmc.

``discover(model, *args, **kwargs)`` runs ONE neutral train-mode forward
under :class:`dropmc.model.trace.Trace` (no mask is drawn: the structure does not
depend on the RNG; LayerDrop and drop-path draws are held at their likely
side, keeping every layer, and listed in ``Discovery.draws``) and reads the
data flow: every tensor knows the dropout calls it depends on, the ops on
the way from each, and how it was made.

Names. Each CALL is its own dropout: a module called ``k > 0`` times before
in the forward is ``name#k`` (``layers.0.dropout#1``); a functional call is
named by the module it runs in, ``owner:dropout`` (``owner:dropout#k``; at
the model's top level plain ``dropout``), an SDPA call ``owner:sdpa``, a
mask drawn with ``torch.rand``/``bernoulli`` and multiplied in
``owner:rand_mask`` (``#k``). A norm module's calls are ``name``,
``name#1``, ….

Sites, per call of a norm (a module :func:`dropmc.model.norms.recognize_norm`
reads as a LayerNorm or RMSNorm) whose input ``z`` is, up to ops that are
the identity per token (:mod:`dropmc.model.paths`: reshapes keeping the last
axis, transposes, ``roll``, ``detach``, casts, …),

* the output of a dropout call ``D``: *plain* ``D → norm``; when the
  norm is an ``nn.LayerNorm`` whose output's only use is a second
  ``nn.LayerNorm``, *compound* ``D → LN1 → LN2`` instead;
* ``a + b`` with ``a`` a dropout call ``D``'s output: *bypass* ``D → norm``
  with ``h = b`` — unless ``b`` itself depends on ``D``'s mask, which makes
  it *entangled*. A sum of several terms is read as its summands, whatever
  the bracketing (a parallel residual ``x + a + b``: two bypass sites); a
  summand below the top add only when the others carry no draw of it.

"Up to ops" means the layout steps of :mod:`dropmc.model.paths` (on any axis)
and gate steps (``dropout(v) ⊙ g``, :meth:`dropmc.model.trace.Trace.gate_step`);
which draws meet each row of the norm is read by
:func:`dropmc.model.masks.mask_info` (a row whose draws cannot be read is in
``Discovery.unread``).

A *mask product* is a dropout too: ``x · dropout(ones(shape))`` (ESMFold's
row/column dropout) and ``x · mask`` with a mask drawn by ``torch.rand`` /
``bernoulli`` and scaled by ``1/q`` (:mod:`dropmc.model.masks` says how the mask
is shared). Its ``v`` is ``x``.

Every dropout call's paths to the first norms it reaches are kept
(``Discovery.paths``: the ops on the way, e.g. ``linear:self_attn.o_proj``,
``add``): a path that is not a site says which op stops it.

Attention sites: an ``F.dropout`` whose input is a softmax (eager
attention), every ``F.scaled_dot_product_attention`` call with
``dropout_p > 0``, and every ``nn.MultiheadAttention`` the forward calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn

from .masks import MaskInfo, mask_info
from .norms import NormSpec, recognize_norm
from .paths import CASTS
from .trace import HELD_MASK, Trace, tensor_gate

__all__ = ["Site", "AttentionSite", "Path", "Discovery", "discover", "Trace", "call_inputs", "site_terms"]


@dataclass(frozen=True)
class Site:
    """A dropout→norm site: ``dropout`` and ``norm`` call names, ``form``
    (``plain``/``bypass``/``compound``/``entangled``), the dropout's ``p``,
    ``norm2`` for a compound site, for an entangled site the ``reason``,
    and for a mask product its :class:`~dropmc.model.masks.MaskInfo`."""

    dropout: str
    norm: str
    form: str
    p: float
    norm2: Optional[str] = None
    reason: str = ""
    mask: Optional[MaskInfo] = None
    # identity-per-token steps to the norm, the traced input left out (None): dropmc.correct.tapes
    tape: tuple = field(default=(), compare=False, repr=False)
    # a gated site's (module, call index, steps of ``tape`` before its output): _gate_capture
    capture: Optional[Tuple[str, int, int]] = field(default=None, compare=False, repr=False)

    @property
    def name(self) -> str:
        return "->".join(self.as_tuple())

    def as_tuple(self) -> Tuple[str, ...]:
        return (self.dropout, self.norm) + ((self.norm2,) if self.norm2 else ())


@dataclass(frozen=True)
class AttentionSite:
    """An attention dropout: ``call`` (``owner:dropout`` eager,
    ``owner:sdpa`` SDPA, or an ``nn.MultiheadAttention``'s module name),
    ``kind`` (``eager``/``sdpa``/``mha``), ``owner`` and ``p``; ``use``: how
    an eager call's output met the values (``matmul``, ``bmm``, ``einsum
    (not read)``, or ``""`` when it never did)."""

    call: str
    kind: str
    owner: str
    p: float
    use: str = ""


@dataclass(frozen=True)
class Path:
    """A dropout call's data-flow path to a norm it reaches before any other
    norm: ``ops`` (the first op labels on the way, ``length`` of them in
    all), the ``site`` form when the path is a site, else ``stop`` (the
    first op that is not an identity per token or the residual add)."""

    dropout: str
    norm: str
    ops: Tuple[str, ...]
    length: int
    site: str = ""
    stop: str = ""


@dataclass
class Discovery:
    """What one neutral train-mode forward showed: ``sites`` (every
    dropout→norm site, entangled ones included), ``attention``,
    ``dropouts`` (every dropout call and mask product → its ``p``; 0 for a
    call with ``training=False``), ``paths`` (:class:`Path`), ``norms``
    (norm call → :class:`~dropmc.model.norms.NormSpec`), ``norm_modules`` (norm
    call → module name), ``refused`` (norm-like module → why it is not read
    as a norm), ``dropout_modules``, ``call_modules`` (call → module; see
    :meth:`module_of`), ``draws`` (random draws held at their likely
    side that made no mask product: ``(draw, p, what)``; LayerDrop and
    drop-path among them), ``reasons`` (a dropout call no family reads →
    why: alpha dropout), ``held`` (a dropout call → the drawn mask over its
    output, drop-path after it: :mod:`dropmc.model.trace_masks`) and ``unread`` (``"dropout->norm"`` → why the path
    was found but its mask cannot be read against the norm's rows)."""

    sites: List[Site] = field(default_factory=list)
    attention: List[AttentionSite] = field(default_factory=list)
    dropouts: Dict[str, float] = field(default_factory=dict)
    paths: List[Path] = field(default_factory=list)
    norms: Dict[str, NormSpec] = field(default_factory=dict)
    norm_modules: Dict[str, str] = field(default_factory=dict)
    refused: Dict[str, str] = field(default_factory=dict)
    dropout_modules: List[str] = field(default_factory=list)
    call_modules: Dict[str, str] = field(default_factory=dict)
    draws: List[Tuple[str, float, str]] = field(default_factory=list)
    reasons: Dict[str, str] = field(default_factory=dict)
    unread: Dict[str, str] = field(default_factory=dict)
    module_calls: Dict[str, int] = field(default_factory=dict)  # module -> its calls in the forward
    held: Dict[str, str] = field(default_factory=dict)  # dropout call -> the drawn mask over its output

    def module_of(self, call: str) -> str:
        """The module name of a dropout, norm or attention call (a
        functional call's owner; ``""`` is the model itself)."""
        if call not in self.call_modules:
            raise KeyError(f"{call!r} is not a call of the traced forward")
        return self.call_modules[call]

    def norm_dropouts(self) -> List[str]:
        """The dropout calls that are not attention dropouts."""
        att = {a.call for a in self.attention}
        return [c for c in self.dropouts if c not in att]

    def sites_line(self, limit: Optional[int] = None) -> str:
        """The ``sites=[...]`` argument naming every clean site (the first
        ``limit`` of them and their count when given: for messages)."""
        clean = [s.as_tuple() for s in self.sites if s.form != "entangled"]
        more = f", … ({len(clean) - limit} more)" if limit is not None and len(clean) > limit else ""
        return "sites=[" + ", ".join(repr(t) for t in clean[:limit]) + more + "]"

    def summary(self, limit: int = 12) -> str:
        """The dropout and norm calls seen (for messages; at most ``limit``
        of each named)."""
        def some(items):
            items = list(items)
            more = f", … ({len(items) - limit} more)" if len(items) > limit else ""
            return ", ".join(items[:limit]) + more if items else "none"

        drops = some(f"{k} (p={v:g})" for k, v in self.dropouts.items())
        norms = some(f"{k} ({s.kind})" for k, s in self.norms.items())
        out = f"{len(self.dropouts)} dropout calls: {drops}; {len(self.norms)} norm calls: {norms}"
        if self.refused:
            out += "; not read as norms: " + some(f"{k}: {v}" for k, v in self.refused.items())
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


def _leaves(origin: tuple, deps, after: tuple, depth: int = 0) -> List[tuple]:
    """The terms of a sum tree: ``(origin, deps, tape after it, depth)``
    per summand that is not itself an add (``(a + b) + c`` and ``a + (b +
    c)`` alike; depth 1: a summand of the top add)."""
    kind, payload, tape = origin
    if kind != "add":
        return [(origin, deps, after, depth)]
    return [leaf for o, d in payload for leaf in _leaves(o, d, tape + after, depth + 1)]


def _under(call: str, tape: tuple, nested: Dict[str, tuple]) -> List[Tuple[str, tuple]]:
    """``(call, tape)`` and, when ``call`` is a drawn mask over another
    dropout's output (``Trace.nested``, :mod:`dropmc.model.trace_masks`), that
    dropout's term through it: its tape up to the mask, then ``tape``."""
    out = [(call, tape)]
    while call in nested:
        _, call, inner = nested[call]
        tape = inner + tape
        out.append((call, tape))
    return out


def site_terms(origin: tuple, nested: Optional[Dict[str, tuple]] = None) -> List[tuple]:
    """The dropout terms of a norm input with this origin: ``(call, form,
    tape, other_deps)`` with ``form`` ``plain`` or ``bypass`` and ``tape``
    the steps from the dropout's output (or mask product) to the norm
    input; ``other_deps`` the dropout calls the rest of the input depends
    on. A sum of any bracketing is read as its summands: a dropout term is
    a bypass site whose ``h`` is the other summands — a term nested deeper
    than the top add only when they carry no draw of it (an earlier layer's
    dropout that every later layer reads is not reported again at every
    later norm: module docs). A dropout under a drawn mask (``nested``:
    ``Trace.nested``) is a term too, the mask at its eval value."""
    nested = nested or {}
    kind, payload, tape = origin
    if kind == "dropout":
        return [(c, "plain", t, frozenset()) for c, t in _under(payload, tape, nested)]
    if kind != "add":
        return []
    leaves = _leaves(origin, frozenset(), ())
    out = []
    for i, (o, _, after, depth) in enumerate(leaves):
        if o[0] != "dropout":
            continue
        other = frozenset().union(*(d for j, (_, d, _, _) in enumerate(leaves) if j != i))
        if depth == 1 or o[1] not in other:
            out.extend((c, "bypass", t, other) for c, t in _under(o[1], o[2] + after, nested))
    return out


_STOP_FREE = {"add", "__add__", "__radd__", "add_", "__iadd__"}


def _identity_ops() -> set:
    """The ops that are the identity per token (and the adds)."""
    from .paths import _AXES, _INDEX, _REPEAT, _SHAPE

    return CASTS | _SHAPE | _AXES | _INDEX | _REPEAT | {"roll", "gate", HELD_MASK} | _STOP_FREE


def beyond_linear(ops: Tuple[str, ...]) -> Optional[str]:
    """The first op of a path that neither the identity-per-token steps nor
    the linear-path family (linear layers, adds, further dropouts) admit —
    a nonlinearity such as ``gelu`` — or ``None``."""
    admitted = _identity_ops() | {"linear", "dropout"}
    return next((op for op in ops if op.split(":", 1)[0] not in admitted), None)


def _stop(ops: Tuple[str, ...]) -> str:
    identity = _identity_ops()
    adds = 0
    for op in ops:
        base = op.split(":", 1)[0]
        if base in _STOP_FREE:
            adds += 1
            continue
        if base not in identity:
            return op
    if adds > 1:
        return "a later residual add (the layers between read this dropout: entangled)"
    return "an op that mixes the normalized axis"


def _mask_of(trace: Trace, call: str, spec: NormSpec, tape) -> Optional[MaskInfo]:
    """How ``call``'s draws meet the norm's rows (:func:`dropmc.model.masks.mask_info`):
    a mask product's or channel dropout's record, else an elementwise mask
    of the dropout's input shape (None when each row holds distinct draws
    and no axis shares them: the plain elementwise case)."""
    if call in trace.sources:
        return mask_info(trace.sources[call], spec.d, tape, spec.axis)
    shape, p = trace.dropout_shape[call], trace.dropout_p[call]
    info = mask_info({"mask_shape": shape, "value_shape": shape, "out_shape": shape, "kind": "dropout",
                      "scale": 1.0 / (1.0 - p) if p < 1 else float("inf"), "p": p}, spec.d, tape, spec.axis)
    return None if info.kind == "elementwise" and not info.shared else info


def _gate_capture(trace: Trace, call: str, tape) -> Optional[Tuple[str, int, int]]:
    """Where ``correct`` captures a gated site's ``v ⊙ g`` (``dropout(v) ⊙
    g`` with ``g`` a tensor, remade each forward): the innermost module
    whose output is the dropout's output through every tensor gate of the
    site's tape (:meth:`dropmc.model.trace.Trace.gated_output`), as ``(module,
    call index, steps of the tape up to that output)``; None for a tape
    without a tensor gate, or when no module returns the gated product."""
    gates = [i for i, step in enumerate(tape) if tensor_gate(step)]
    if not gates:
        return None
    for name, k, steps in trace.gate_outputs.get(call, []):
        if gates[-1] < len(steps) <= len(tape) and all(a is b for a, b in zip(steps, tape)):
            return name, k, len(steps)
    return None


def _sites_of(trace: Trace, norms: Dict[str, NormSpec], norm_module: Dict[str, str],
              unread: Dict[str, str]) -> List[Site]:
    def is_site_dropout(call):
        return call in trace.dropout_p and trace.dropout_origin.get(call, ("other",))[0] != "softmax" \
            and call not in trace.dropout_reason

    calls = [c for c in trace.norm_calls if c[0] in norms]
    modules = trace._modules
    out: List[Site] = []
    compound_first = {}
    for call, name, origin, _, _ in calls:
        if origin[0] == "norm" and origin[1] in norms and trace.uses.get(origin[1], 0) == 1 and not origin[2]:
            first = origin[1]
            if all(isinstance(modules[n], nn.LayerNorm) for n in (norm_module[first], name)):
                compound_first[first] = call
    for call, name, origin, _, _ in calls:
        for d, form, tape, other in site_terms(origin, trace.nested):
            if not is_site_dropout(d):
                continue
            p = trace.dropout_p[d]
            try:
                mask = _mask_of(trace, d, norms[call], tape)
            except ValueError as e:
                unread[f"{d}->{call}"] = f"{d} reaches {call}, but {e}"
                continue
            if d in other:
                out.append(Site(d, call, "entangled", p, mask=mask, reason=(
                    f"the bypass h of {call} also depends on {d}'s mask (h is not fixed "
                    "given the mask, as the closed forms assume)")))
            elif form == "plain" and call in compound_first and mask is None:
                out.append(Site(d, call, "compound", p, norm2=compound_first[call]))
            else:
                out.append(Site(d, call, form, p, mask=mask, tape=tuple(
                    (f, tuple(None if i == k else a for i, a in enumerate(args)), kw, k) for f, args, kw, k in tape),
                    capture=_gate_capture(trace, d, tape)))
    return out


def _paths_of(trace: Trace, norms, sites: List[Site]) -> List[Path]:
    form = {(s.dropout, s.norm): s.form for s in sites}
    out = []
    for call, _, _, _, paths in trace.norm_calls:
        if call not in norms:
            continue
        for d, (ops, n) in paths.items():
            if d in trace.sdpa_p or trace.dropout_origin.get(d, ("other",))[0] == "softmax":
                continue
            f = form.get((d, call), "")
            out.append(Path(d, call, tuple(ops), n, f, "" if f else _stop(tuple(ops))))
    return out


def _attention_of(trace: Trace) -> List[AttentionSite]:
    out = []
    for call, p in trace.dropout_p.items():
        if trace.dropout_origin[call][0] == "softmax":
            owner = call.rsplit(":", 1)[0] if ":" in call else ""
            out.append(AttentionSite(call, "eager", owner, p, trace.attention_use.get(call, "")))
    for call, p in trace.sdpa_p.items():
        owner = call.rsplit(":", 1)[0] if ":" in call else ""
        out.append(AttentionSite(call, "sdpa", owner, p))
    for name in dict.fromkeys(trace.mha):
        out.append(AttentionSite(name, "mha", name, float(trace._modules[name].dropout)))
    return out


def run_neutral(model: nn.Module, trace: Trace, args, kwargs, training: bool, norm_modules=None, inner=None):
    """``trace.run`` with the model in train (or eval) mode, no grad; in
    train mode torch's own stateful modules (BatchNorm's running
    statistics, ``nn.MultiheadAttention``'s fused paths) stay in eval mode,
    so the neutral forward changes no buffer. The modes are restored.
    ``inner``: see :meth:`Trace.run`."""
    modes = {m: m.training for m in model.modules()}
    model.train(training)
    if training:
        for m in model.modules():
            if isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm)):
                m.eval()
    try:
        with torch.no_grad():
            return trace.run(args, kwargs, norm_modules=norm_modules, inner=inner)
    finally:
        for m, t in modes.items():
            m.training = t


def discover(model: nn.Module, *args, norms: Optional[Dict[str, NormSpec]] = None, **kwargs) -> Discovery:
    """The sites of ``model`` from one neutral train-mode forward on
    ``args`` / ``kwargs`` (module docs). ``norms`` maps module names to a
    :class:`NormSpec` for norms :func:`recognize_norm` cannot read (or to
    override it). The model's modes are restored; no mask is drawn."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    norms = dict(norms or {})
    trace = Trace(model)
    run_neutral(model, trace, args, kwargs, training=True)
    found = Discovery()
    specs: Dict[str, NormSpec] = {}
    for name, x in trace.first_input.items():
        if x.numel() == 0:
            raise ValueError(f"the input of norm {name!r} is empty (an empty batch: no token to audit)")
        if name in norms:
            specs[name] = norms[name]
            continue
        try:
            specs[name] = recognize_norm(trace._modules[name], x, name)
        except ValueError as e:
            if "norm" in type(trace._modules[name]).__name__.lower():
                found.refused[name] = str(e)
    for call, name, _, _, _ in trace.norm_calls:
        if name in specs:
            found.norms[call] = specs[name]
            found.norm_modules[call] = name
    found.dropouts = dict(trace.dropout_p)
    found.dropout_modules = list(dict.fromkeys(trace.dropout_module.values()))
    for call in list(trace.dropout_p) + list(trace.sdpa_p):
        found.call_modules[call] = trace.dropout_module.get(call, call.rsplit(":", 1)[0] if ":" in call else "")
    found.call_modules.update(found.norm_modules)
    found.sites = _sites_of(trace, found.norms, found.norm_modules, found.unread)
    found.reasons = dict(trace.dropout_reason)
    found.paths = _paths_of(trace, found.norms, found.sites)
    found.attention = _attention_of(trace)
    for a in found.attention:
        found.call_modules.setdefault(a.call, a.owner)
    found.draws = [w for w in trace.draws if w[0] not in trace.mask_draws]
    found.module_calls = dict(trace.module_calls)
    found.held = {inner[1]: mask for mask, inner in trace.nested.items()}
    return found
