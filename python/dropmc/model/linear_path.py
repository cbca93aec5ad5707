"""Linear-path sites: a dropout reaching its LayerNorm/RMSNorm through
maps linear in the masked operand (docs/linear-path.md).

``Dropout(u) → Linear(W, b) → (+h) → norm``, and attention: dropped rows →
value product → heads joined → ``o_proj`` → ``(+h)`` → norm. Ops are read
by what they do to the masked operand, not by their name: a linear layer
is ``F.linear`` or ``addmm(b, x, weight)`` (GPT-2's ``Conv1D``, ``W =
weightᵀ``); the value product is a ``matmul``/``bmm``, a two-operand
``einsum`` or an SDPA call (its rows rebuilt), all read as one form by
:mod:`dropmc.model.attention_product`. Each path is confirmed on the forward's
own tensors (:func:`_reproduces`). Its own small tracer (a
``TorchFunctionMode``) runs in one eval forward; the captured ``u``, ``W``,
``b``, ``h`` and norm go to the Rust audit (per token the truth
``E[norm(y)]`` by sampling masks through the path, the eval output and the
first-order output ``β + c (LN(ȳ) − β)``, ``c² = (V(ȳ) + ε)/(V(ȳ) +
tr(CΣC)/d + ε)``). ``first_order_torch`` is that correction in torch.

:func:`find_linear_paths` runs the tracer in an eval forward of its own;
``dropmc.torch.audit`` enters it (:func:`path_tracer`) inside its capture
forward and reads the sites with :func:`paths_of`, the dropout calls'
rates from discovery (:func:`rates_of`).
"""

from __future__ import annotations

import json as _json
from contextlib import contextmanager
from typing import Any, Dict, List, Optional

import numpy as _np

from .. import _dropmc
from .calls import call_name, module_of
from .path_hooks import path_hooks

__all__ = ["LinearPathSite", "find_linear_paths", "rates_of", "path_tracer", "paths_of", "audit_linear",
           "first_order_torch"]


#: Relative agreement of the captured path's eval forward with the norm's
#: input: float32 rounding over the path is ~1e-7 per term, relative to the
#: sum of absolute terms; a moved token or a missed op is O(1) off.
REPRODUCE_TOLERANCE = 1e-4


class LinearPathSite(dict):
    """One found path: ``name``, ``kind`` ('linear' or 'attention'), ``p``,
    ``transposed`` (the layer's weight is ``Wᵀ``: GPT-2's ``Conv1D``),
    ``u`` (tokens × m; an attention site has ``shape`` ``(B, H, L, S, J)``,
    ``probs`` and ``values`` instead), ``h`` (tokens ×
    d), ``w`` (d × m), ``b`` (d), ``gamma``, ``beta`` (``None`` for RMSNorm),
    ``eps``, ``norm`` ('layer' or 'rms'); after ``audit_linear`` also
    ``truth``, ``truth_se``, ``eval``, ``first_order``, ``eval_gap``,
    ``first_order_gap`` (numpy arrays, tokens × d; gaps per token).
    An attention site's ``probs`` and ``values`` become float64 arrays on
    first access (``site["probs"]``): a site listed without sampling never
    pays for the copy (BERT-base at 4 × 256: 12 × 4 M entries)."""

    def __missing__(self, key):
        t = self.__dict__.get("tensors", {}).pop(key, None)
        if t is None:
            raise KeyError(key)
        self[key] = value = t.detach().to("cpu").double().contiguous().reshape(-1).numpy()
        return value


