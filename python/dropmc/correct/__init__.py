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

Sites: given example inputs, those :func:`dropmc.model.discovery.discover` finds
on one train-mode forward (norms recognised by what they compute,
corrected with their :class:`~dropmc.model.norms.NormSpec`), ``nn.Dropout``
modules and functional ``F.dropout`` calls alike, each norm a dropout call
feeds its own site; mask products (``x · dropout(ones)``, drop-path) with
``v`` the input of the module making the product (:mod:`dropmc.correct.masks`:
a token-level mask by its exact expectation), the steps from the dropout
to the norm replayed on ``v`` (:mod:`dropmc.correct.tapes`); entangled
sites, grouped masks and ``p = 1`` refused with the reason.
Without inputs: module-named sites, or only the dropout→BatchNorm pairs
of the model's ``nn.Sequential`` containers (:mod:`dropmc.correct.sites`,
the one switch point).

How: forward hooks that keep each dropout's input and replace the norm's
output in eval mode only (train mode is bit for bit what it was), one per
call of a module called more than once (``name#k``); plain
``nn.Dropout``/``nn.LayerNorm`` swapped to a subclass instead
(:mod:`dropmc.correct.fast`); the fused ``nn.TransformerEncoderLayer``
path left for a dedicated eval forward. :mod:`dropmc.correct.hooks` and
docs/correct.md say how, and what ``uncorrect`` restores.

Scope: the above is ``scope="site"`` (each site for its own dropout's
noise). ``scope="network"`` corrects every norm for the noise of every
dropout upstream (:mod:`dropmc.correct.network`); it is the default
whenever it can run (:func:`dropmc.correct.scope.default_scope`: with
example inputs, no ``sites``, ``order=1`` and no ``linear=True``).
"""

from __future__ import annotations

import contextlib as _contextlib
import copy as _copy
import functools as _functools
from typing import Any, Dict, List, Sequence, Tuple

import numpy as _np

from .. import _dropmc
from .forms import _NormParams
from .masks import refuse_unchecked
from .scope import by_default, default_scope
from .read_norms import norm_outputs  # noqa: F401  (re-exported: dropmc.correct.norm_outputs)
from ..model.calls import call_index as _call_index
from ..model.calls import module_of as _module_name
from .sites import _calls_per_forward, _check_sites, _excluded, _is_site_list, _norm_params, _p_of, _plan, _Plan

__all__ = ["correct", "uncorrect", "corrected", "resolve_sites", "norm_outputs", "Correction", "default_scope"]

#: The attribute of a corrected model that holds its :class:`Correction`.
_ATTRIBUTE = "_dropmc_correction"


class Correction:
    """What :func:`correct` changed on a model (``model._dropmc_correction``):
    ``scope`` (the one applied), ``scope_reason`` (why), ``sites`` (the corrected LN/RMS sites; none at
    ``scope="network"``), ``network`` (``scope="network"``: norm call → its
    upstream noise ratio κ), ``network_uncovered`` (``(op, module)`` of each
    op with a noisy input the network ledger has no rule for, and each
    random draw it could not follow), ``folded`` (the BatchNorm sites
    folded), ``unfolded`` (``{batchnorm_name: [reason per channel left as
    is]}``), ``refused`` (``{site name: reason}``: entangled, ``p = 1``
    sites), ``skipped`` (``p = 0`` sites), and what :func:`uncorrect` needs to undo it."""

    def __init__(self) -> None:
        self.sites: List[Tuple[str, ...]] = []
        self.folded: List[Tuple[str, str]] = []
        self.unfolded: Dict[str, List[str]] = {}
        self.refused: Dict[str, str] = {}
        self.skipped: Dict[str, str] = {}
        self.linear_sites: List[Tuple[str, str]] = []  # linear-path sites (correct/linear.py)
        self.scope = "site"
        self.scope_reason = ""  # why this scope (dropmc.correct.default_scope)
        self.network: Dict[str, float] = {}  # scope="network": norm call -> κ (dropmc.correct.network)
        self.network_uncovered: List[Tuple[str, str]] = []  # (op, module) the ledger could not follow
        self.network_shifted: List[str] = []  # scope="network", order=2: activation modules shifted (network_shift)
        self._handles: list = []
        self._attributes: list = []  # (module, name, original value)
        self._added: list = []  # (module, name) of attributes correct added (dropmc.correct.fast.swap)
        self._buffers: list = []  # (buffer tensor, original copy)

    def _set(self, module, name: str, value) -> None:
        self._attributes.append((module, name, getattr(module, name)))
        setattr(module, name, value)

    def _add(self, module, name: str, value) -> None:
        self._added.append((module, name))
        object.__setattr__(module, name, value)

    def undo(self) -> None:
        for h in self._handles:
            h.remove()
        for module, name, value in reversed(self._attributes):
            setattr(module, name, value)
        for module, name in self._added:
            module.__dict__.pop(name, None)
        import torch

        with torch.no_grad():
            for buffer, original in self._buffers:
                buffer.copy_(original)
        self._handles, self._attributes, self._buffers, self._added = [], [], [], []


# --------------------------------------------------------------------------
# Corrections that change buffers, and the encoder layers' fused path


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


def resolve_sites(model, sites=None, inputs=None, *, norms=None, **kwargs) -> List[Tuple[str, ...]]:
    """The sites to correct as name tuples. With ``inputs`` (a tensor, a
    tuple of positional arguments or a dict of keyword ones, as
    :func:`dropmc.audit.audit_torch` takes them) or keyword ``kwargs``:
    :func:`dropmc.model.discovery.discover` on one train-mode forward, every clean
    site by call name (``module#k`` for a module's k-th call,
    ``owner:dropout#k`` for a functional call), or the ``sites`` named,
    validated against that forward; entangled and ``p = 1`` sites refused,
    ``p = 0`` sites skipped (see ``Correction.refused`` / ``.skipped``).
    ``sites`` an ``Audit`` of ``audit_torch``: its audited sites. Without
    inputs: ``sites`` as ``[(dropout_name, norm_name), ...]`` / ``(dropout,
    ln1, ln2)`` module names, or (``sites=None``) the dropout→BatchNorm
    pairs that follow one another in an ``nn.Sequential`` (a ValueError
    asking for inputs when there are none)."""
    return _plan(model, inputs, sites, norms, kwargs).sites


# --------------------------------------------------------------------------
# The API


class _Builder:
    """Collects the hooks of one :func:`correct` call: per dropout call a
    shared :class:`_Slot`, per hooked module a call counter, per norm the
    site hook of each call index, per functional owner a scope."""

    def __init__(self, plan: _Plan, modules: dict) -> None:
        self.plan, self.modules = plan, modules
        self.slots: Dict[str, Any] = {}  # dropout call -> slot
        self.counters: Dict[str, Any] = {}
        self.dropout_slots: Dict[str, Dict[int, Any]] = {}
        self.scope_slots: Dict[str, Dict[int, Any]] = {}
        self.owner_slots: Dict[str, Dict[int, Any]] = {}
        self.output_slots: Dict[str, Dict[int, Any]] = {}
        self.norm_hooks: Dict[str, Dict[int, Any]] = {}

    def counter(self, key: str, name: str, kind: str):
        from .hooks import _Calls

        if key not in self.counters:
            self.counters[key] = _Calls(_calls_per_forward(self.plan, name, kind))
        return self.counters[key]

    def slot(self, call: str):
        """The slot of a dropout call, shared by every norm it feeds."""
        from .hooks import _Slot

        if call not in self.slots:
            self.slots[call] = _Slot(call)
            owner = self.plan.dropout_owner(call)
            if call in self.plan.captures:  # a gated site: v ⊙ g is its module's output
                self.counter("output:" + owner, owner, "output")
                self.output_slots.setdefault(owner, {})[self.plan.captures[call][1]] = self.slots[call]
            elif call in self.plan.masks:  # v is the value owner's input (dropmc.correct.masks)
                self.counter("owner:" + owner, _module_name(call), "owner")
                self.owner_slots.setdefault(owner, {})[_call_index(call)] = self.slots[call]
            elif self.plan.is_functional(call):
                self.counter("functional:" + owner, owner, "functional")
                self.scope_slots.setdefault(owner, {})[_call_index(call)] = self.slots[call]
            else:
                self.counter(owner, owner, "dropout")
                self.dropout_slots.setdefault(owner, {})[_call_index(call)] = self.slots[call]
        return self.slots[call]

    def norm(self, nname: str, call: str, hook) -> None:
        self.counter(nname, nname, "norm")
        self.norm_hooks.setdefault(nname, {})[_call_index(call)] = hook

    def install(self, correction: "Correction", model) -> None:
        import torch.nn as nn

        from . import fast as _fast
        from .hooks import _FreshForward, _KeepInputs, _KeepOutputs, _PerCall, _Scope, _ScopeHook, replace_forward

        scopes = []
        handles = correction._handles
        if self.slots or self.norm_hooks:  # none when every site is a BatchNorm fold (no per-forward cost)
            handles.append(model.register_forward_pre_hook(
                _FreshForward(list(self.slots.values()), self.counters, scopes)))
        for dname, by_index in self.dropout_slots.items():
            keep, module = _KeepInputs(self.counters[dname], by_index), self.modules[dname]
            if type(module) is nn.Dropout:  # no hook: a class of its own (dropmc.correct.fast)
                _fast.swap(correction, module, _fast._KeepingDropout, _dropmc_keep=keep)
            else:
                handles.append(module.register_forward_pre_hook(keep))
        for owner, by_index in self.owner_slots.items():
            handles.append(self.modules[owner].register_forward_pre_hook(
                _KeepInputs(self.counters["owner:" + owner], by_index)))
        for owner, by_index in self.output_slots.items():
            handles.append(self.modules[owner].register_forward_hook(
                _KeepOutputs(self.counters["output:" + owner], by_index)))
        for owner, by_index in self.scope_slots.items():
            scope = _Scope(self.counters["functional:" + owner], by_index)
            scopes.append(scope)
            module = self.modules[owner]
            handles.append(module.register_forward_pre_hook(_ScopeHook(scope, "enter")))
            # always_call: a forward that raises still leaves its scope (no mode left running)
            handles.append(module.register_forward_hook(_ScopeHook(scope, "leave"), always_call=True))
            for child in module.children():
                handles.append(child.register_forward_pre_hook(_ScopeHook(scope, "down")))
                handles.append(child.register_forward_hook(_ScopeHook(scope, "up"), always_call=True))
        for nname, by_index in self.norm_hooks.items():
            module = self.modules[nname]
            if _fast.swappable_norm(module, by_index):
                _fast.swap(correction, module, _fast._CorrectedLayerNorm,
                           _dropmc_norm=_fast._FusedPerCall(self.counters[nname], by_index))
            elif not replace_forward(correction, module, _PerCall(self.counters[nname], by_index)):
                # prepend: the user's own hooks on the norm see the corrected output
                handles.append(module.register_forward_hook(_PerCall(self.counters[nname], by_index),
                                                            prepend=True))


def _rehearse(model, plan: _Plan) -> None:
    """One eval forward of the corrected model on the example inputs: a
    site whose dropout input cannot be captured as the norm's ``v`` (the
    norm ran without it, or it has another shape) is a ValueError now,
    not at the user's first forward."""
    if plan.call is None or not plan.sites:
        return
    from .hooks import rehearse

    rehearse(model, plan.call, "correct cannot capture this site's v on an eval forward of the example inputs; "
             "exclude it (exclude=[...])")


def _site_hooks(site, slot, p: float, params: List[_NormParams], order: int, mask=None) -> tuple:
    """The norm hooks of one site; a token-level mask product's is its
    exact expectation (:class:`dropmc.correct.masks._TokenSite`), an
    elementwise one's the ordinary factor (per token the same law)."""
    from .hooks import _CompoundSecond, _CompoundState, _LayerNormSite, _RmsNormSite
    from .masks import _TokenSite

    if mask is not None and mask.kind == "token":
        return (_TokenSite(site, slot, p),)
    if len(site) == 3:
        state = _CompoundState()
        return (_LayerNormSite(site, slot, p, params[0], 1, state), _CompoundSecond(site, p, params[1], state))
    if params[0].kind == "layer":
        return (_LayerNormSite(site, slot, p, params[0], order),)
    return (_RmsNormSite(site, slot, p, params[0], order),)


def correct(model, inputs=None, sites=None, *, order: int = 1, exclude: Sequence[Any] = (),
            inplace: bool = True, norms=None, linear=None, scope=None, **kwargs):
    """Corrects ``model``'s dropout→norm sites so that in eval mode each
    norm outputs the first-order estimate of its train-mode expectation;
    BatchNorm sites ``(dropout, batchnorm)`` get their running variance
    folded.

    ``inputs`` (a tensor, a tuple of positional arguments or a dict of
    keyword ones; more keyword arguments go to the forward too, as in
    :func:`dropmc.audit.audit_torch`): the sites are found by
    :func:`dropmc.model.discovery.discover` on one train-mode forward on them —
    every clean dropout→norm site, norms recognised by what they compute
    (``norms`` overrides as there), each call of a module called more
    than once its own site (``name#k``). ``sites`` names a subset, or is
    an ``Audit`` of ``audit_torch``; without inputs, ``sites`` are module
    names (``[(dropout, norm), ...]``, ``(dropout, ln1, ln2)``) or, with
    ``sites=None``, only the dropout→BatchNorm pairs of its
    ``nn.Sequential`` containers (a ValueError asking for inputs when
    there are none; the old
    ``correct(model, sites)`` still works). Functional ``F.dropout`` calls
    (``owner:dropout#k``, ``dropout_add``-style helpers included) are
    corrected like ``nn.Dropout`` modules; one dropout call feeding several
    norms is one site per norm. Entangled sites and ``p = 1`` are refused
    (named with their reason in ``model._dropmc_correction.refused``; a
    ValueError when named in ``sites``), ``p = 0`` sites skipped
    (``.skipped``). Non-finite example inputs, a forward without a dropout
    or without a norm, and a misspelt site or ``exclude`` entry are each a
    ValueError of their own, naming the calls to choose from.

    ``exclude`` lists sites (tuples or ``"dropout->norm"``), call names or
    module names to leave alone. ``order=2`` applies the second-order
    estimates of src/formulas/second_order.rs at LayerNorm and RMSNorm
    sites (plain or bypass) instead. Training mode is unchanged. Returns
    the model (a deep copy when ``inplace=False``); :func:`uncorrect` undoes
    it. ``linear``: the linear-path sites (:mod:`dropmc.correct.linear`):
    None corrects them when the model has no other site, True always (with
    example inputs; at a norm that is also another site's, both noises in
    one factor), False never. Refuses (ValueError) ``order`` other than 1 or 2, a compound site
    at order 2, a model already corrected, and a model with nothing to
    correct.

    ``scope``: ``"site"`` corrects each dropout→norm site for its own
    dropout's noise (all of the above); ``"network"`` corrects every norm
    call any dropout's noise reaches for the noise of every dropout
    upstream (:mod:`dropmc.correct.network`: the ratio ``κ`` of each
    norm's upstream noise to its input's spread, measured once on
    ``inputs`` by the noise ledger of :mod:`dropmc.model.network_ledger`, applied
    live to each token). It needs example inputs and takes no ``sites``;
    ``order=2`` adds the nonlinearities' mean shift
    (:mod:`dropmc.model.network_shift`); ``exclude`` names norm calls or modules (or sites,
    for their norm) to leave alone; BatchNorm sites are folded as at
    ``"site"``; the ops the ledger cannot follow are in
    ``Correction.network_uncovered``. ``None`` (the default): ``"network"``
    when it can run and finds a norm, else ``"site"`` (:mod:`dropmc.correct.scope`; see ``.scope_reason``)."""
    import torch.nn as nn

    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    from ..model.inputs import checked_model  # a torch.compile wrapper's module; bad inputs refused

    model = checked_model(model, "correct", None if _is_site_list(inputs) else inputs, kwargs)
    if isinstance(order, bool) or order not in (1, 2):
        raise ValueError(f"order must be 1 or 2, got {order!r}")
    if scope not in (None, "site", "network"):
        raise ValueError(f"scope must be 'site', 'network' or None (the default), got {scope!r}")
    if getattr(model, _ATTRIBUTE, None) is not None:
        raise ValueError("the model is already corrected: dropmc.torch.uncorrect(model) first")
    if sites is None and _is_site_list(inputs):  # correct(model, sites): the signature before inputs
        inputs, sites = None, inputs
    if linear is not None and not isinstance(linear, bool):
        raise TypeError(f"linear must be None or a bool, got {type(linear).__name__}")
    if not isinstance(inplace, bool):  # inplace="no" was truthy: the model corrected in place
        raise TypeError(f"inplace must be a bool, got {type(inplace).__name__}")
    if scope is None:  # the network's when it runs and finds a norm, else the site's (dropmc.correct.scope)
        call = _functools.partial(correct, model, inputs, sites, order=order, exclude=exclude, inplace=inplace,
                                  norms=norms, linear=linear, **kwargs)
        return by_default(call, inputs, sites, order, linear, kwargs)
    if scope == "network":
        from .network import network_arguments

        network_arguments(inputs, sites, order, linear, kwargs)
        linear = False  # the ledger carries the linear paths' noise too
    try:
        plan, error = _plan(model, inputs, sites, norms, kwargs, need_sites=scope == "site"), None
    except ValueError as e:
        plan, error = None, e
    from .linear import linear_plan  # linear-path sites (docs/linear-path.md)
    wanted = linear or (linear is None and plan is None)
    found = getattr(plan, "found", None)  # discovery's train-mode rates (BERT's eval attention passes p=0)
    linear = linear_plan(model, inputs, sites, order, exclude, kwargs, found) if wanted else None
    if plan is None and (linear is None or not linear.sites):
        raise error
    if not inplace:
        model = _copy.deepcopy(model)
    modules = dict(model.named_modules())
    network = None
    if scope == "network":
        from .network import network_plan

        network = network_plan(model, plan, exclude)
        kept = [s for s in plan.sites if _norm_params(plan, modules, s[-1])[2].kind == "batch"
                and not _excluded(s, {e if isinstance(e, str) else tuple(e) for e in exclude})]
    else:
        kept = refuse_unchecked(plan, modules, model, _check_sites(modules, plan, exclude)) if plan is not None else []
    if order == 2 and any(len(s) == 3 for s in kept):
        raise ValueError(f"order=2: a compound site {[s for s in kept if len(s) == 3][0]!r} has no "
                         "second-order closed form (src/formulas/second_order.rs covers LN, RMSNorm "
                         "and the bypass): exclude it or use order=1")
    if network is not None and not kept and not network[0]:
        raise ValueError("no norm to correct: the network ledger saw no dropout noise reach a LayerNorm/RMSNorm "
                         "call on these inputs (or every such norm is excluded)")
    if network is None and not kept and not (linear and linear.sites):
        why = "; ".join(f"{k}: {v}" for k, v in {**plan.refused, **plan.skipped}.items())
        raise ValueError("no site to correct" + (f" ({why})" if why else " (every site excluded)"))
    correction = Correction()
    correction.scope_reason = "named by the caller"
    if plan is not None:
        correction.refused, correction.skipped = dict(plan.refused), dict(plan.skipped)
    build = _Builder(plan, modules) if plan is not None else None
    ordinary: Dict[str, Any] = {}
    from . import fast as _fast
    from .gates import Following
    following = Following()
    try:
        for site in kept:
            p = _p_of(plan, modules, site[0])
            named = [_norm_params(plan, modules, n) for n in site[1:]]
            if named[0][2].kind == "batch":
                _fold_batchnorm(correction, site, modules[_module_name(site[0])], named[0][1])
                continue
            if network is not None:
                continue
            mask = plan.masks.get(site[0])
            slot = build.slot(site[0])
            if site in plan.gates:  # dropout(v) ⊙ g: v' followed live (dropmc.correct.gates)
                slot = following.follower(site, slot, plan.gates[site])
            hooks = _site_hooks(site, slot, p, [n[2] for n in named], order, mask)
            if site in plan.tapes:
                hooks[0].steps = plan.tapes[site]
            for call, (nname, _, _), hook in zip(site[1:], named, hooks):
                build.norm(nname, call, hook)
                ordinary[call] = hook  # a linear-path site at the same norm composes with it
            _fast.module_path(correction, modules, [plan.dropout_owner(site[0])] + [n[0] for n in named])
            correction.sites.append(site)
        if network is not None:
            from .network import install_network

            hooked = install_network(correction, build, plan, modules, network, shift=order == 2)
            _fast.module_path(correction, modules, hooked)
        if build is not None:
            build.install(correction, model)
            if following.followers:  # after the model's _FreshForward pre-hook
                correction._handles += [model.register_forward_pre_hook(following.enter),
                                        model.register_forward_hook(following.leave, always_call=True)]
            _rehearse(model, plan)
        if linear is not None:
            linear.install(correction, model, ordinary)
    except BaseException:
        correction.undo()
        raise
    from .hooks import refuse_scripting
    refuse_scripting(correction, model)  # torch.jit.script: a TypeError naming the correction
    object.__setattr__(model, _ATTRIBUTE, correction)
    return model


def uncorrect(model):
    """Undoes :func:`correct` on ``model``: removes its hooks, restores the
    encoder layers' fast path and the folded BatchNorm buffers bit for bit.
    Returns the model. A model that is not corrected is a ValueError."""
    from ..model.inputs import unwrap_compiled

    model = unwrap_compiled(model, "uncorrect")
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
