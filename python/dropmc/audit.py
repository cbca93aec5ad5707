"""Audit a PyTorch model's dropout→norm sites on its own activations.

``audit_torch(model, inputs)`` finds the sites where a dropout's output
reaches a LayerNorm or RMSNorm directly (*plain*: ``norm(dropout(v))``),
through one residual add (*bypass*: ``norm(h + dropout(v))``), or through a
LayerNorm feeding a second LayerNorm directly (*compound*:
``LN2(LN1(dropout(v)))``, which replaces the plain ``LN1`` site), captures on
the user's inputs, with the model in eval mode, each site's pre-dropout
vector ``v``, bypass ``h`` and the norm's ``γ, β, ε``, and hands them to
dropmc's Rust engine, which computes per token the true
``E[norm(h + dropout(v))]`` (exact enumeration for ``d ≤ 16``, else the fast
site sampler), the eval output ``norm(h + v)``, the first-order correction
and the second-order one, and their gaps to the truth. See docs/audit.md.

Site finding (``audit_torch``): :func:`dropmc.discovery.discover`, one
train-mode forward under a ``TorchFunctionMode`` that records data flow
(each dropout call its own site; plain, bypass, compound and *entangled*
sites; norms recognised by :mod:`dropmc.norms`), then one eval-mode capture
forward (:mod:`dropmc.capture`) matching calls by (owner, call index).
:func:`find_sites` and :func:`capture_sites` are the older fx-based
helpers (traceable models only; the fx rule does not know entangled
sites), kept for their callers.

Attention sites: eager attention (``F.dropout`` on a softmax), SDPA calls
with ``dropout_p > 0`` and every ``nn.MultiheadAttention`` with
``dropout > 0`` the forward calls are audited with the attention family's
quantities on the model's own softmax rows (``audit.attention_sites``; see
docs/audit.md).
"""

from __future__ import annotations

import json as _json
import operator as _operator
from typing import Any, List, Optional, Sequence, Tuple

import numpy as _np

from . import _dropmc

__all__ = ["Audit", "audit_torch", "find_sites", "capture_sites", "audit_captures", "load",
           "find_attention_sites", "capture_attention_sites", "audit_attention_captures",
           "load_attention"]

#: Masks per token of the default budget (see docs/audit.md for what it
#: resolves): the Rust engine's ``dropmc::audit::DEFAULT_SAMPLES``.
DEFAULT_SAMPLES = int(_dropmc.AUDIT_DEFAULT_SAMPLES)

#: Mask draws per query, head and sampled coordinate of an attention site's
#: sampled check (``DEFAULT_ATTENTION_SAMPLES`` of src/audit/attention.rs).
DEFAULT_ATTENTION_SAMPLES = int(_dropmc.AUDIT_DEFAULT_ATTENTION_SAMPLES)