def _tracer_class():
    import torch
    import torch.nn.functional as F
    from torch.overrides import TorchFunctionMode

    adds = {torch.add, torch.Tensor.add, torch.Tensor.__add__, torch.Tensor.__radd__}
    passes = {getattr(torch.Tensor, n) for n in ("transpose", "contiguous", "reshape", "view", "to")}
    matmuls = {torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.bmm, torch.Tensor.bmm}
    addmms = {torch.addmm, torch.Tensor.addmm}  # Conv1D (GPT-2): bias + x @ weight, W = weightᵀ
    norms = {F.layer_norm: "layer"}
    if hasattr(F, "rms_norm"):
        norms[F.rms_norm] = "rms"

    class Tracer(TorchFunctionMode):
        """Records the producer of every tensor the recorded ops return."""

        def __init__(self, rates=None):
            super().__init__()
            self.rates: Dict[str, tuple] = dict(rates or {})  # call -> (p, attention): discovery's
            self.nodes: List[Dict[str, Any]] = []
            self.producer: Dict[int, Dict[str, Any]] = {}
            self.attention_p: Optional[float] = None  # set while an attention module runs
            self.norm_inputs: List[Dict[str, Any]] = []
            self.stack: List[tuple] = []  # (name, module) of the modules running
            self.counts: Dict[str, int] = {}

        def call_name(self, base: str) -> str:
            """Discovery's name of a call (``base``, then ``base#k``)."""
            k = self.counts.get(base, 0)
            self.counts[base] = k + 1
            return call_name(base, k)

        def dropout_call(self) -> str:
            """An ``nn.Dropout``'s call is its module's name; a functional
            call is ``owner:dropout`` (discovery's names)."""
            import torch.nn as nn

            name, mod = self.stack[-1] if self.stack else ("", None)
            if isinstance(mod, nn.modules.dropout._DropoutNd):
                return self.call_name(name)
            return self.call_name(f"{name}:dropout" if name else "dropout")

        def _node(self, out, **node):
            self.nodes.append(node)  # keeps the tensors alive: ids stay unique
            node["out"] = out
            self.producer[id(out)] = node

        def _sdpa(self, out, args, kwargs):
            """An SDPA call: one attention product (:func:`dropmc.model.attention_product.product_tensors`)
            at discovery's train-mode rate (``owner:sdpa``), else the module's."""
            from .attention_product import SDPA_SIGNATURE

            a = SDPA_SIGNATURE.bind(*args, **kwargs)
            a.apply_defaults()
            call = self.call_name(f"{self.stack[-1][0]}:sdpa" if self.stack and self.stack[-1][0] else "sdpa")
            p = self.attention_p if self.attention_p is not None else float(a.arguments["dropout_p"])
            self._node(out, op="sdpa", call=call, p=self.rates.get(call, (p,))[0], attention=True,
                       args=dict(a.arguments, output=out))

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if func is F.dropout:
                p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
                # An attention module passes p = 0 in eval: its own rate counts (discovery's
                # train-mode rate when given: BERT's reads self.dropout.p only in training).
                call = self.dropout_call()
                attention = self.attention_p is not None
                p = self.attention_p if attention else float(p)
                if call in self.rates:
                    p, attention = self.rates[call]
                # In eval a dropout returns its input itself: keep that tensor's producer.
                self._node(out, op="dropout", x=args[0], p=p, attention=attention, call=call,
                           before=self.producer.get(id(out)) if out is args[0] else None)
            elif func in passes and args and isinstance(args[0], torch.Tensor) and out is not args[0]:
                self._node(out, op="pass", x=args[0])
            elif func in matmuls and len(args) == 2:
                self._node(out, op="matmul", x=args[0], v=args[1])
            elif func is torch.einsum and isinstance(args[0], str) and len(args) > 1:
                operands = list(args[1]) if len(args) == 2 and isinstance(args[1], (list, tuple)) else list(args[1:])
                self._node(out, op="einsum", eq=args[0], operands=operands)
            elif func is F.scaled_dot_product_attention:
                self._sdpa(out, args, kwargs)
            elif func in addmms and len(args) == 3 and kwargs.get("beta", 1) == 1 and kwargs.get("alpha", 1) == 1 \
                    and args[2].dim() == 2:
                self._node(out, op="linear", x=args[1], w=args[2].t(), b=args[0], transposed=True,
                           module=self.stack[-1][0] if self.stack else "")
            elif func is F.linear:
                bias = kwargs.get("bias", args[2] if len(args) > 2 else None)
                w = kwargs.get("weight", args[1] if len(args) > 1 else None)
                self._node(out, op="linear", x=args[0], w=w, b=bias, module=self.stack[-1][0] if self.stack else "")
            elif func in adds and len(args) == 2 and all(isinstance(a, torch.Tensor) for a in args):
                self._node(out, op="add", a=args[0], b=args[1])
            elif func in norms:
                kind = norms[func]
                get = lambda i, k, d=None: kwargs.get(k, args[i] if len(args) > i else d)  # noqa: E731
                if kind == "layer":
                    w, b, eps = get(2, "weight"), get(3, "bias"), get(4, "eps", 1e-5)
                else:
                    w, b, eps = get(2, "weight"), None, get(3, "eps", None)
                owner = self.stack[-1][0] if self.stack else "norm"
                self._node(out, op="norm", kind=kind, x=args[0], w=w, b=b, eps=eps, name=self.call_name(owner))
            return out

    return Tracer


