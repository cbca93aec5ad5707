"""Which sites :func:`dropmc.correct.correct` works on, and why it refuses
the others — the one place site discovery enters ``correct``.

With example inputs, :func:`dropmc.model.discovery.discover` on one train-mode
forward: every clean site by call name (``module#k``, a functional
``F.dropout`` call ``owner:dropout#k``), each norm a dropout call feeds its
own site; refused with the reason: entangled sites (a bypass that depends
on the same mask), ``p = 1`` (the dropout zeroes its input: ``q = 0`` and no
factor), a mask product whose mask is shared over groups of channels or
whose value no module takes as its input (:mod:`dropmc.correct.masks`), a
path to the norm that cannot be replayed on ``v``
(:mod:`dropmc.correct.tapes`); ``p = 0`` skipped. Without inputs: module-named sites, or (``sites=None``) only the
dropout→BatchNorm pairs of the model's ``nn.Sequential`` containers
(:func:`dropmc.model.batchnorm_pairs.sequential_batchnorm_pairs`) — any
other site needs the forward.

Refusals up front, each with its own message and the calls to choose
from: non-finite example inputs, a forward with no dropout call, one with
no norm, a misspelt site or ``exclude`` entry.
"""

from __future__ import annotations

import difflib
from typing import Any, Dict, Iterable, List, Sequence, Tuple

from ..model.calls import call_index as _call_index
from ..model.calls import module_of as _module_name
from ..model.norms import norm_kind
from .forms import _NormParams


def _is_audit(obj) -> bool:
    """Whether ``obj`` is an audit (:class:`dropmc.audit.Audit`), read by what
    ``correct`` uses of one — its ``discovery``, ``sites`` and ``other_sites``
    — so that ``correct`` does not import the audit, which sits above it
    (the layer order of docs/architecture.md)."""
    return not isinstance(obj, (list, tuple, dict)) and \
        all(hasattr(obj, a) for a in ("discovery", "sites", "other_sites"))