class Audit:
    """The audit of a model's sites: ``str(audit)`` is the table,
    ``audit.sites`` the per-site data (a list of dicts), ``audit.to_json()``
    the same as JSON, ``audit.truth(i)`` site ``i``'s per-token truth and its
    standard errors, ``audit.plot(path)`` one figure, ``audit.save(path)``
    the captured activations as an ``.npz`` for ``dropmc audit``.
    ``audit.attention_sites`` holds the attention sites' data (a second
    table in ``str(audit)``, the key ``attention_sites`` of ``to_json()``)
    and ``audit.attention_moments(i)`` site ``i``'s exact ``E[out]`` and
    ``Var(out)``."""

    def __init__(self, table: str, json_text: str, truths, captures, attention=None,
                 attention_captures: Sequence[dict] = ()):
        self._attention_captures = list(attention_captures)
        self._table = table
        self.sites: List[dict] = _json.loads(json_text)
        self._truths = truths
        self._captures = captures
        a_table, a_json, self._moments = attention if attention is not None else ("", "[]", [])
        self._attention_table = a_table
        self.attention_sites: List[dict] = _json.loads(a_json)
        #: Sites listed without numbers: entangled ones (the bypass depends
        #: on the same mask) and those whose dropout has p = 0, each
        #: ``{"name", "form", "p", "reason"}``.
        self.other_sites: List[dict] = []
        #: ``{"audited": n, "total": N}``: tokens per norm site (padded ones
        #: left out when the forward was given an ``attention_mask``).
        self.tokens: Optional[dict] = None
        #: The :class:`dropmc.discovery.Discovery` the sites came from.
        self.discovery = None

    def _other_table(self) -> str:
        if not self.other_sites:
            return ""
        width = max(len(o["name"]) for o in self.other_sites)
        lines = [f"{'site (no closed-form numbers)':<{width}}  form       p    reason"]
        lines += [f"{o['name']:<{width}}  {o['form']:<9}  {o['p']:<4g} {o['reason']}" for o in self.other_sites]
        return "\n".join(lines)

    def _token_line(self) -> str:
        t = self.tokens
        if not t or t["audited"] == t["total"]:
            return ""
        return (f"tokens audited per site: {t['audited']} of {t['total']} "
                f"({t['total'] - t['audited']} padded tokens left out by the attention_mask)")

    def __str__(self) -> str:
        parts = (self._token_line(), self._table, self._attention_table, self._other_table())
        return "\n".join(t for t in parts if t)

    def __repr__(self) -> str:
        return (f"<dropmc.Audit of {len(self.sites)} sites and {len(self.attention_sites)} "
                f"attention sites>\n{self}")

    def to_json(self) -> str:
        """``{"sites": [...], "attention_sites": [...]}``, plus
        ``other_sites`` when some site is listed without numbers and
        ``tokens`` when padded tokens were left out (before attention sites
        the JSON was the bare ``sites`` array; docs/audit.md)."""
        out = {"sites": self.sites, "attention_sites": self.attention_sites}
        if self.other_sites:  # entangled and p = 0 sites (no numbers)
            out["other_sites"] = self.other_sites
        if self._token_line():  # padded tokens were left out
            out["tokens"] = self.tokens
        return _json.dumps(out, indent=2)

    def attention_moments(self, i: int) -> Tuple[_np.ndarray, _np.ndarray]:
        """Attention site ``i``'s ``E[out]`` (the eval output) and
        ``Var(out)`` under its dropout, each ``(batch · queries, embed)``."""
        e = self.attention_sites[i]["embed"]
        mean, var = self._moments[i]
        return _np.asarray(mean).reshape(-1, e), _np.asarray(var).reshape(-1, e)

    def truth(self, i: int) -> Tuple[_np.ndarray, _np.ndarray]:
        """Site ``i``'s ``E[norm]`` and its SE, each of shape ``(tokens, d)``."""
        d = self.sites[i]["d"]
        e, se = self._truths[i]
        return _np.asarray(e).reshape(-1, d), _np.asarray(se).reshape(-1, d)

    def save(self, path: str) -> None:
        """The captures (norm and attention sites) as an ``.npz`` that
        ``dropmc audit --activations`` reads."""
        save_captures(path, self._captures, self._attention_captures)

    def plot(self, path: str) -> None:
        """One figure: per site, the RMS gap uncorrected, first and second
        order (log scale; an unresolved gap is drawn at its upper bound,
        hollow). Needs matplotlib."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError as e:  # pragma: no cover
            raise ImportError("Audit.plot needs matplotlib (pip install matplotlib)") from e
        names = [_short_label(s["name"]) for s in self.sites]
        xs = _np.arange(len(names))
        longest = max((len(n) for n in names), default=0)
        fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(names) + 2), 3 + 0.065 * longest))
        labelled = set()
        for off, key, label in [(-0.2, "uncorrected", "eval (uncorrected)"),
                                (0.0, "first_order", "first order"),
                                (0.2, "second_order", "second order")]:
            for i, s in enumerate(self.sites):
                g = s[key]
                if g is None:  # no second-order closed form (a compound site)
                    continue
                y = g["rms"] if g["resolved"] else g["upper"]
                ax.bar(xs[i] + off, y, width=0.2, color=f"C{int(off * 5 + 1)}",
                       fill=g["resolved"], edgecolor=f"C{int(off * 5 + 1)}",
                       label=None if label in labelled else label)
                labelled.add(label)
        ax.set_yscale("log")
        ax.set_xticks(xs)
        ax.set_xticklabels(names, rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("RMS gap to E[norm(h + dropout(v))]")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)


def _short_label(name: str) -> str:
    """A site's name for a figure's axis: the norm's dotted path after the
    part it shares with the dropout's (``a.b.dropout->a.b.LayerNorm`` is
    ``a.b.dropout->…LayerNorm``)."""
    parts = name.split("->")
    if len(parts) < 2:
        return name
    first = parts[0].split(".")
    rest = []
    for p in parts[1:]:
        q = p.split(".")
        k = 0
        while k < min(len(first), len(q)) - 1 and first[k] == q[k]:
            k += 1
        rest.append(("…" if k else "") + ".".join(q[k:]))
    return "->".join([parts[0]] + rest)


# --------------------------------------------------------------------------
# Site finding


def _norm_types():
    import torch.nn as nn

    types = [nn.LayerNorm]
    if hasattr(nn, "RMSNorm"):
        types.append(nn.RMSNorm)
    return tuple(types)


def _encoder_layer_sites(prefix: str, layer, next_norm: Optional[str]):
    """The sites of one ``nn.TransformerEncoderLayer`` named ``prefix``:
    post-LN ``norm1(x + dropout1(sa))``, ``norm2(x + dropout2(ff))``;
    pre-LN ``norm2(x + dropout1(sa))`` inside the block and
    ``next_norm(x + dropout2(ff))`` across blocks (when a norm follows)."""
    p = prefix + "." if prefix else ""
    if not layer.norm_first:
        return [(p + "dropout1", p + "norm1"), (p + "dropout2", p + "norm2")]
    sites = [(p + "dropout1", p + "norm2")]
    if next_norm is not None:
        sites.append((p + "dropout2", next_norm))
    return sites


def _encoder_sites(prefix: str, encoder) -> List[Tuple[str, str]]:
    p = prefix + "." if prefix else ""
    layers = list(encoder.layers)
    sites = []
    for i, layer in enumerate(layers):
        if i + 1 < len(layers):
            nxt = layers[i + 1]
            next_norm = f"{p}layers.{i + 1}.norm1" if nxt.norm_first else None
        else:
            next_norm = p + "norm" if encoder.norm is not None else None
        sites += _encoder_layer_sites(f"{p}layers.{i}", layer, next_norm)
    return sites


def _trace(model, training: bool):
    """The fx graph of ``model`` traced with the model in train (or eval)
    mode, the norms and the encoder layers as leaves."""
    import torch.fx as fx
    import torch.nn as nn

    leaves = (nn.TransformerEncoderLayer, nn.MultiheadAttention) + _norm_types()

    class _Tracer(fx.Tracer):
        def is_leaf_module(self, m, qualname):
            return isinstance(m, leaves) or super().is_leaf_module(m, qualname)

    was_training = model.training
    model.train(training)
    try:
        return _Tracer().trace(model)
    finally:
        model.train(was_training)


def _functional_rate(node) -> Optional[float]:
    """``p`` of a ``torch.nn.functional.dropout(input, p=0.5,
    training=True, inplace=False)`` call node, or None when the node is not
    one, its ``training`` is a constant False, or ``p`` is not a constant."""
    import torch.nn.functional as F

    if node.op != "call_function" or node.target is not F.dropout:
        return None
    p = node.kwargs.get("p", node.args[1] if len(node.args) > 1 else 0.5)
    training = node.kwargs.get("training", node.args[2] if len(node.args) > 2 else True)
    if training is False or not isinstance(p, (int, float)) or isinstance(p, bool):
        return None
    return float(p)


def _fx_sites(model) -> List[Tuple[str, ...]]:
    import torch.nn as nn

    graph = _trace(model, training=True)
    modules = dict(model.named_modules())

    def module_of(node):
        return modules.get(node.target) if node.op == "call_module" else None

    def is_add(node):
        return (node.op == "call_function" and node.target in (_operator.add, _operator.iadd)) or (
            node.op == "call_method" and node.target in ("add", "add_")
        ) or (node.op == "call_function" and getattr(node.target, "__name__", "") == "add")

    def lone_layer_norm_user(node):
        """The LayerNorm module that is ``node``'s only user, if any."""
        users = list(node.users)
        if len(users) == 1 and isinstance(module_of(users[0]), nn.LayerNorm):
            return users[0]
        return None

    norms = _norm_types()
    sites = []
    for node in graph.nodes:
        m = module_of(node)
        if isinstance(m, nn.Dropout) or _functional_rate(node) is not None:
            name = node.target if m is not None else node.name
            for user in node.users:
                if isinstance(module_of(user), norms):
                    # LN1 whose only user is LN2: compound, replacing the plain LN1 site.
                    second = lone_layer_norm_user(user) if isinstance(module_of(user), nn.LayerNorm) else None
                    if second is not None:
                        sites.append((name, user.target, second.target))
                    else:
                        sites.append((name, user.target))
                elif is_add(user):
                    for w in user.users:
                        if isinstance(module_of(w), norms):
                            sites.append((name, w.target))
        elif isinstance(m, nn.TransformerEncoderLayer):
            nxt = [u for u in node.users if isinstance(module_of(u), (nn.TransformerEncoderLayer,) + norms)]
            next_norm = None
            if len(nxt) == 1:
                um = module_of(nxt[0])
                if isinstance(um, norms):
                    next_norm = nxt[0].target
                elif um.norm_first:
                    next_norm = nxt[0].target + ".norm1"
            sites += _encoder_layer_sites(node.target, m, next_norm)
    return sites