def _producer(tracer, t, through_dropouts=False):
    """The first recorded op behind ``t`` that is not a reshape, transpose,
    ``contiguous`` or dtype cast (nor, with ``through_dropouts``, a further
    dropout: inactive in the site's Monte Carlo, where only the site's own
    dropout draws masks, it is the identity)."""
    node = tracer.producer.get(id(t))
    while node is not None and (node["op"] == "pass" or (through_dropouts and node["op"] == "dropout")):
        node = node["before"] if node["op"] == "dropout" and node["x"] is node["out"] else \
            tracer.producer.get(id(node["x"]))
    return node


def _linear_from(tracer, t):
    """``(linear, dropout, product)`` behind ``t``: a ``Linear`` whose input a
    dropout produced (``product`` None), or one whose input is an attention
    product of dropped rows — a ``matmul``/``bmm``/``einsum`` whose rows an
    attention dropout produced, or an SDPA call (its own ``dropout``)."""
    node = _producer(tracer, t, through_dropouts=True)
    if node is None or node["op"] != "linear":
        return None
    inner = _producer(tracer, node["x"])
    product = None
    if inner is not None and inner["op"] == "sdpa":
        return (node, inner, inner) if inner["p"] and inner["p"] > 0.0 else None
    if inner is not None and inner["op"] == "matmul":
        product, inner = inner, _producer(tracer, inner["x"])
    elif inner is not None and inner["op"] == "einsum" and len(inner["operands"]) == 2:
        rows = [(k, _producer(tracer, x)) for k, x in enumerate(inner["operands"])]
        rows = [(k, d) for k, d in rows if d is not None and d["op"] == "dropout" and d["attention"]]
        if len(rows) != 1:
            return None
        product, inner = dict(inner, rows_at=rows[0][0]), rows[0][1]
    if inner is None or inner["op"] != "dropout" or not inner["p"] or inner["p"] <= 0.0:
        return None
    if inner["attention"] != (product is not None):
        return None
    return node, inner, product


def _as_rows(t, width: int) -> _np.ndarray:
    return t.detach().to("cpu", copy=True).double().reshape(-1, width).numpy()


def rates_of(found) -> Dict[str, tuple]:
    """``{call: (p, is_attention)}`` of every dropout and SDPA call a
    :class:`~dropmc.model.discovery.Discovery` saw at its train-mode rate, for :func:`find_linear_paths`."""
    eager = {a.call for a in found.attention if a.kind == "eager"}
    sdpa = {a.call: (float(a.p), True) for a in found.attention if a.kind == "sdpa"}
    return {**sdpa, **{call: (float(p), call in eager) for call, p in found.dropouts.items()}}


def find_linear_paths(model, inputs, kwargs: Optional[dict] = None, rates: Optional[dict] = None
                      ) -> List[LinearPathSite]:
    """Runs one eval forward of ``model(*inputs)`` (``inputs`` a tensor or a
    tuple) under the tracer and returns every ``Dropout → Linear → (+h) →
    norm`` and ``attention dropout → values → o_proj → (+h) → norm`` path
    it saw, captured (an attention site has ``kind`` 'attention' and
    ``probs``, ``values``, ``shape`` in place of ``u``). ``rates`` maps
    dropout calls (discovery's names) to ``(p, is_attention)`` as the
    train-mode forward showed them: an eval forward's call may pass
    ``p = 0`` (``dropout=0.0 if not self.training else p``, BERT's and most
    Hugging Face attentions) where the module has no ``attention_dropout``
    rate to read instead (:func:`rates_of`)."""
    import torch

    args = inputs if isinstance(inputs, (tuple, list)) else (inputs,)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), path_tracer(model, rates) as tracer, tracer:
            model(*args, **(kwargs or {}))
    finally:
        model.train(was_training)
    return paths_of(tracer)


@contextmanager
def path_tracer(model, rates: Optional[dict] = None):
    """The path tracer (a ``TorchFunctionMode``, not yet entered) with its
    hooks on ``model``, removed on exit: whoever runs the eval forward
    enters it — :func:`find_linear_paths`, or the audit's capture forward
    (:func:`dropmc.audit.capture_eval.capture_traced`), so that one forward serves
    both; :func:`paths_of` then reads what it recorded."""
    tracer = _tracer_class()(rates)
    handles = path_hooks(model, tracer)
    try:
        yield tracer
    finally:
        for h in handles:
            h.remove()


def paths_of(tracer) -> List[LinearPathSite]:
    """The captured sites of a forward the :func:`path_tracer` saw."""
    norms = [n for n in tracer.nodes if n["op"] == "norm"] + tracer.norm_inputs
    sites: List[LinearPathSite] = []
    for k, node in enumerate(norms):
        site = _capture(tracer, node, node.get("name") or f"norm[{k}]")
        if site is not None:
            sites.append(site)
    return sites


