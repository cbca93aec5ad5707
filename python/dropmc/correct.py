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

How: a forward pre-hook on the dropout keeps its input ``v``; a forward
hook on the norm replaces the norm's output in eval mode (in train mode
both hooks return at once, so training is bit for bit what it was). The
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
    is]}``), and what :func:`uncorrect` needs to undo it."""

    def __init__(self) -> None:
        self.sites: List[Tuple[str, ...]] = []
        self.folded: List[Tuple[str, str]] = []
        self.unfolded: Dict[str, List[str]] = {}
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


def resolve_sites(model, sites=None) -> List[Tuple[str, ...]]:
    """The sites to correct as name tuples: ``sites`` given as
    ``[(dropout_name, norm_name), ...]`` and ``(dropout, ln1, ln2)``
    compound tuples, or an ``Audit`` (its sites' ``name`` fields,
    ``"dropout->norm"``), or, with ``sites=None``, what
    :func:`dropmc.audit.find_sites` finds plus the dropout→BatchNorm pairs
    of the model's fx graph. The one place site discovery enters
    ``correct``."""
    from .audit import Audit, find_sites

    if sites is None:
        batchnorm = _batchnorm_sites(model)
        try:
            found = [tuple(s) for s in find_sites(model)]
        except ValueError:
            if not batchnorm:
                raise
            found = []
        return found + batchnorm
    if isinstance(sites, Audit):
        return [tuple(s["name"].split("->")) for s in sites.sites]
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


def _norm_kind(module) -> Optional[str]:
    import torch.nn as nn

    if isinstance(module, nn.LayerNorm):
        return "layer"
    if hasattr(nn, "RMSNorm") and isinstance(module, nn.RMSNorm):
        return "rms"
    if isinstance(module, nn.modules.batchnorm._BatchNorm):
        return "batch"
    return None


def _check_sites(modules: dict, sites: List[Tuple[str, ...]], exclude) -> List[Tuple[str, ...]]:
    """The sites after ``exclude``, each validated: an ``nn.Dropout``
    module, a LayerNorm/RMSNorm/BatchNorm module, no norm or dropout in two
    sites (an entangled site: its correction would need the other's
    noise, which the first-order forms here do not take)."""
    import torch.nn as nn

    excluded = set()
    for e in exclude:
        excluded.add(tuple(e) if not isinstance(e, str) else e)
    kept = [s for s in sites if s not in excluded and not any(n in excluded for n in s)]
    seen_norms: dict = {}
    seen_dropouts: dict = {}
    for s in kept:
        dname = s[0]
        if dname not in modules:
            raise ValueError(f"site {s!r}: {dname!r} is not a module of the model (a functional "
                             "F.dropout call cannot be hooked: make it an nn.Dropout module, or "
                             "exclude the site)")
        if not isinstance(modules[dname], nn.Dropout):
            raise ValueError(f"site {s!r}: {dname!r} is a {type(modules[dname]).__name__}, not an nn.Dropout")
        for n in s[1:]:
            kind = _norm_kind(modules.get(n))
            if kind is None:
                raise ValueError(f"site {s!r}: {n!r} is not a LayerNorm, RMSNorm or BatchNorm of the model")
            if len(s) == 3 and kind != "layer":
                raise ValueError(f"site {s!r}: a compound site's two norms must be nn.LayerNorm")
        for n in s[1:]:
            if n in seen_norms:
                raise ValueError(f"entangled sites {seen_norms[n]!r} and {s!r}: the norm {n!r} sees "
                                 "more than one dropout site; correct refuses (exclude all but one)")
            seen_norms[n] = s
        if dname in seen_dropouts:
            raise ValueError(f"entangled sites {seen_dropouts[dname]!r} and {s!r}: the dropout "
                             f"{dname!r} feeds more than one norm; correct refuses (exclude all but one)")
        seen_dropouts[dname] = s
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


def _second_order(v, x, p: float, centred: bool, eps: float, norm, like):
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
    if norm.weight is not None:
        g = g * norm.weight.to(dt)
    b = getattr(norm, "bias", None)
    if b is not None:
        g = g + b.to(dt)
    return g.to(like.dtype)


def _beta(norm, like):
    b = getattr(norm, "bias", None)
    return None if b is None else b.to(like.dtype)


def _shrink_towards_beta(out, c, beta):
    """``β + c (out − β)``, in ``out``'s dtype."""
    c = c.to(out.dtype)
    return out * c if beta is None else beta + c * (out - beta)