def find_sites(model) -> List[Tuple[str, ...]]:
    """``[(dropout_name, norm_name), ...]`` of ``model`` (a compound site
    is ``(dropout_name, ln1_name, ln2_name)``): by ``torch.fx``,
    or structurally for an ``nn.TransformerEncoder`` fx cannot trace.
    Raises ValueError when neither applies (pass ``sites=`` then)."""
    import torch.nn as nn

    try:
        return _fx_sites(model)
    except Exception as e:  # fx raises many types on untraceable control flow
        if isinstance(model, nn.TransformerEncoder):
            return _encoder_sites("", model)
        for name, m in model.named_modules():
            if isinstance(m, nn.TransformerEncoder):
                raise ValueError(
                    f"torch.fx could not trace the model ({type(e).__name__}: {e}); "
                    f"pass sites=[(dropout_name, norm_name), ...] (the encoder {name!r} "
                    f"has dropmc.audit._encoder_sites({name!r}, model.{name}))"
                ) from e
        raise ValueError(
            f"torch.fx could not trace the model ({type(e).__name__}: {e}); "
            "pass sites=[(dropout_name, norm_name), ...]"
        ) from e


# --------------------------------------------------------------------------
# Capture


def _as_tuple(inputs):
    return inputs if isinstance(inputs, tuple) else (inputs,)


