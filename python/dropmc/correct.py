"""Apply the first-order corrections the suite verifies to a PyTorch model:
``correct(model)`` / ``uncorrect(model)`` (``dropmc.torch.correct``).

In evaluation mode a norm behind dropout sees the clean input ``x = h + v``
where training showed it ``h + dropout(v)``; its eval output then sits
``O(p)`` away from the train-mode expectation ``E[norm(h + dropout(v))]``.
``correct`` moves each site's eval output to the first-order estimate of
that expectation, per token, from the site's own activations captured live:

* LayerNorm: ``β + c (LN(x) − β)`` with
  ``c² = (σ² + ε) / (σ² + (p/q)·mean_k v_k² + ε)``, ``σ²`` the spread of
  the norm's input ``x`` and ``v`` the dropout's input. This is the bypass
  factor of src/formulas/bypass.rs; with no bypass (``v = x``) it is
  exactly the plain ``c_ε(μ, σ)`` of src/formulas/layernorm.rs (their
  module docs derive both), so one form serves both sites.
* RMSNorm: ``RMS(x) · sqrt((r² + ε) / (r² + (p/q)·mean_k v_k² + ε))``,
  ``r² = mean_k x_k²`` (``√q`` at a plain site, ε = 0; src/formulas/rmsnorm.rs
  and the bypass step of src/audit/token.rs).
* A compound site ``(dropout, ln1, ln2)``: LN1 as above (``c1``), LN2 by
  ``c2`` of src/formulas/compound.rs.
* ``order=2``: the second-order estimates of src/formulas/second_order.rs
  at LayerNorm and RMSNorm sites (no compound site: no closed form).
* BatchNorm behind dropout: the one-time fold ``running_var ← q·running_var
  − p·running_mean²`` per channel (src/formulas/batchnorm.rs); a channel
  whose buffers have no fold is left as it is and named in
  ``Correction.unfolded``.

Sites: given example inputs, those :func:`dropmc.discovery.discover` finds
on one train-mode forward (norms recognised by what they compute, corrected
with their :class:`~dropmc.norms.NormSpec`; entangled and functional-dropout
sites refused with the reason); without, module names or ``torch.fx``
(:func:`resolve_sites`, the one switch point).

How: a forward pre-hook on the dropout keeps its input ``v``; a forward
hook on the norm replaces the norm's output in eval mode (in train mode
both hooks return at once, so training is bit for bit what it was). A
module called more than once per forward has a call counter (reset by a
pre-hook on the model): its ``k``-th call is the site ``name#k``, so each
call's correction uses that call's own ``v``. The
norm stays the same ``nn.LayerNorm``/``nn.RMSNorm`` object with the same
parameters, so ``state_dict()`` and ``dropmc.audit`` see the model they saw
before. ``nn.TransformerEncoderLayer``'s fused eval path skips module hooks:
``correct`` sends every layer holding a corrected site down the module path
(and its ``nn.TransformerEncoder`` off nested tensors), and ``uncorrect``
restores both. See docs/correct.md.
"""

from __future__ import annotations

import contextlib as _contextlib
import copy as _copy
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as _np

from . import _dropmc

__all__ = ["correct", "uncorrect", "corrected", "resolve_sites", "norm_outputs", "Correction"]

#: The attribute of a corrected model that holds its :class:`Correction`.
_ATTRIBUTE = "_dropmc_correction"


class Correction:
    """What :func:`correct` changed on a model (``model._dropmc_correction``):
    ``sites`` (the corrected LN/RMS sites), ``folded`` (the BatchNorm sites
    folded), ``unfolded`` (``{batchnorm_name: [reason per channel left as
    is]}``), ``refused`` (``{site name: reason}``: entangled and
    functional-dropout sites), ``skipped`` (``p = 0`` sites), and what :func:`uncorrect` needs to undo it."""

    def __init__(self) -> None:
        self.sites: List[Tuple[str, ...]] = []
        self.folded: List[Tuple[str, str]] = []
        self.unfolded: Dict[str, List[str]] = {}
        self.refused: Dict[str, str] = {}
        self.skipped: Dict[str, str] = {}
        self._handles: list = []
        self._attributes: list = []  # (module, name, original value)
        self._buffers: list = []  # (buffer tensor, original copy)

    def _set(self, module, name: str, value) -> None:
        self._attributes.append((module, name, getattr(module, name)))
        setattr(module, name, value)

    def undo(self) -> None:
        for h in self._handles:
            h.remove()
        for module, name, value in reversed(self._attributes):
            setattr(module, name, value)
        import torch

        with torch.no_grad():
            for buffer, original in self._buffers:
                buffer.copy_(original)
        self._handles, self._attributes, self._buffers = [], [], []