def _is_site_list(obj) -> bool:
    """Whether ``correct``'s second positional argument is a site list or
    an ``Audit`` (the signature before ``inputs``) rather than inputs."""
    if _is_audit(obj):
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
    names when they came from discovery), ``found`` (the
    :class:`~dropmc.model.discovery.Discovery`, or None for module-named sites
    without inputs), ``refused`` and ``skipped`` (``{site name: reason}``)."""

    def __init__(self, sites, found=None, refused=None, skipped=None) -> None:
        self.sites: List[Tuple[str, ...]] = sites
        self.found = found
        self.refused: Dict[str, str] = dict(refused or {})
        self.skipped: Dict[str, str] = dict(skipped or {})
        self.call = None  # (args, kwargs) of the example forward, when given
        self.masks: Dict = {}  # mask-product dropout call -> its MaskInfo (dropmc.correct.masks)
        self.tapes: Dict = {}  # site -> steps from the dropout to the norm (dropmc.correct.tapes)
        self.captures: Dict = {}  # gated dropout call -> (module, call index) whose output is v ⊙ g
        self.gates: Dict = {}  # gated site -> its steps, followed live (dropmc.correct.gates)

    def dropout_owner(self, call: str) -> str:
        """The module a dropout call hooks: the ``nn.Dropout`` itself, a
        functional call's owner (``""``: the model), or a mask product's
        value owner (:func:`dropmc.correct.masks.value_owner`)."""
        if call in self.captures:
            return self.captures[call][0]
        if call in self.masks:
            from .masks import value_owner

            return value_owner(self.found, call)
        if self.found is not None and call in self.found.call_modules:
            return self.found.module_of(call)
        return _module_name(call)

    def is_functional(self, call: str) -> bool:
        """Whether a dropout call is a functional ``F.dropout`` call
        (``owner:dropout#k``) rather than an ``nn.Dropout`` module's."""
        return self.found is not None and call in self.found.dropouts and call not in self.masks \
            and _module_name(call) not in self.found.dropout_modules


def _p_reason(p: float):
    """Why a rate has no correction (None: it has one)."""
    if p >= 1:
        return (f"p = {p:g}: the dropout zeroes its input in training (q = 1 − p = 0), so the "
                "first-order factor (p/q) has no value and the train-mode expectation is the norm "
                "of the bypass alone; correct refuses it (set p < 1, or exclude the site)")
    if not 0 <= p < 1:
        return f"p = {p:g} is outside [0, 1)"
    return None


def _refusal(site, found=None):
    """Why discovery's ``site`` is refused (None: it is corrected; a mask
    product pending :func:`dropmc.correct.masks.check_owners`)."""
    from .masks import mask_refusal

    if site.form == "entangled":
        return f"entangled: {site.reason}; correct refuses it (no first-order closed form)"
    if getattr(site, "mask", None) is not None and found is not None:  # a mask product (MaskInfo)
        reason = mask_refusal(found, site)
        if reason is not None:
            return reason
    elif "rand_mask" in site.dropout.split(":")[-1]:
        return (f"{site.dropout!r} is a torch.rand mask multiplied in, read without its mask: correct "
                "refuses it (exclude the site)")
    return _p_reason(site.p)


def _split_discovered(found, chosen, named: bool) -> _Plan:
    """``chosen`` (discovery ``Site``\\ s) into what ``correct`` corrects
    and what it refuses or skips, with the reason. ``named``: the user
    named these sites, so a refusal is a ValueError, not a note."""
    from .gates import live_steps
    from .tapes import light_tape

    kept, refused, skipped, masks, tapes, captures, gates = [], {}, {}, {}, {}, {}, {}
    chosen_sites = {s.as_tuple() for s in chosen}
    for site in chosen:
        over = getattr(found, "held", {}).get(site.dropout) if found is not None else None
        if not named and over is not None and (over,) + site.as_tuple()[1:] in chosen_sites:
            refused[site.name] = (  # one site per norm (_check_sites): the mask's own, as before it was read
                f"{site.norm!r} also sees {over!r}, a mask drawn over this dropout's output (drop-path), and "
                f"correct corrects one site per norm at scope 'site': that one (sites=[{site.as_tuple()!r}] "
                "corrects this one instead)")
            continue
        reason = _refusal(site, found)
        if reason is not None:
            if named:
                raise ValueError(f"site {site.name!r}: {reason}")
            refused[site.name] = reason
        elif site.p == 0:
            skipped[site.name] = "no dropout at this rate (p = 0)"
        else:
            tape, capture = getattr(site, "tape", ()), getattr(site, "capture", None)
            if capture is not None:  # a gated site: v ⊙ g is a module's output (discovery._gate_capture)
                tape = tape[capture[2]:]
                captures[site.dropout] = capture[:2]
            steps, why = light_tape(tape)
            # A gated site no module's output captures: v' = v ⊙ g followed live (dropmc.correct.gates).
            gated = (live_steps(site.tape) if why is not None and capture is None
                     and getattr(site, "mask", None) is None else None)
            if gated is not None:
                kept.append(site.as_tuple())
                gates[site.as_tuple()] = gated
                continue
            if why is not None:
                if named:
                    raise ValueError(f"site {site.name!r}: {why}")
                refused[site.name] = f"{why}; correct refuses it (exclude the site)"
                continue
            kept.append(site.as_tuple())
            if steps:
                tapes[site.as_tuple()] = steps
            if getattr(site, "mask", None) is not None:
                masks[site.dropout] = site.mask
    plan = _Plan(kept, found, refused, skipped)
    plan.masks, plan.tapes, plan.captures, plan.gates = masks, tapes, captures, gates
    return plan


def _check_finite(args, kw) -> None:
    import torch
    from torch.utils._pytree import tree_flatten

    for t in tree_flatten((args, kw))[0]:
        if isinstance(t, torch.Tensor) and t.is_floating_point() and not torch.isfinite(t).all():
            bad = int((~torch.isfinite(t)).sum())
            raise ValueError(f"inputs: an example input of shape {tuple(t.shape)} has {bad} non-finite "
                             "value(s) (NaN or inf): the sites and their factors are read from a forward "
                             "on these inputs; give finite example inputs")


def _nothing_found(found, need_sites: bool = True) -> None:
    """A forward with nothing ``correct`` could act on: its own message
    (``need_sites`` False: a dropout and a norm are enough, as for
    ``scope="network"``, whose noise may reach the norms only through
    other ops). An attention dropout with ``p > 0`` is a dropout call too:
    ``found.dropouts`` lists the eager ones, ``found.attention`` every one,
    SDPA's ``dropout_p`` and ``nn.MultiheadAttention``'s among them (the
    network ledger follows their noise; the per-site scope has no site for
    them, and says so below)."""
    if not found.dropouts and not any(a.p > 0 for a in found.attention):
        raise ValueError("no site to correct: the model made no dropout call (nn.Dropout, F.dropout, "
                         "SDPA dropout_p > 0, nn.MultiheadAttention dropout) "
                         f"in a train-mode forward on these inputs. The forward's {found.summary()}")
    if not found.norms:
        raise ValueError("no site to correct: the model made no LayerNorm/RMSNorm call in a train-mode "
                         f"forward on these inputs. The forward's {found.summary()}. A norm it does not "
                         "read: norms={name: dropmc.model.norms.NormSpec(...)}")
    if need_sites and not found.sites:
        raise ValueError("no site to correct: no dropout call's output reaches a norm directly or as "
                         f"h + dropout(v). The forward's {found.summary()}")


def _plan(model, inputs=None, sites=None, norms=None, kwargs=None, need_sites: bool = True) -> _Plan:
    """The one place site discovery enters ``correct`` (see
    :func:`dropmc.correct.resolve_sites`; ``need_sites``: see
    :func:`_nothing_found`)."""
    from ..model.discovery import Site, call_inputs, discover
    from ..model.select import select_sites

    if _is_audit(sites):
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
        from ..model.batchnorm_pairs import sequential_batchnorm_pairs

        batchnorm = sequential_batchnorm_pairs(model)
        if not batchnorm:
            raise ValueError("correct(model) without example inputs finds only dropout→BatchNorm pairs "
                             "that follow one another in an nn.Sequential, and this model has none: give "
                             "example inputs, correct(model, inputs), to find its sites from one forward "
                             "(dropout→LayerNorm/RMSNorm, and dropout→BatchNorm in any forward), or name "
                             "them, sites=[(dropout_module, norm_module), ...]")
        return _Plan(batchnorm)
    args, kw = call_inputs(inputs, kwargs)
    _check_finite(args, kw)
    found = discover(model, *args, norms=norms, **kw)
    if sites is None:
        from ..model.batchnorm_pairs import traced_batchnorm_pairs

        batchnorm = traced_batchnorm_pairs(model, args, kw)  # the forward's dropout→BatchNorm pairs
        if not batchnorm:
            _nothing_found(found, need_sites)
        plan = _split_discovered(found, found.sites, named=False)
        plan.sites += batchnorm
    else:
        chosen = select_sites(found, _legacy_tuples(sites), dict(model.named_modules()))
        plan = _split_discovered(found, chosen, named=True)
    plan.call = (args, kw)
    return plan


def _excluded(site: Tuple[str, ...], excluded: set) -> bool:
    return site in excluded or "->".join(site) in excluded \
        or any(n in excluded or _module_name(n) in excluded for n in site)


def _unmatched_exclusions(plan: _Plan, excluded: set) -> List:
    names = [tuple(n.split("->")) for n in list(plan.refused) + list(plan.skipped)] + list(plan.sites)
    return [e for e in excluded if not any(_excluded(s, {e}) for s in names)]


def _close(name: str, choices: Iterable[str]) -> str:
    near = difflib.get_close_matches(name, list(choices), n=3, cutoff=0.5)
    return f" (did you mean {', '.join(repr(n) for n in near)}?)" if near else ""


def _check_module_site(modules: dict, s: Tuple[str, ...]) -> None:
    """A module-named site (no discovery): an ``nn.Dropout`` module and
    LayerNorm/RMSNorm/BatchNorm modules, misspellings named with the
    model's modules of that kind."""
    import torch.nn as nn

    dname = _module_name(s[0])
    dropouts = [n for n, m in modules.items() if isinstance(m, nn.Dropout)]
    if dname not in modules:
        raise ValueError(f"site {s!r}: {s[0]!r} is not a module of the model{_close(dname, dropouts)}. "
                         f"Its nn.Dropout modules: {dropouts}. A functional F.dropout call has no module: "
                         "give correct example inputs, correct(model, inputs), to find it by call name")
    if not isinstance(modules[dname], nn.Dropout):
        raise ValueError(f"site {s!r}: {dname!r} is a {type(modules[dname]).__name__}, not an nn.Dropout. "
                         f"Its nn.Dropout modules: {dropouts}")
    reason = _p_reason(float(modules[dname].p))
    if reason is not None:
        raise ValueError(f"site {s!r}: {reason}")


def _check_sites(modules: dict, plan: _Plan, exclude) -> List[Tuple[str, ...]]:
    """The sites after ``exclude`` (site tuples, ``"dropout->norm"``
    names, call names or module names; an entry matching no site is a
    ValueError listing them), each validated: a dropout call discovery
    saw or an ``nn.Dropout`` module, a LayerNorm/RMSNorm/BatchNorm (or a
    norm discovery recognised by what it computes), no norm call in two
    sites (it would need both dropouts' noise at once). A dropout call in
    several sites is fine: each norm it feeds is corrected with the same
    ``v``."""
    excluded = set()
    for e in exclude:
        excluded.add(tuple(e) if not isinstance(e, str) else e)
    missing = _unmatched_exclusions(plan, excluded)
    if missing:
        every = ["->".join(s) for s in plan.sites] + list(plan.refused) + list(plan.skipped)
        raise ValueError(f"exclude: {missing[0]!r} names no site, call or module of a site. The sites: "
                         f"{every}")
    kept = [s for s in plan.sites if not _excluded(s, excluded)]
    seen_norms: dict = {}
    for s in kept:
        if plan.found is None or s[0] not in plan.found.dropouts:
            _check_module_site(modules, s)
        for n in s[1:]:
            discovered = plan.found is not None and n in plan.found.norms
            kind = plan.found.norms[n].kind if discovered else norm_kind(modules.get(_module_name(n)))
            if kind is None:
                norms = [k for k, m in modules.items() if norm_kind(m) is not None]
                raise ValueError(f"site {s!r}: {n!r} is not a LayerNorm, RMSNorm or BatchNorm of the model"
                                 f"{_close(_module_name(n), norms)}. Its norm modules: {norms} (each recognised by "
                                 "what it computes on a probe input; give correct example inputs for a "
                                 "norm that needs the model's own)")
            if len(s) == 3 and kind != "layer":
                raise ValueError(f"site {s!r}: a compound site's two norms must be LayerNorms")
        for n in s[1:]:
            if n in seen_norms:
                raise ValueError(f"sites {seen_norms[n]!r} and {s!r}: the norm {n!r} sees more than one "
                                 "dropout site, and its correction would need both noises at once; "
                                 "correct refuses (exclude all but one)")
            seen_norms[n] = s
    return kept


def _norm_params(plan: _Plan, modules: dict, call: str) -> Tuple[str, Any, _NormParams]:
    """``(module name, module, params)`` of a norm call."""
    if plan.found is not None and call in plan.found.norms:
        name = plan.found.norm_modules[call]
        return name, modules[name], _NormParams.of_spec(modules[name], plan.found.norms[call])
    name = _module_name(call)
    return name, modules[name], _NormParams.of_module(modules[name])


def _p_of(plan: _Plan, modules: dict, call: str) -> float:
    if plan.found is not None and call in plan.found.dropouts:
        return float(plan.found.dropouts[call])
    return float(modules[_module_name(call)].p)


def _calls_per_forward(plan: _Plan, module: str, kind: str) -> int:
    """How many times the discovery forward called ``module`` (a dropout,
    a functional-dropout owner or a norm; for ``kind="owner"``, ``module``
    is a mask product's call base, one per call of its value owner); 1 for
    module-named sites."""
    if plan.found is None:
        return 1
    if kind == "dropout":
        return sum(1 for c in plan.found.dropouts if _module_name(c) == module and ":" not in c)
    if kind == "output":  # a gated site's capturing module: its calls in the forward
        return plan.found.module_calls.get(module, 1)
    if kind == "owner":  # a mask product's value owner: one call per call of the mask (module)
        return sum(1 for c in plan.found.dropouts if _module_name(c) == module)
    if kind == "functional":
        return sum(1 for c in plan.found.dropouts if plan.is_functional(c) and plan.found.module_of(c) == module)
    return sum(1 for m in plan.found.norm_modules.values() if m == module)