def _norm_params(norm, d):
    """``γ, β, ε`` of a LayerNorm/RMSNorm module as float64 (``γ = 1``,
    ``β = 0`` where the module has none)."""
    import torch

    w = norm.weight
    gamma = _np.ones(d) if w is None else w.detach().to(torch.float64).cpu().numpy()
    b = getattr(norm, "bias", None)
    beta = _np.zeros(d) if b is None else b.detach().to(torch.float64).cpu().numpy()
    eps = norm.eps
    if eps is None:  # nn.RMSNorm's default: the input dtype's machine epsilon
        eps = float(torch.finfo(w.dtype if w is not None else torch.get_default_dtype()).eps)
    return _np.ascontiguousarray(gamma), _np.ascontiguousarray(beta), float(eps)


def _functional_dropouts(model, names):
    """``{node_name: p}`` of the ``F.dropout`` call nodes ``names`` of the
    model's fx graph, traced in train mode as :func:`find_sites` does."""
    if not names:
        return {}
    try:
        graph = _trace(model, training=True)
    except Exception as e:
        raise ValueError(f"the dropouts {sorted(names)} are not modules of the model, and torch.fx "
                         f"cannot trace it to find them as F.dropout calls ({type(e).__name__}: {e})") from e
    rates = {n.name: _functional_rate(n) for n in graph.nodes if n.name in names}
    for name in sorted(names):
        if rates.get(name) is None:
            raise ValueError(f"{name!r} is neither an nn.Dropout of the model nor an F.dropout call "
                             "(with a constant p, not training=False) of its fx graph")
    return rates


def _run_capturing(model, inputs, functional, seen):
    """One eval-mode forward; the input of each ``F.dropout`` node named in
    ``functional`` is appended to ``seen[name]`` and the call is replaced by
    the identity (dropout's eval output). Without functional sites the model
    itself runs; with them its fx graph (traced in eval mode, so the
    model's other mode-dependent calls take their eval branch) runs in a
    ``torch.fx.Interpreter`` on the model's own modules (their hooks fire)."""
    import torch
    import torch.fx as fx

    # Grad enabled keeps nn.TransformerEncoderLayer off its fused fast
    # path, which skips the submodules (and so the hooks).
    with torch.enable_grad():
        if not functional:
            return model(*_as_tuple(inputs))
        graph = _trace(model, training=False)

        class _Capture(fx.Interpreter):
            def run_node(self, n):
                if n.name in functional:
                    args, _ = self.fetch_args_kwargs_from_env(n)
                    seen.setdefault(n.name, []).append(args[0].detach().to(torch.float64).clone())
                    return args[0]
                return super().run_node(n)

        return _Capture(fx.GraphModule(model, graph)).run(*_as_tuple(inputs))


def capture_sites(model, inputs, sites: Sequence[Tuple[str, ...]]) -> List[dict]:
    """Runs the model once on ``inputs`` in eval mode with hooks on each
    site's dropout (its input ``v``) and norm (its input ``z``); ``h = z −
    v``. A site whose ``z`` equals ``v`` is plain. A site ``(dropout, ln1,
    ln2)`` is compound: plain at ``ln1``, whose output must be ``ln2``'s
    input. A dropout is an ``nn.Dropout`` module or an ``F.dropout`` node
    of the model's fx graph (by node name). Returns one dict per site (the
    layout of :func:`audit_captures`)."""
    import torch
    import torch.nn as nn

    modules = dict(model.named_modules())
    functional = set()
    for site in sites:
        if len(site) not in (2, 3):
            raise ValueError(f"site {site!r}: expected (dropout, norm) or (dropout, ln1, ln2)")
        dname, nname = site[0], site[1]
        if dname in modules and not isinstance(modules[dname], nn.Dropout):
            raise ValueError(f"site {tuple(site)!r}: {dname!r} is not an nn.Dropout of the model")
        if dname not in modules:
            functional.add(dname)
        if not isinstance(modules.get(nname), _norm_types()):
            raise ValueError(f"site {tuple(site)!r}: {nname!r} is not a LayerNorm or RMSNorm of the model")
        if len(site) == 3 and not all(isinstance(modules.get(n), nn.LayerNorm) for n in site[1:]):
            raise ValueError(f"site {tuple(site)!r}: a compound site's two norms must be nn.LayerNorm")
    rates = _functional_dropouts(model, functional)
    seen: dict = {}
    handles = []

    def record(key):
        def hook(module, args):
            seen.setdefault(key, []).append(args[0].detach().to(torch.float64).clone())

        return hook

    def record_output(key):
        def hook(module, args, out):
            seen.setdefault(key, []).append(out.detach().to(torch.float64).clone())

        return hook

    for name in {n for s in sites for n in s if n not in functional}:
        handles.append(modules[name].register_forward_pre_hook(record(name)))
    for ln1 in {s[1] for s in sites if len(s) == 3}:
        handles.append(modules[ln1].register_forward_hook(record_output(("out", ln1))))
    was_training = model.training
    model.eval()
    try:
        _run_capturing(model, inputs, functional, seen)
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    out = []
    for site in sites:
        dname, nname = site[0], site[1]
        calls_d, calls_n = seen.get(dname, []), seen.get(nname, [])
        if len(calls_d) != 1 or len(calls_n) != 1:
            raise ValueError(
                f"site {tuple(site)!r}: the dropout ran {len(calls_d)} times and the "
                f"norm {len(calls_n)} times in one forward; a site needs each exactly once"
            )
        v, z = calls_d[0], calls_n[0]
        if v.shape != z.shape:
            raise ValueError(f"site {tuple(site)!r}: dropout output {tuple(v.shape)} "
                             f"and norm input {tuple(z.shape)} differ in shape")
        norm = modules[nname]
        d = v.shape[-1]
        plain = bool(torch.equal(v, z))
        gamma, beta, eps = _norm_params(norm, d)
        vv = v.reshape(-1, d).cpu().numpy()
        capture = {
            "name": "->".join(site),
            "form": "plain" if plain else "bypass",
            "p": float(modules[dname].p) if dname in modules else rates[dname],
            "d": int(d),
            "v": _np.ascontiguousarray(vv.ravel()),
            "h": _np.ascontiguousarray((z.reshape(-1, d).cpu().numpy() - vv).ravel()),
            "norm": "layer" if isinstance(norm, nn.LayerNorm) else "rms",
            "gamma": gamma,
            "beta": beta,
            "eps": eps,
        }
        if len(site) == 3:
            u, into2 = seen.get(("out", nname), []), seen.get(site[2], [])
            if not plain or len(into2) != 1 or len(u) != 1 or not torch.equal(u[0], into2[0]):
                raise ValueError(f"site {tuple(site)!r}: a compound site needs the dropout's output "
                                 f"to be {nname!r}'s input and {nname!r}'s output {site[2]!r}'s "
                                 "input, each once per forward")
            gamma2, beta2, eps2 = _norm_params(modules[site[2]], d)
            capture.update(form="compound", gamma2=gamma2, beta2=beta2, eps2=eps2)
        out.append(capture)
    return out