# --------------------------------------------------------------------------
# Sites


def _batchnorm_sites(model) -> List[Tuple[str, str]]:
    """``(dropout, batchnorm)`` pairs where an ``nn.Dropout``'s output goes
    straight into a BatchNorm, by ``torch.fx`` (traced in train mode);
    none when fx cannot trace the model."""
    import torch.fx as fx
    import torch.nn as nn

    was_training = model.training
    model.train()
    try:
        graph = fx.symbolic_trace(model).graph
    except Exception:  # fx raises many types on untraceable control flow
        return []
    finally:
        model.train(was_training)
    modules = dict(model.named_modules())
    out = []
    for node in graph.nodes:
        if node.op == "call_module" and isinstance(modules.get(node.target), nn.Dropout):
            for user in node.users:
                if user.op == "call_module" and _norm_kind(modules.get(user.target)) == "batch":
                    out.append((node.target, user.target))
    return out


def _is_site_list(obj) -> bool:
    """Whether ``correct``'s second positional argument is a site list or
    an ``Audit`` (the signature before ``inputs``) rather than inputs."""
    from .audit import Audit

    if isinstance(obj, Audit):
        return True
    if isinstance(obj, list) or (isinstance(obj, tuple) and obj and all(isinstance(t, tuple) for t in obj)):
        return all(isinstance(t, (tuple, list)) and all(isinstance(n, str) for n in t) for t in obj)
    return False


def _legacy_tuples(sites) -> List[Tuple[str, ...]]:
    if isinstance(sites, (str, bytes)) or not isinstance(sites, Iterable):
        raise TypeError("sites must be a list of (dropout_name, norm_name) tuples, an Audit, or None")
    out = []
    for s in sites:
        if isinstance(s, (str, bytes)) or not isinstance(s, Sequence) or len(s) not in (2, 3) \
                or not all(isinstance(n, str) for n in s):
            raise TypeError(f"site {s!r}: expected (dropout_name, norm_name) or "
                            "(dropout_name, ln1_name, ln2_name) of strings")
        out.append(tuple(s))
    return out


class _Plan:
    """The sites ``correct`` will work on: ``sites`` (name tuples; call
    names ``module#k`` when they came from discovery), ``found`` (the
    :class:`~dropmc.discovery.Discovery`, or None for module-named sites
    without inputs), ``refused`` and ``skipped`` (``{site name: reason}``:
    entangled and functional-dropout sites; ``p = 0`` sites)."""

    def __init__(self, sites, found=None, refused=None, skipped=None) -> None:
        self.sites: List[Tuple[str, ...]] = sites
        self.found = found
        self.refused: Dict[str, str] = dict(refused or {})
        self.skipped: Dict[str, str] = dict(skipped or {})


def _functional_reason(site) -> str:
    return (f"{site.dropout!r} is a functional F.dropout call (in module {site.dropout.split(':')[0]!r}), "
            "not an nn.Dropout module: correct captures a dropout's input with a module hook; make it "
            "an nn.Dropout, or exclude the site")


def _split_discovered(found, chosen, named: bool) -> _Plan:
    """``chosen`` (discovery ``Site``\\ s) into what ``correct`` corrects
    and what it refuses or skips, with the reason. ``named``: the user
    named these sites, so a refusal is a ValueError, not a note."""
    kept, refused, skipped = [], {}, {}
    for site in chosen:
        if site.form == "entangled":
            reason = f"entangled: {site.reason}; correct refuses it (no first-order closed form)"
        elif site.dropout.split("#")[0] not in found.dropout_modules:
            reason = _functional_reason(site)
        else:
            reason = None
        if reason is not None:
            if named:
                raise ValueError(f"site {site.name!r}: {reason}")
            refused[site.name] = reason
        elif site.p == 0:
            skipped[site.name] = "no dropout at this rate (p = 0)"
        else:
            kept.append(site.as_tuple())
    return _Plan(kept, found, refused, skipped)