def _capture(tracer, node, name) -> Optional[LinearPathSite]:
    """The site ending at the norm ``node``, or None when its input is not
    a linear path from a dropout."""
    import torch

    y = node["x"]
    found, h = _linear_from(tracer, y), None
    if found is None:
        add = _producer(tracer, y, through_dropouts=True)
        if add is None or add["op"] != "add":
            return None
        for mine, other in ((add["a"], add["b"]), (add["b"], add["a"])):
            found = _linear_from(tracer, mine)
            if found is not None and other.shape == y.shape:
                h = other
                break
        else:
            return None
    lin, drop, product = found
    calls = (tracer.counts.get(module_of(drop["call"]), 1), tracer.counts.get(module_of(name), 1))
    w = lin["w"]
    d, m = w.shape
    if y.shape[-1] != d or node["w"] is None:
        return None
    eps = node["eps"] if node["eps"] is not None else torch.finfo(y.dtype).eps
    tokens = y.numel() // d
    site = LinearPathSite(
        name=f"{drop['call']}->{name}", dropout=drop["call"], norm_call=name, linear=lin["module"],
        calls=calls, p=float(drop["p"]), transposed=lin.get("transposed", False),
        h=_as_rows(h, d) if h is not None else _np.zeros((tokens, d)),
        w=w.detach().double().cpu().numpy(),
        b=_np.zeros(d) if lin["b"] is None else lin["b"].detach().double().cpu().numpy(),
        gamma=node["w"].detach().double().cpu().numpy().reshape(-1),
        beta=None if node["b"] is None else node["b"].detach().double().cpu().numpy().reshape(-1),
        eps=float(eps), norm=node["kind"],
    )
    if product is None:
        if not _reproduces(drop["x"], lin, h, y):
            return None
        site.update(kind="linear", u=_as_rows(drop["x"], m))
        return site
    from .attention_product import product_tensors

    got = product_tensors(product, drop.get("x"), m, _same)
    if got is None:
        return None
    probs, values, out = got
    if probs.dim() != 4 or values.dim() != 4 or out.dim() != 4:
        return None
    batch, heads, queries, keys = probs.shape
    dh = values.shape[-1]
    if heads * dh != m or values.shape[:3] != (batch, heads, keys) or batch * queries != tokens:
        return None
    if not _reproduces(out.transpose(1, 2), lin, h, y):
        return None
    site.update(kind="attention", shape=(batch, heads, queries, keys, dh))
    site.tensors = {"probs": probs, "values": values}  # float64 on first access (class docs)
    return site


def _same(a, b, h=None) -> bool:
    """``a`` and ``b`` (or ``b + h``) equal to rounding, row for row
    (``REPRODUCE_TOLERANCE`` of the sum of absolute terms)."""
    import torch

    if a is b or (h is None and a.dtype == b.dtype and torch.equal(a, b)) or (
            h is not None and a.dtype == b.dtype == h.dtype and torch.equal(a, b + h)):
        return True  # the same values: the forward's own add gives the same bits
    a, b = a.detach().to(torch.float64), b.detach().to(torch.float64)
    scale = a.abs() + b.abs()
    if h is not None:
        h = h.detach().to(torch.float64)
        b, scale = b + h, scale + h.abs()
    return bool(((a - b).abs() <= REPRODUCE_TOLERANCE * scale + torch.finfo(torch.float64).tiny).all())


def _reproduces(x, lin, h, y) -> bool:
    """Whether the captured path's eval forward gives the norm's input
    ``y`` row for row, to rounding: the linear layer's input is ``x`` (the
    dropout's input, or an attention site's value product with its heads
    joined: ``(B, L, H, J)``) as rows of ``m``, and ``y`` is its output plus
    ``h`` as rows of ``d`` — so an op the tracer passed as the identity but
    that moved tokens (a window transpose) or changed values leaves no site
    rather than a wrong one. The layer's own ``x Wᵀ + b`` is the forward's:
    compared as tensors, the check costs O(tokens · (m + d)), not a second
    pass through ``W``."""
    d, m = lin["w"].shape
    rows = lambda t, n: t.reshape(-1, n)  # noqa: E731
    if x.numel() != lin["x"].numel() or lin["out"].numel() != y.numel():
        return False
    return _same(rows(x, m), rows(lin["x"], m)) and _same(
        rows(y, d), rows(lin["out"], d), None if h is None else rows(h, d))


def audit_linear(model, inputs, samples: int = 20_000, seed: int = 1,
                 kwargs: Optional[dict] = None) -> List[LinearPathSite]:
    """Finds the model's linear-path sites (``find_linear_paths``) and
    audits each (:func:`audit_sites`)."""
    _check_budget(samples, seed)
    return audit_sites(find_linear_paths(model, inputs, kwargs), samples, seed)