# --------------------------------------------------------------------------
# Attention sites


def _fx_attention_sites(model) -> List[str]:
    """The ``nn.MultiheadAttention`` modules the traced forward calls:
    directly, or as the ``self_attn`` of an ``nn.TransformerEncoderLayer``."""
    import torch.nn as nn

    modules = dict(model.named_modules())
    names = []
    for node in _trace(model, training=True).nodes:
        m = modules.get(node.target) if node.op == "call_module" else None
        if isinstance(m, nn.MultiheadAttention):
            names.append(node.target)
        elif isinstance(m, nn.TransformerEncoderLayer):
            names.append(node.target + ".self_attn")
    return names


def find_attention_sites(model) -> List[str]:
    """The names of ``model``'s ``nn.MultiheadAttention`` modules with
    ``dropout > 0``: those the ``torch.fx`` trace calls, or, when fx cannot
    trace the model (``nn.TransformerEncoder``), every such module (the
    capture keeps those the forward reaches)."""
    import torch.nn as nn

    modules = dict(model.named_modules())
    try:
        names = _fx_attention_sites(model)
    except Exception:  # fx raises many types on untraceable control flow
        names = [n for n, m in modules.items() if isinstance(m, nn.MultiheadAttention)]
    return [n for n in dict.fromkeys(names) if modules[n].dropout > 0]


def _value_projection(module):
    """``(W_v, b_v)`` of an ``nn.MultiheadAttention``."""
    e = module.embed_dim
    if module._qkv_same_embed_dim:
        w = module.in_proj_weight[2 * e:]
    else:
        w = module.v_proj_weight
    b = None if module.in_proj_bias is None else module.in_proj_bias[2 * e:]
    return w, b


def _attention_capture(name, module, args, kwargs) -> dict:
    """One call's softmax rows (recomputed with ``need_weights=True,
    average_attn_weights=False``: after the masks, before the dropout, which
    eval mode skips), the projected values per head and ``out_proj``."""
    import inspect

    import torch
    import torch.nn.functional as F

    bound = inspect.signature(module.forward).bind(*args, **kwargs)
    bound.apply_defaults()
    call = dict(bound.arguments, need_weights=True, average_attn_weights=False)
    out, weights = module(**call)
    value = call["value"]
    if value.dim() == 2:  # unbatched: (S, E) and (H, L, S)
        value, weights, out = value.unsqueeze(0), weights.unsqueeze(0), out.unsqueeze(0)
    elif not module.batch_first:
        value, out = value.transpose(0, 1), out.transpose(0, 1)
    w_v, b_v = _value_projection(module)
    v = F.linear(value, w_v, b_v)
    batch, keys = v.shape[0], v.shape[1]
    heads, head_dim = module.num_heads, module.head_dim
    v = v.reshape(batch, keys, heads, head_dim).permute(0, 2, 1, 3)
    queries = weights.shape[2]
    if weights.shape != (batch, heads, queries, keys):
        raise ValueError(f"attention site {name!r}: softmax weights of shape {tuple(weights.shape)}, "
                         f"expected (batch, heads, queries, keys) = {(batch, heads, queries, keys)}")
    if not torch.isfinite(weights).all():
        raise ValueError(f"attention site {name!r}: a softmax row is not finite "
                         "(a query whose every key is masked)")
    ow = module.out_proj.weight
    ob = module.out_proj.bias

    def flat(t):
        return _np.ascontiguousarray(t.detach().to(torch.float64).cpu().numpy().ravel())

    return {
        "name": name or type(module).__name__,  # the model itself is the attention
        "p": float(module.dropout),
        "shape": (batch, heads, queries, keys, head_dim, int(ow.shape[0])),
        "weights": flat(weights),
        "values": flat(v),
        "out_weight": flat(ow),
        "out_bias": flat(ob) if ob is not None else _np.zeros(ow.shape[0]),
        "eval_output": flat(out).reshape(batch * queries, -1),
    }