def _plan(model, inputs=None, sites=None, norms=None, kwargs=None) -> _Plan:
    """The one place site discovery enters ``correct`` (see
    :func:`resolve_sites`)."""
    from .audit import Audit, _select_sites, find_sites
    from .discovery import Site, call_inputs, discover

    if isinstance(sites, Audit):
        found = sites.discovery
        if found is None:  # an audit of hand-made captures: its site names are module names
            return _Plan([tuple(s["name"].split("->")) for s in sites.sites])
        by_name = {s.name: s for s in found.sites}
        # a compound site audited as plain (named by its first two calls) is LN1's plain site
        audited = [by_name.get(s["name"]) or Site(*s["name"].split("->")[:2], "plain", s["p"])
                   for s in sites.sites]
        other = [by_name[o["name"]] for o in sites.other_sites if o["name"] in by_name]
        return _split_discovered(found, audited + other, named=False)
    if inputs is None and not kwargs:
        if sites is not None:
            return _Plan(_legacy_tuples(sites))
        batchnorm = _batchnorm_sites(model)
        try:
            found_fx = [tuple(s) for s in find_sites(model)]
        except ValueError as e:
            if not batchnorm:
                raise ValueError(f"{e}. Or give correct example inputs, correct(model, inputs), to find "
                                 "the sites from one forward (no fx)") from None
            found_fx = []
        return _Plan(found_fx + batchnorm)
    args, kw = call_inputs(inputs, kwargs)
    found = discover(model, *args, norms=norms, **kw)
    if sites is None:
        plan = _split_discovered(found, found.sites, named=False)
        plan.sites += _batchnorm_sites(model)
        return plan
    chosen = _select_sites(found, _legacy_tuples(sites), dict(model.named_modules()))
    return _split_discovered(found, chosen, named=True)


def resolve_sites(model, sites=None, inputs=None, *, norms=None, **kwargs) -> List[Tuple[str, ...]]:
    """The sites to correct as name tuples. With ``inputs`` (a tensor, a
    tuple of positional arguments or a dict of keyword ones, as
    :func:`dropmc.audit.audit_torch` takes them) or keyword ``kwargs``:
    :func:`dropmc.discovery.discover` on one train-mode forward, every clean
    site by call name (``module#k`` for a module's k-th call), or the
    ``sites`` named, validated against that forward; entangled and
    functional-dropout sites refused, ``p = 0`` sites skipped (see
    ``Correction.refused`` / ``.skipped``). ``sites`` an ``Audit`` of
    ``audit_torch``: its audited sites. Without inputs: ``sites`` as
    ``[(dropout_name, norm_name), ...]`` / ``(dropout, ln1, ln2)`` module
    names, or (``sites=None``) :func:`dropmc.audit.find_sites`'s fx sites;
    either way plus the dropout→BatchNorm pairs of the fx graph when
    ``sites`` is None."""
    return _plan(model, inputs, sites, norms, kwargs).sites


def _norm_kind(module) -> Optional[str]:
    import torch.nn as nn

    if isinstance(module, nn.LayerNorm):
        return "layer"
    if hasattr(nn, "RMSNorm") and isinstance(module, nn.RMSNorm):
        return "rms"
    if isinstance(module, nn.modules.batchnorm._BatchNorm):
        return "batch"
    return None


def _module_name(call: str) -> str:
    """The module of a call name: ``a.b#2`` → ``a.b``."""
    return call.split("#")[0]


def _call_index(call: str) -> int:
    return int(call.split("#")[1]) if "#" in call else 0


def _excluded(site: Tuple[str, ...], excluded: set) -> bool:
    return site in excluded or "->".join(site) in excluded \
        or any(n in excluded or _module_name(n) in excluded for n in site)