def _rms_eps(norm, like) -> float:
    import torch

    return float(norm.eps) if norm.eps is not None else float(torch.finfo(like.dtype).eps)


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


def _keep_input(slot: _Slot):
    def hook(module, args):
        if not module.training:
            slot.v = args[0].detach()
        return None

    return hook


def _layer_norm_hook(site, slot: _Slot, p: float, after=None, order: int = 1):
    """The norm's forward hook: ``β + c (LN(x) − β)``, ``c`` from the
    norm's input ``x`` and the dropout's input ``v``; ``after(x, v, c)``
    (a compound site's LN1) sees the pieces."""

    def hook(module, args, out):
        if module.training:
            return None
        x = args[0]
        v = slot.take(site, x)
        if order == 2:
            return _second_order(v, x, p, True, float(module.eps), module, out)
        c = _noise_ratio(v, x, p, True, float(module.eps)).sqrt()
        if after is not None:
            after(x, c)
        return _shrink_towards_beta(out, c, _beta(module, out))

    return hook


def _rms_norm_hook(site, slot: _Slot, p: float, order: int = 1):
    def hook(module, args, out):
        if module.training:
            return None
        x = args[0]
        v = slot.take(site, x)
        if order == 2:
            return _second_order(v, x, p, False, _rms_eps(module, x), module, out)
        c = _noise_ratio(v, x, p, False, _rms_eps(module, x)).sqrt()
        return out * c.to(out.dtype)

    return hook


def _compound_hooks(site, slot: _Slot, p: float, ln1):
    """LN1's hook (``c1``, keeping ``S = mean γ1² x²`` and ``σ² + ε1``) and
    LN2's: ``c2² = (Var ĉ1 + ε2)/(Var ĉ1 + (p/q) c1² S/(σ² + ε1) + ε2)``,
    LN2's input being ``ĉ1`` (src/formulas/compound.rs)."""
    kept: dict = {}

    def after(x, c1):
        dt = _stats_dtype(x)
        xx = x.to(dt)
        g2 = 1.0 if ln1.weight is None else ln1.weight.to(dt).square()
        kept["s"] = (g2 * xx.square()).mean(dim=-1, keepdim=True)
        kept["spread"] = xx.var(dim=-1, unbiased=False, keepdim=True) + float(ln1.eps)
        kept["c1"] = c1

    def second(module, args, out):
        if module.training:
            return None
        if not kept:
            raise RuntimeError(f"dropmc.correct: compound site {site!r}: LN2 ran without LN1")
        u = args[0]
        dt = _stats_dtype(u)
        signal = u.to(dt).var(dim=-1, unbiased=False, keepdim=True)
        noise = kept["c1"].square() * kept["s"] / kept["spread"]
        eps2 = float(module.eps)
        c2 = ((signal + eps2) / (signal + (p / (1.0 - p)) * noise + eps2)).sqrt()
        kept.clear()
        return _shrink_towards_beta(out, c2, _beta(module, out))

    return _layer_norm_hook(site, slot, p, after), second


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