def capture_attention_sites(model, inputs, names: Sequence[str], kwargs=None) -> List[dict]:
    """Runs ``model(*inputs)`` once in eval mode with a forward pre-hook on
    each named ``nn.MultiheadAttention``, which recomputes the call with its
    weights returned per head. A named module the forward does not reach is
    left out; one it calls twice is a ValueError. Returns one dict per site
    (the layout of :func:`audit_attention_captures`)."""
    import torch
    import torch.nn as nn

    modules = dict(model.named_modules())
    for name in names:
        m = modules.get(name)
        if not isinstance(m, nn.MultiheadAttention):
            raise ValueError(f"attention site {name!r} is not an nn.MultiheadAttention of the model")
        if m.bias_k is not None or m.add_zero_attn:
            raise ValueError(f"attention site {name!r}: add_bias_kv / add_zero_attn are not supported "
                             "(their extra keys have no captured values)")
    seen: dict = {}
    busy: set = set()

    def record(name):
        def hook(module, args, kwargs):
            if name in busy:  # the hook's own recomputation
                return None
            busy.add(name)
            try:  # grad stays enabled: no_grad would open the fused fast path
                seen.setdefault(name, []).append(_attention_capture(name, module, args, kwargs))
            finally:
                busy.discard(name)
            return None

        return hook

    handles = [modules[n].register_forward_pre_hook(record(n), with_kwargs=True) for n in names]
    was_training = model.training
    model.eval()
    try:
        # Grad enabled keeps the encoder layers and the attention off their
        # fused fast paths, which skip the hooks.
        with torch.enable_grad():
            model(*_as_tuple(inputs), **(kwargs or {}))
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    out = []
    for name in names:
        calls = seen.get(name, [])
        if len(calls) > 1:
            raise ValueError(f"attention site {name!r} ran {len(calls)} times in one forward; "
                             "a site needs it exactly once")
        out += calls
    return out


def audit_attention_captures(captures: List[dict], *, samples: int = DEFAULT_ATTENTION_SAMPLES,
                             seed: int = 0):
    """``(table, json, moments)`` of captured attention sites, from dropmc's
    Rust engine (``samples`` draws per query, head and sampled coordinate
    for the sampled check)."""
    if not isinstance(samples, int) or samples < 256:
        raise ValueError(f"attention_samples must be an int of at least 256, got {samples!r}")
    if not captures:
        return "", "[]", []
    return _dropmc.audit_attention_sites(captures, samples, seed)


# --------------------------------------------------------------------------
# The npz layout (docs/audit.md)

_NPZ_VERSION = 2


def save_captures(path: str, captures: List[dict], attention_captures: Sequence[dict] = ()) -> None:
    """Writes the captures as ``.npz``: ``version``, ``names`` (strings),
    and per site ``i``: ``site{i}_form`` ('plain'/'bypass'),
    ``site{i}_norm`` ('layer'/'rms'), ``site{i}_p``, ``site{i}_eps``
    (scalars), ``site{i}_v``, ``site{i}_h`` (``tokens × d`` float64),
    ``site{i}_gamma``, ``site{i}_beta`` (``d`` float64); a compound site
    (form 'compound') also LN2's ``site{i}_gamma2``, ``site{i}_beta2``
    (``d`` float64) and ``site{i}_eps2``. ``attention_count`` and per
    attention site ``i``: ``attention{i}_name``, ``attention{i}_p``,
    ``attention{i}_weights`` (``B × H × L × S``), ``attention{i}_values``
    (``B × H × S × J``), ``attention{i}_out_weight`` (``E × H·J``),
    ``attention{i}_out_bias`` (``E``). Layout version 2 (1 had no compound
    or attention sites)."""
    arrays: dict = {"version": _np.array(_NPZ_VERSION, dtype=_np.int64),
                    "count": _np.array(len(captures), dtype=_np.int64),
                    "attention_count": _np.array(len(attention_captures), dtype=_np.int64)}
    for i, c in enumerate(attention_captures):
        b, h, l, s, j, e = c["shape"]
        arrays[f"attention{i}_name"] = _np.frombuffer(c["name"].encode(), dtype=_np.uint8)
        arrays[f"attention{i}_p"] = _np.array(c["p"], dtype=_np.float64)
        arrays[f"attention{i}_weights"] = c["weights"].reshape(b, h, l, s).astype(_np.float64)
        arrays[f"attention{i}_values"] = c["values"].reshape(b, h, s, j).astype(_np.float64)
        arrays[f"attention{i}_out_weight"] = c["out_weight"].reshape(e, h * j).astype(_np.float64)
        arrays[f"attention{i}_out_bias"] = c["out_bias"].astype(_np.float64)
    for i, c in enumerate(captures):
        d = c["d"]
        arrays[f"site{i}_name"] = _np.frombuffer(c["name"].encode(), dtype=_np.uint8)
        arrays[f"site{i}_form"] = _np.frombuffer(c["form"].encode(), dtype=_np.uint8)
        arrays[f"site{i}_norm"] = _np.frombuffer(c["norm"].encode(), dtype=_np.uint8)
        arrays[f"site{i}_p"] = _np.array(c["p"], dtype=_np.float64)
        arrays[f"site{i}_eps"] = _np.array(c["eps"], dtype=_np.float64)
        arrays[f"site{i}_v"] = c["v"].reshape(-1, d).astype(_np.float64)
        arrays[f"site{i}_h"] = c["h"].reshape(-1, d).astype(_np.float64)
        arrays[f"site{i}_gamma"] = c["gamma"].astype(_np.float64)
        arrays[f"site{i}_beta"] = c["beta"].astype(_np.float64)
        if c["form"] == "compound":
            arrays[f"site{i}_gamma2"] = c["gamma2"].astype(_np.float64)
            arrays[f"site{i}_beta2"] = c["beta2"].astype(_np.float64)
            arrays[f"site{i}_eps2"] = _np.array(c["eps2"], dtype=_np.float64)
    _np.savez(path, **arrays)