def _check_sites(modules: dict, plan: _Plan, exclude) -> List[Tuple[str, ...]]:
    """The sites after ``exclude`` (site tuples, ``"dropout->norm"``
    names, call names or module names), each validated: an ``nn.Dropout``
    module, a LayerNorm/RMSNorm/BatchNorm module (or a norm discovery
    recognised by what it computes), no dropout call or norm call in two
    sites (an entangled pair: its correction would need the other's noise,
    which the first-order forms here do not take)."""
    import torch.nn as nn

    excluded = set()
    for e in exclude:
        excluded.add(tuple(e) if not isinstance(e, str) else e)
    kept = [s for s in plan.sites if not _excluded(s, excluded)]
    seen_norms: dict = {}
    seen_dropouts: dict = {}
    for s in kept:
        dname = _module_name(s[0])
        if dname not in modules:
            raise ValueError(f"site {s!r}: {s[0]!r} is not a module of the model (a functional "
                             "F.dropout call cannot be hooked: make it an nn.Dropout module, or "
                             "exclude the site)")
        if not isinstance(modules[dname], nn.Dropout):
            raise ValueError(f"site {s!r}: {dname!r} is a {type(modules[dname]).__name__}, not an nn.Dropout")
        for n in s[1:]:
            discovered = plan.found is not None and n in plan.found.norms
            kind = plan.found.norms[n].kind if discovered else _norm_kind(modules.get(_module_name(n)))
            if kind is None:
                raise ValueError(f"site {s!r}: {n!r} is not a LayerNorm, RMSNorm or BatchNorm of the model "
                                 "(give correct example inputs to have norms recognised by what they compute)")
            if len(s) == 3 and kind != "layer":
                raise ValueError(f"site {s!r}: a compound site's two norms must be LayerNorms")
        for n in s[1:]:
            if n in seen_norms:
                raise ValueError(f"entangled sites {seen_norms[n]!r} and {s!r}: the norm {n!r} sees "
                                 "more than one dropout site; correct refuses (exclude all but one)")
            seen_norms[n] = s
        if s[0] in seen_dropouts:
            raise ValueError(f"entangled sites {seen_dropouts[s[0]]!r} and {s!r}: the dropout "
                             f"{s[0]!r} feeds more than one norm; correct refuses (exclude all but one)")
        seen_dropouts[s[0]] = s
    return kept


# --------------------------------------------------------------------------
# The corrections as torch code


def _stats_dtype(t):
    import torch

    return torch.float32 if t.dtype in (torch.float16, torch.bfloat16) else t.dtype


def _noise_ratio(v, x, p: float, centred: bool, eps: float):
    """``(s + ε) / (s + (p/q)·mean_k v_k² + ε)`` per token (last dim kept),
    ``s`` the spread ``σ²`` of ``x`` (``centred``) or its mean square
    ``r²``; the square of the first-order factor."""
    dt = _stats_dtype(x)
    x, v = x.to(dt), v.to(dt)
    s = x.var(dim=-1, unbiased=False, keepdim=True) if centred else x.square().mean(dim=-1, keepdim=True)
    noise = (p / (1.0 - p)) * v.square().mean(dim=-1, keepdim=True)
    return (s + eps) / (s + noise + eps)


def _second_order(v, x, p: float, centred: bool, eps: float, params: "_NormParams", like):
    """The second-order ``E[norm(h + dropout(v))]`` per token of
    src/formulas/second_order.rs (its step 2: ``γ [N̄ D̄^(-1/2) (1 + 3 Var D
    / (8 D̄²)) − ½ Cov(N, D) D̄^(-3/2)] + β``), on the units ``x_j`` with
    noise moments ``s2 = v² p/q``, ``t3 = v³ p (p − q)/q²``, ``f4 = v⁴ p
    (1 − 3pq)/q³``; LayerNorm (``centred``: ``N = y_k − M``, ``D = V + ε``)
    or RMSNorm (``N = y_k``, ``D = A + ε``). In ``like``'s dtype."""
    dt = _stats_dtype(x)
    x, v = x.to(dt), v.to(dt)
    q = 1.0 - p
    d = x.shape[-1]
    s2 = v.square() * (p / q)
    t3 = v.pow(3) * (p * (p - q) / (q * q))
    f4 = v.pow(4) * (p * (1.0 - 3.0 * p * q) / q**3)
    if centred:
        num = x - x.mean(dim=-1, keepdim=True)
        den = num.square().mean(dim=-1, keepdim=True) + (1.0 - 1.0 / d) * s2.mean(dim=-1, keepdim=True) + eps
    else:
        num = x
        den = (x.square() + s2).mean(dim=-1, keepdim=True) + eps
    var_den = (4 * num.square() * s2 + 4 * num * t3 + f4 - s2.square()).sum(dim=-1, keepdim=True) / (d * d)
    cov = (2 * num * s2 + t3) / d
    if centred:
        cov = cov - cov.mean(dim=-1, keepdim=True)
    g = num / den.sqrt() * (1 + 3 * var_den / (8 * den.square())) - 0.5 * cov / (den * den.sqrt())
    gamma, beta = params.gamma(), params.beta()
    if gamma is not None:
        g = g * gamma.to(dt)
    if beta is not None:
        g = g + beta.to(dt)
    return g.to(like.dtype)


