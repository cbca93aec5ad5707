"""The sites a caller names (``sites=`` of ``audit_torch`` and ``correct``),
found in one forward's :class:`~dropmc.model.discovery.Discovery` and
validated against it: a name that is not a site is a ValueError saying why
(not a dropout, not a call of the forward, not a norm call, or the path
that stops it). One place, shared by the audit and ``correct``."""

from __future__ import annotations

from .calls import module_of

__all__ = ["select", "select_sites"]


def _unknown_site(t, found, modules) -> str:
    import torch.nn as nn

    dname, nname = t[0], t[1]
    base = module_of(dname)
    if base in modules and not isinstance(modules[base], nn.modules.dropout._DropoutNd):
        return f"{dname!r} is not an nn.Dropout of the model"
    if dname not in found.dropouts:
        return (f"{dname!r} is neither an nn.Dropout call nor an F.dropout call of the forward "
                "(a module's k-th call is 'name#k', an F.dropout call 'owner:dropout')")
    if nname not in found.norms:
        return f"{nname!r} is not a LayerNorm or RMSNorm call of the forward"
    paths = [x for x in found.paths if x.dropout == dname and x.norm == nname]
    if paths:
        from .discovery import beyond_linear

        how = f"{dname} reaches {nname} through {paths[0].stop} ({' -> '.join(paths[0].ops)})"
        if paths[0].stop.startswith("linear") and beyond_linear(paths[0].ops) is None:
            how += " — a linear-path site: the default audit (sites=None) audits it (docs/linear-path.md)"
        return how
    return f"{dname}'s output does not reach {nname} before another norm"


def select_sites(found, sites, modules):
    """The norm sites ``sites`` (tuples only) names, validated as
    :func:`select` does (``correct``'s entry)."""
    return select(found, [t for t in sites if not isinstance(t, str)], modules)[0]


def select(found, sites, modules):
    """``(norm sites, attention calls)`` that ``sites`` names: tuples
    ``(dropout, norm)`` or ``(dropout, ln1, ln2)`` by call name, and
    attention calls as strings; each validated against the forward (a name
    that is not a site is a ValueError saying why; an entangled site stays
    entangled)."""
    by_tuple = {s.as_tuple(): s for s in found.sites}
    by_pair = {}
    for s in found.sites:
        by_pair.setdefault(s.as_tuple()[:2], s)
    attention = {a.call for a in found.attention}
    chosen, calls = [], []
    for t in sites:
        if isinstance(t, str):
            if t not in attention:
                raise ValueError(f"site {t!r} is not an attention call of the forward (its attention calls: "
                                 f"{sorted(attention) or 'none'})")
            calls.append(t)
            continue
        t = tuple(t)
        if len(t) not in (2, 3):
            raise ValueError(f"site {t!r}: expected (dropout, norm), (dropout, ln1, ln2) or an attention call")
        site = by_tuple.get(t)
        if site is None and len(t) == 2 and t in by_pair:
            site = by_pair[t]
            if site.form == "compound":  # named as plain: LN1 alone
                site = type(site)(site.dropout, site.norm, "plain", site.p)
        if site is None:
            raise ValueError(f"site {t!r}: {_unknown_site(t, found, modules)}. The forward's "
                             f"{found.summary(limit=6)}. Its sites: {found.sites_line(limit=6)}")
        chosen.append(site)
    return chosen, calls