def load_attention(path: str) -> List[dict]:
    """The attention captures of an ``.npz`` written by :func:`save_captures`
    (none in a version-1 file)."""
    with _np.load(path) as z:
        if int(z["version"]) < 2:
            return []
        out = []
        for i in range(int(z["attention_count"])):
            w, v = z[f"attention{i}_weights"], z[f"attention{i}_values"]
            ow = z[f"attention{i}_out_weight"]
            out.append({
                "name": bytes(z[f"attention{i}_name"]).decode(),
                "p": float(z[f"attention{i}_p"]),
                "shape": (*w.shape, int(v.shape[3]), int(ow.shape[0])),
                "weights": _np.ascontiguousarray(w.ravel()),
                "values": _np.ascontiguousarray(v.ravel()),
                "out_weight": _np.ascontiguousarray(ow.ravel()),
                "out_bias": _np.ascontiguousarray(z[f"attention{i}_out_bias"]),
            })
        return out


def load(path: str) -> List[dict]:
    """The norm-site captures of an ``.npz`` written by :func:`save_captures`
    (:func:`load_attention` reads its attention sites)."""
    with _np.load(path) as z:
        version = int(z["version"])
        if version != _NPZ_VERSION:
            raise ValueError(f"{path}: layout version {version}; this dropmc reads version {_NPZ_VERSION}"
                             + (" (an older dropmc's capture: re-save it with Audit.save)"
                                if version < _NPZ_VERSION else ""))
        out = []
        for i in range(int(z["count"])):
            v = z[f"site{i}_v"]
            c = {
                "name": bytes(z[f"site{i}_name"]).decode(),
                "form": bytes(z[f"site{i}_form"]).decode(),
                "norm": bytes(z[f"site{i}_norm"]).decode(),
                "p": float(z[f"site{i}_p"]), "eps": float(z[f"site{i}_eps"]),
                "d": int(v.shape[1]),
                "v": _np.ascontiguousarray(v.ravel()),
                "h": _np.ascontiguousarray(z[f"site{i}_h"].ravel()),
                "gamma": z[f"site{i}_gamma"], "beta": z[f"site{i}_beta"],
            }
            if c["form"] == "compound":
                c.update(gamma2=z[f"site{i}_gamma2"], beta2=z[f"site{i}_beta2"],
                         eps2=float(z[f"site{i}_eps2"]))
            out.append(c)
        return out


# --------------------------------------------------------------------------
# The audit


def _check_budgets(samples, seed, attention_samples):
    if not isinstance(samples, int) or samples < 129:
        raise ValueError(f"samples must be an int of at least 129 (masks per token), got {samples!r}")
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    if not isinstance(attention_samples, int) or attention_samples < 256:
        raise ValueError(f"attention_samples must be an int of at least 256, got {attention_samples!r}")


def audit_captures(captures: List[dict], *, samples: int = DEFAULT_SAMPLES, seed: int = 0,
                   attention_captures: Sequence[dict] = (),
                   attention_samples: int = DEFAULT_ATTENTION_SAMPLES) -> Audit:
    """Audits captured sites with dropmc's Rust engine (no model run)."""
    _check_budgets(samples, seed, attention_samples)
    attention = audit_attention_captures(list(attention_captures), samples=attention_samples, seed=seed)
    if captures:
        table, text, truths = _dropmc.audit_sites(captures, samples, seed)
    else:
        table, text, truths = "", "[]", []
    return Audit(table, text, truths, captures, attention, attention_captures)