def _beta(params: "_NormParams", like):
    b = params.beta()
    return None if b is None else b.to(like.dtype)


def _shrink_towards_beta(out, c, beta):
    """``β + c (out − β)``, in ``out``'s dtype."""
    c = c.to(out.dtype)
    return out * c if beta is None else beta + c * (out - beta)


class _NormParams:
    """What a corrected norm computes, read live from its module (so a
    correction follows later changes of its parameters): ``kind``
    (``"layer"``/``"rms"``), ``eps``, and the effective ``γ``
    (``weight_offset + weight``) and ``β`` as tensors (None when the module
    has none). An ``nn.LayerNorm``/``nn.RMSNorm`` is read from its
    attributes; a norm recognised by what it computes
    (:func:`dropmc.norms.recognize_norm`) from its
    :class:`~dropmc.norms.NormSpec`: its ``weight``/``bias`` when it has
    them, else the spec's arrays."""

    def __init__(self, module, kind: str, eps: Optional[float], spec=None) -> None:
        self.module, self.kind, self._eps, self.spec = module, kind, eps, spec

    @classmethod
    def of_module(cls, module) -> "_NormParams":
        kind = _norm_kind(module)
        eps = None if kind == "rms" and module.eps is None else float(module.eps)
        return cls(module, kind, eps)

    @classmethod
    def of_spec(cls, module, spec) -> "_NormParams":
        return cls(module, spec.kind, float(spec.eps), spec)

    def eps(self, like) -> float:
        import torch

        return float(torch.finfo(like.dtype).eps) if self._eps is None else self._eps

    def _live(self, attr: str):
        import torch

        t = getattr(self.module, attr, None)
        return t if isinstance(t, torch.Tensor) else None

    def gamma(self):
        import torch

        w = self._live("weight")
        if self.spec is None:
            return w
        if w is not None and w.shape == self.spec.gamma.shape:
            return w + self.spec.weight_offset if self.spec.weight_offset else w
        return torch.from_numpy(self.spec.gamma)

    def beta(self):
        import torch

        b = self._live("bias")
        if self.spec is None or (b is not None and b.shape == self.spec.beta.shape):
            return b
        return torch.from_numpy(self.spec.beta) if self.spec.beta.any() else None