def _check_budget(samples, seed) -> None:
    if not isinstance(samples, int) or isinstance(samples, bool) or samples < 2:
        raise ValueError(f"samples must be an int >= 2, got {samples!r}")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")


def sampling_work(site: LinearPathSite, samples: int) -> float:
    """Multiply-adds of auditing ``site`` at ``samples`` masks per token:
    per mask and token one pass through the path — the attention product
    ``Σ_s b_s v_s`` (heads × keys × head width) and the linear layer
    (``d × m``)."""
    d, m = site["w"].shape
    if site["kind"] == "attention":
        batch, heads, queries, keys, width = site["shape"]
        return float(batch * queries) * samples * (heads * keys * width + d * m)
    return float(site["u"].shape[0]) * samples * d * m


def audit_sites(sites: List[LinearPathSite], samples: int, seed: int, deadline=None) -> List[LinearPathSite]:
    """Audits each found site: per token the truth ``E[norm(y)]`` from
    ``samples`` masks, its standard error, the eval output and the
    first-order output, and the gaps ``mean_k |· − truth_k|``. ``deadline``:
    None, or a callable giving the seconds left for a site's sampling (the
    engine stops it there with a TimeoutError; Ctrl-C stops it too)."""
    _check_budget(samples, seed)
    for s in sites:
        left = None if deadline is None else deadline("linear-path audit")
        if s["kind"] == "attention":
            truth, se, ev, first, gaps = _dropmc.audit_attention_path(
                s["name"], s["p"], s["shape"], s["probs"], s["values"], s["w"], s["b"], s["h"],
                s["gamma"], s["beta"], s["eps"], samples, seed, left)
        else:
            truth, se, ev, first, gaps = _dropmc.audit_linear_path(
                s["name"], s["p"], s["u"], s["h"], s["w"], s["b"], s["gamma"], s["beta"],
                s["eps"], samples, seed, left)
        s["gaps"] = _json.loads(gaps)
        s["truth"], s["truth_se"] = _np.asarray(truth), _np.asarray(se)
        s["eval"], s["first_order"] = _np.asarray(ev), _np.asarray(first)
        s["eval_gap"] = _np.abs(s["eval"] - s["truth"]).mean(axis=1)
        s["first_order_gap"] = _np.abs(s["first_order"] - s["truth"]).mean(axis=1)
    return sites


def first_order_torch(u, mean, weight, p: float, gamma, beta=None, eps: float = 1e-5,
                      norms: Optional[tuple] = None):
    """The first-order output in torch for ``Dropout_p(u) → Linear(W) →
    (+h) → norm``: ``β + c (LN(ȳ) − β)`` (``beta`` given) or
    ``c_rms RMS(ȳ)`` (``beta=None``), ``ȳ = mean`` the eval input of the
    norm (tokens × d), ``u`` the dropout's input (tokens × m). ``c`` per
    token from ``(p/q) Σ_j u_j² ‖C w_j‖²`` (or ``‖w_j‖²``): pass ``norms``
    (``column_norms(weight)``) to reuse them across calls."""
    import torch

    if not 0.0 <= float(p) < 1.0:
        raise ValueError(f"p must be in [0, 1), got {p!r}")
    q = 1.0 - float(p)
    centred_sq, sq = norms if norms is not None else column_norms(weight)
    d = mean.shape[-1]
    u2 = u.to(centred_sq.dtype) ** 2
    y = mean.to(centred_sq.dtype)
    if beta is not None:
        trace = (p / q) * (u2 @ centred_sq)
        v = y.var(dim=-1, unbiased=False)
        c = torch.sqrt((v + eps) / (v + trace / d + eps))
        ln = (y - y.mean(dim=-1, keepdim=True)) / torch.sqrt(v + eps).unsqueeze(-1)
        out = beta + c.unsqueeze(-1) * (gamma * ln)
    else:
        trace = (p / q) * (u2 @ sq)
        r2 = (y * y).mean(dim=-1)
        c = torch.sqrt((r2 + eps) / (r2 + trace / d + eps))
        out = c.unsqueeze(-1) * gamma * y / torch.sqrt(r2 + eps).unsqueeze(-1)
    return out.to(mean.dtype)


def column_norms(weight):
    """``(‖C w_j‖², ‖w_j‖²)`` per column of ``weight`` (d × m), float64."""
    w = weight.detach().double()
    sq = (w * w).sum(dim=0)
    s = w.sum(dim=0)
    return sq - s * s / w.shape[0], sq