def _select_sites(found, sites, modules):
    """The discovered sites ``sites`` names (tuples ``(dropout, norm)`` or
    ``(dropout, ln1, ln2)``, by call name), each validated against what the
    forward does: a tuple that is not a site of the forward is a ValueError
    saying why, an entangled one stays entangled."""
    import torch.nn as nn

    by_tuple = {s.as_tuple(): s for s in found.sites}
    by_pair = {}
    for s in found.sites:
        by_pair.setdefault(s.as_tuple()[:2], s)
    chosen = []
    for t in sites:
        t = tuple(t)
        if len(t) not in (2, 3):
            raise ValueError(f"site {t!r}: expected (dropout, norm) or (dropout, ln1, ln2)")
        site = by_tuple.get(t)
        if site is None and len(t) == 2 and t in by_pair:
            site = by_pair[t]
            if site.form == "compound":  # named as plain: LN1 alone
                site = type(site)(site.dropout, site.norm, "plain", site.p)
        if site is None:
            dname, nname = t[0], t[1]
            base = dname.split("#")[0]
            if base in modules and not isinstance(modules[base], nn.modules.dropout._DropoutNd):
                why = f"{dname!r} is not an nn.Dropout of the model"
            elif dname not in found.dropouts:
                why = (f"{dname!r} is neither an nn.Dropout call nor an F.dropout call of the forward "
                       "(a module's k-th call is 'name#k', an F.dropout call 'owner:dropout')")
            elif nname not in found.norms:
                why = f"{nname!r} is not a LayerNorm or RMSNorm call of the forward"
            else:
                why = (f"{nname}'s input is neither {dname}'s output nor h + {dname}'s output "
                       "(the dropout reaches the norm through other layers: no closed form)")
            raise ValueError(f"site {t!r}: {why}. The forward's {found.summary()}. Its sites: "
                             f"{found.sites_line()}")
        chosen.append(site)
    return chosen


def _no_sites_message(found) -> str:
    return ("the model has no dropout→LayerNorm/RMSNorm site and no attention dropout in this forward. "
            f"The forward's {found.summary()}. If a site was missed, pass sites=[(dropout_call, "
            "norm_call), ...] with names from that list (a norm it does not read: norms={name: "
            "dropmc.norms.NormSpec(...)})")


def audit_torch(model, inputs=None, *, samples: int = DEFAULT_SAMPLES, seed: int = 0,
                sites: Optional[Sequence[Tuple[str, ...]]] = None,
                attention_samples: int = DEFAULT_ATTENTION_SAMPLES, norms=None, **kwargs) -> Audit:
    """Finds ``model``'s dropout→norm and attention-dropout sites from one
    train-mode forward (:func:`dropmc.discovery.discover`; no fx), captures
    them in one eval-mode forward, and audits them (``samples`` masks per
    token from ``seed``; ``attention_samples`` draws per query, head and
    sampled coordinate for the attention sites' sampled check).

    ``inputs``: a tensor, a tuple of positional arguments, or a dict of
    keyword arguments; further keyword arguments go to the forward too.
    With an ``attention_mask`` of the tokens' shape, padded tokens are left
    out (``audit.tokens`` says how many were audited). ``sites`` names a
    subset (call names, as the table prints them); ``norms`` maps module
    names to a :class:`dropmc.norms.NormSpec` for norms the recognition
    cannot read. Entangled sites and sites with ``p = 0`` are listed without
    numbers (``audit.other_sites``)."""
    try:
        import torch.nn as nn
    except ImportError as e:  # pragma: no cover
        raise ImportError("dropmc.audit.audit_torch needs torch") from e
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    _check_budgets(samples, seed, attention_samples)
    from .capture import capture_traced
    from .discovery import call_inputs, discover

    args, kw = call_inputs(inputs, kwargs)
    found = discover(model, *args, norms=norms, **kw)
    modules = dict(model.named_modules())
    chosen = found.sites if sites is None else _select_sites(found, sites, modules)
    other = [{"name": s.name, "form": "entangled", "p": s.p, "reason": s.reason}
             for s in chosen if s.form == "entangled"]
    other += [{"name": s.name, "form": s.form, "p": 0.0, "reason": "no dropout at this rate (p = 0)"}
              for s in chosen if s.form != "entangled" and s.p == 0]
    clean = [s for s in chosen if s.form != "entangled" and s.p > 0]
    traced_attention = [a for a in found.attention if a.kind != "mha" and a.p > 0]
    other += [{"name": a.call, "form": "attention", "p": 0.0, "reason": "no dropout at this rate (p = 0)"}
              for a in found.attention if a.p == 0 and a.kind != "mha"]
    mha = [a.call for a in found.attention if a.kind == "mha" and a.p > 0]
    if not clean and not traced_attention and not mha and not other:
        raise ValueError(_no_sites_message(found))
    captures, attention_caps, tokens = capture_traced(model, args, kw, found, clean, traced_attention)
    if mha:
        attention_caps += capture_attention_sites(model, args, mha, kw)
    audit = audit_captures(captures, samples=samples, seed=seed, attention_captures=attention_caps,
                           attention_samples=attention_samples)
    audit.other_sites = other
    audit.tokens = tokens
    audit.discovery = found
    return audit