def correct(model, sites=None, *, order: int = 1, exclude: Sequence[Any] = (), inplace: bool = True):
    """Corrects ``model``'s dropout→norm sites (``sites`` as in
    :func:`resolve_sites`) so that in eval mode each norm outputs the
    first-order estimate of its train-mode expectation; BatchNorm sites
    ``(dropout, batchnorm)`` get their running variance folded. ``exclude``
    lists sites (tuples) or module names to leave alone. ``order=2``
    applies the second-order estimates of src/formulas/second_order.rs at
    LayerNorm and RMSNorm sites (plain or bypass) instead. Training mode is
    unchanged. Returns the model (a deep copy when ``inplace=False``);
    :func:`uncorrect` undoes it. Refuses (ValueError) ``order`` other than
    1 or 2, a compound site at order 2, functional-dropout sites, entangled
    sites, and a model already corrected."""
    import torch.nn as nn

    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if isinstance(order, bool) or order not in (1, 2):
        raise ValueError(f"order must be 1 or 2, got {order!r}")
    if getattr(model, _ATTRIBUTE, None) is not None:
        raise ValueError("the model is already corrected: dropmc.torch.uncorrect(model) first")
    found = resolve_sites(model, sites)
    if not inplace:
        model = _copy.deepcopy(model)
    modules = dict(model.named_modules())
    kept = _check_sites(modules, found, exclude)
    if order == 2 and any(len(s) == 3 for s in kept):
        raise ValueError(f"order=2: a compound site {[s for s in kept if len(s) == 3][0]!r} has no "
                         "second-order closed form (src/formulas/second_order.rs covers LN, RMSNorm "
                         "and the bypass): exclude it or use order=1")
    if not kept:
        raise ValueError("no site to correct (pass sites=[(dropout_name, norm_name), ...])")
    correction = Correction()
    slots: List[_Slot] = []

    def fresh_forward(module, args):
        """A dropout whose norm did not run last forward leaves no stale v."""
        for slot in slots:
            slot.v = None

    try:
        for site in kept:
            dropout, norms = modules[site[0]], [modules[n] for n in site[1:]]
            p = float(dropout.p)
            kind = _norm_kind(norms[0])
            if kind == "batch":
                _fold_batchnorm(correction, site, dropout, norms[0])
                continue
            slot = _Slot(site[0])
            slots.append(slot)
            correction._handles.append(dropout.register_forward_pre_hook(_keep_input(slot)))
            if len(site) == 3:
                first, second = _compound_hooks(site, slot, p, norms[0])
                correction._handles.append(norms[0].register_forward_hook(first))
                correction._handles.append(norms[1].register_forward_hook(second))
            elif kind == "layer":
                hook = _layer_norm_hook(site, slot, p, order=order)
                correction._handles.append(norms[0].register_forward_hook(hook))
            else:
                correction._handles.append(norms[0].register_forward_hook(_rms_norm_hook(site, slot, p, order)))
            _module_path(correction, modules, site)
            correction.sites.append(site)
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
def corrected(model, sites=None, **kwargs):
    """``with corrected(model) as m:`` — :func:`correct` in place on
    entry, :func:`uncorrect` on exit."""
    m = correct(model, sites, inplace=True, **kwargs)
    try:
        yield m
    finally:
        uncorrect(m)


def norm_outputs(model, inputs, names: Sequence[str]) -> Dict[str, Any]:
    """``{name: output}`` of the named modules on one eval forward of
    ``model(*inputs)`` (forward hooks registered after any correction's,
    so they read the corrected outputs), as float64 tensors. Grad stays
    enabled, as in the audit's capture: it keeps every fused path, which
    would skip the hooks, closed."""
    import torch

    modules = dict(model.named_modules())
    seen: dict = {}

    def record(name):
        def hook(module, args, out):
            if name in seen:
                raise ValueError(f"{name!r} ran twice in one forward")
            seen[name] = out.detach().to(torch.float64).clone()

        return hook

    handles = [modules[n].register_forward_hook(record(n)) for n in names]
    was_training = model.training
    model.eval()
    try:
        with torch.enable_grad():
            model(*(inputs if isinstance(inputs, tuple) else (inputs,)))
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    return seen