class _Slot:
    """The dropout's latest eval-mode input, taken by the norm's hook."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.v = None

    def take(self, site, z):
        v, self.v = self.v, None
        if v is None:
            raise RuntimeError(f"dropmc.correct: site {site!r}: the norm ran without its dropout "
                               "having run first in this forward (is the site right?)")
        if v.shape != z.shape:
            raise RuntimeError(f"dropmc.correct: site {site!r}: the dropout's input {tuple(v.shape)} "
                               f"and the norm's input {tuple(z.shape)} differ in shape")
        return v


class _Calls:
    """The call index of a hooked module within one forward: its ``k``-th
    call (``name#k``) is ``k`` modulo ``n``, the calls per forward the
    discovery forward made (1 for module-named sites), so the index stays
    right even when the model's own forward, which resets the count, is not
    the entry point."""

    def __init__(self, n: int) -> None:
        self.n, self.count = max(int(n), 1), 0

    def next(self) -> int:
        k = self.count % self.n
        self.count += 1
        return k


def _keep_inputs(calls: _Calls, slots: Dict[int, _Slot]):
    """The dropout's pre-hook: in eval mode keeps its input ``v`` for the
    call whose index has a site."""

    def hook(module, args):
        if module.training:
            return None
        slot = slots.get(calls.next())
        if slot is not None:
            slot.v = args[0].detach()
        return None

    return hook


def _per_call(calls: _Calls, hooks: Dict[int, Any]):
    """The norm's forward hook: in eval mode, the site hook of this call's
    index (none: the output as it is)."""

    def hook(module, args, out):
        if module.training:
            return None
        site_hook = hooks.get(calls.next())
        return None if site_hook is None else site_hook(module, args, out)

    return hook


def _layer_norm_hook(site, slot: _Slot, p: float, params: _NormParams, after=None, order: int = 1):
    """A LayerNorm call's correction: ``β + c (LN(x) − β)``, ``c`` from the
    norm's input ``x`` and the dropout's input ``v``; ``after(x, c)`` (a
    compound site's LN1) sees the pieces."""

    def hook(module, args, out):
        x = args[0]
        v = slot.take(site, x)
        if order == 2:
            return _second_order(v, x, p, True, params.eps(x), params, out)
        c = _noise_ratio(v, x, p, True, params.eps(x)).sqrt()
        if after is not None:
            after(x, c)
        return _shrink_towards_beta(out, c, _beta(params, out))

    return hook


def _rms_norm_hook(site, slot: _Slot, p: float, params: _NormParams, order: int = 1):
    """An RMSNorm call's correction: ``c · RMSNorm(x)`` (no β)."""

    def hook(module, args, out):
        x = args[0]
        v = slot.take(site, x)
        if order == 2:
            return _second_order(v, x, p, False, params.eps(x), params, out)
        c = _noise_ratio(v, x, p, False, params.eps(x)).sqrt()
        return out * c.to(out.dtype)

    return hook


def _compound_hooks(site, slot: _Slot, p: float, ln1: _NormParams, ln2: _NormParams):
    """LN1's hook (``c1``, keeping ``S = mean γ1² x²`` and ``σ² + ε1``) and
    LN2's: ``c2² = (Var ĉ1 + ε2)/(Var ĉ1 + (p/q) c1² S/(σ² + ε1) + ε2)``,
    LN2's input being ``ĉ1`` (src/formulas/compound.rs)."""
    kept: dict = {}

    def after(x, c1):
        dt = _stats_dtype(x)
        xx = x.to(dt)
        gamma = ln1.gamma()
        g2 = 1.0 if gamma is None else gamma.to(dt).square()
        kept["s"] = (g2 * xx.square()).mean(dim=-1, keepdim=True)
        kept["spread"] = xx.var(dim=-1, unbiased=False, keepdim=True) + ln1.eps(x)
        kept["c1"] = c1

    def second(module, args, out):
        if not kept:
            raise RuntimeError(f"dropmc.correct: compound site {site!r}: LN2 ran without LN1")
        u = args[0]
        dt = _stats_dtype(u)
        signal = u.to(dt).var(dim=-1, unbiased=False, keepdim=True)
        noise = kept["c1"].square() * kept["s"] / kept["spread"]
        eps2 = ln2.eps(u)
        c2 = ((signal + eps2) / (signal + (p / (1.0 - p)) * noise + eps2)).sqrt()
        kept.clear()
        return _shrink_towards_beta(out, c2, _beta(ln2, out))

    return _layer_norm_hook(site, slot, p, ln1, after), second


def _fold_batchnorm(correction: Correction, site, dropout, bn) -> None:
    """Folds ``bn``'s running variance for ``dropout``'s rate, channel by
    channel, with the rule of ``formulas::batchnorm::fold_channels``."""
    import torch

    if bn.running_mean is None or bn.running_var is None:
        raise ValueError(f"site {site!r}: the BatchNorm {site[1]!r} tracks no running statistics "
                         "(track_running_stats=False): eval uses batch statistics, nothing to fold")
    rm = bn.running_mean.detach().to(torch.float64).cpu().numpy()
    rv = bn.running_var.detach().to(torch.float64).cpu().numpy()
    judged = _dropmc.fold_batchnorm(_np.ascontiguousarray(rm), _np.ascontiguousarray(rv), float(dropout.p))
    folded = _np.array([rv[k] if f is None else f for k, (f, _) in enumerate(judged)])
    reasons = [r for _, r in judged if r is not None]
    correction._buffers.append((bn.running_var, bn.running_var.detach().clone()))
    with torch.no_grad():
        bn.running_var.copy_(torch.from_numpy(folded).to(bn.running_var.dtype))
    correction.folded.append(site)
    if reasons:
        correction.unfolded[site[1]] = reasons


def _ancestors(name: str) -> List[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(len(parts))]


def _module_path(correction: Correction, modules: dict, names: Iterable[str]) -> None:
    """Every ``nn.TransformerEncoderLayer`` holding one of ``names`` off
    its fused eval path (``activation_relu_or_gelu`` false is one of that
    path's conditions in every torch with it, and the module path ignores
    the flag), and every ``nn.TransformerEncoder`` off nested tensors."""
    import torch.nn as nn

    done = set()
    for name in names:
        for a in _ancestors(name):
            m = modules.get(a)
            if id(m) in done:
                continue
            if isinstance(m, nn.TransformerEncoderLayer):
                correction._set(m, "activation_relu_or_gelu", 0)
                done.add(id(m))
            elif isinstance(m, nn.TransformerEncoder) and getattr(m, "use_nested_tensor", False):
                correction._set(m, "use_nested_tensor", False)
                done.add(id(m))


# --------------------------------------------------------------------------
# The API


def _calls_per_forward(plan: _Plan, module: str, kind: str) -> int:
    """How many times the discovery forward called ``module`` (a dropout
    or a norm); 1 for module-named sites."""
    if plan.found is None:
        return 1
    if kind == "dropout":
        return sum(1 for c in plan.found.dropouts if _module_name(c) == module and ":" not in c)
    return sum(1 for m in plan.found.norm_modules.values() if m == module)


def _norm_params(plan: _Plan, modules: dict, call: str) -> Tuple[str, Any, _NormParams]:
    """``(module name, module, params)`` of a norm call."""
    if plan.found is not None and call in plan.found.norms:
        name = plan.found.norm_modules[call]
        return name, modules[name], _NormParams.of_spec(modules[name], plan.found.norms[call])
    name = _module_name(call)
    return name, modules[name], _NormParams.of_module(modules[name])


def correct(model, inputs=None, sites=None, *, order: int = 1, exclude: Sequence[Any] = (),
            inplace: bool = True, norms=None, **kwargs):
    """Corrects ``model``'s dropout→norm sites so that in eval mode each
    norm outputs the first-order estimate of its train-mode expectation;
    BatchNorm sites ``(dropout, batchnorm)`` get their running variance
    folded.

    ``inputs`` (a tensor, a tuple of positional arguments or a dict of
    keyword ones; more keyword arguments go to the forward too, as in
    :func:`dropmc.audit.audit_torch`): the sites are found by
    :func:`dropmc.discovery.discover` on one train-mode forward on them —
    every clean dropout→norm site, norms recognised by what they compute
    (``norms`` overrides as there), each call of a module called more
    than once its own site (``name#k``). ``sites`` names a subset, or is
    an ``Audit`` of ``audit_torch``; without inputs, ``sites`` are module
    names (``[(dropout, norm), ...]``, ``(dropout, ln1, ln2)``) or, with
    ``sites=None``, fx finds them (:func:`resolve_sites`; the old
    ``correct(model, sites)`` still works). Entangled sites and functional
    ``F.dropout`` sites are refused (named with their reason in
    ``model._dropmc_correction.refused``; a ValueError when named in
    ``sites``), ``p = 0`` sites skipped (``.skipped``).

    ``exclude`` lists sites (tuples or ``"dropout->norm"``), call names or
    module names to leave alone. ``order=2`` applies the second-order
    estimates of src/formulas/second_order.rs at LayerNorm and RMSNorm
    sites (plain or bypass) instead. Training mode is unchanged. Returns
    the model (a deep copy when ``inplace=False``); :func:`uncorrect` undoes
    it. Refuses (ValueError) ``order`` other than 1 or 2, a compound site
    at order 2, a model already corrected, and a model with nothing to
    correct."""
    import torch.nn as nn

    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if isinstance(order, bool) or order not in (1, 2):
        raise ValueError(f"order must be 1 or 2, got {order!r}")
    if getattr(model, _ATTRIBUTE, None) is not None:
        raise ValueError("the model is already corrected: dropmc.torch.uncorrect(model) first")
    if sites is None and _is_site_list(inputs):  # correct(model, sites): the signature before inputs
        inputs, sites = None, inputs
    plan = _plan(model, inputs, sites, norms, kwargs)
    if not inplace:
        model = _copy.deepcopy(model)
    modules = dict(model.named_modules())
    kept = _check_sites(modules, plan, exclude)
    if order == 2 and any(len(s) == 3 for s in kept):
        raise ValueError(f"order=2: a compound site {[s for s in kept if len(s) == 3][0]!r} has no "
                         "second-order closed form (src/formulas/second_order.rs covers LN, RMSNorm "
                         "and the bypass): exclude it or use order=1")
    if not kept:
        why = "; ".join(f"{k}: {v}" for k, v in {**plan.refused, **plan.skipped}.items())
        raise ValueError("no site to correct" + (f" ({why})" if why else "")
                         + " (pass sites=[(dropout_name, norm_name), ...])")
    correction = Correction()
    correction.refused, correction.skipped = dict(plan.refused), dict(plan.skipped)
    slots: List[_Slot] = []
    counters: Dict[str, _Calls] = {}
    dropout_slots: Dict[str, Dict[int, _Slot]] = {}
    norm_hooks: Dict[str, Dict[int, Any]] = {}

    def counter(name: str, kind: str) -> _Calls:
        if name not in counters:
            counters[name] = _Calls(_calls_per_forward(plan, name, kind))
        return counters[name]

    def fresh_forward(module, args):
        """A new forward: call indices restart, and a dropout whose norm did
        not run last forward leaves no stale v."""
        for slot in slots:
            slot.v = None
        for calls in counters.values():
            calls.count = 0

    try:
        for site in kept:
            dname = _module_name(site[0])
            dropout = modules[dname]
            p = float(dropout.p)
            named = [_norm_params(plan, modules, n) for n in site[1:]]
            if named[0][2].kind == "batch":
                _fold_batchnorm(correction, site, dropout, named[0][1])
                continue
            slot = _Slot(site[0])
            slots.append(slot)
            counter(dname, "dropout")
            dropout_slots.setdefault(dname, {})[_call_index(site[0])] = slot
            params = [n[2] for n in named]
            if len(site) == 3:
                hooks = _compound_hooks(site, slot, p, params[0], params[1])
            elif params[0].kind == "layer":
                hooks = (_layer_norm_hook(site, slot, p, params[0], order=order),)
            else:
                hooks = (_rms_norm_hook(site, slot, p, params[0], order),)
            for call, (nname, _, _), hook in zip(site[1:], named, hooks):
                counter(nname, "norm")
                norm_hooks.setdefault(nname, {})[_call_index(call)] = hook
            _module_path(correction, modules, [dname] + [n[0] for n in named])
            correction.sites.append(site)
        for dname, by_index in dropout_slots.items():
            correction._handles.append(modules[dname].register_forward_pre_hook(
                _keep_inputs(counters[dname], by_index)))
        for nname, by_index in norm_hooks.items():
            correction._handles.append(modules[nname].register_forward_hook(
                _per_call(counters[nname], by_index)))
        if slots:  # none when every site is a BatchNorm fold (no per-forward cost)
            correction._handles.append(model.register_forward_pre_hook(fresh_forward))
    except BaseException:
        correction.undo()
        raise
    object.__setattr__(model, _ATTRIBUTE, correction)
    return model


def uncorrect(model):
    """Undoes :func:`correct` on ``model``: removes its hooks, restores the
    encoder layers' fast path and the folded BatchNorm buffers bit for bit.
    Returns the model. A model that is not corrected is a ValueError."""
    correction = getattr(model, _ATTRIBUTE, None)
    if correction is None:
        raise ValueError("the model is not corrected by dropmc.correct")
    correction.undo()
    object.__delattr__(model, _ATTRIBUTE)
    return model


@_contextlib.contextmanager
def corrected(model, inputs=None, sites=None, **kwargs):
    """``with corrected(model) as m:`` — :func:`correct` in place on
    entry (same arguments), :func:`uncorrect` on exit."""
    m = correct(model, inputs, sites, inplace=True, **kwargs)
    try:
        yield m
    finally:
        uncorrect(m)


def norm_outputs(model, inputs, names: Sequence[str], **kwargs) -> Dict[str, Any]:
    """``{name: output}`` of the named modules or module calls
    (``name#k``, the k-th call) on one eval forward of the model on
    ``inputs`` (a tensor, a tuple of positional arguments or a dict of
    keyword ones, plus ``kwargs``), as float64 tensors. Forward hooks are
    registered after any correction's, so they read the corrected outputs.
    Grad stays enabled, as in the audit's capture: it keeps every fused
    path, which would skip the hooks, closed."""
    import torch

    from .discovery import call_inputs

    modules = dict(model.named_modules())
    wanted: Dict[str, Dict[int, str]] = {}
    for n in names:
        wanted.setdefault(_module_name(n), {})[_call_index(n)] = n
    seen: dict = {}

    def record(module_name, by_index):
        calls = [0]

        def hook(module, args, out):
            k = calls[0]
            calls[0] += 1
            name = by_index.get(k)
            if name is None:
                return
            if name in seen:
                raise ValueError(f"{name!r} ran twice in one forward")
            seen[name] = out.detach().to(torch.float64).clone()

        return hook

    handles = [modules[m].register_forward_hook(record(m, by)) for m, by in wanted.items()]
    args, kw = call_inputs(inputs, kwargs)
    was_training = model.training
    model.eval()
    try:
        with torch.enable_grad():
            model(*args, **kw)
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    return seen
