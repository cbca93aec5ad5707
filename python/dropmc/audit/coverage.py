"""The coverage contract of the audit (issue 40 item 1): every dropout call
of the traced forward is audited with numbers or listed with a reason that
is true for that call.

:func:`coverage` reads the :class:`~dropmc.model.discovery.Discovery`, the sites
the audit captured and what it could not read, and returns the rows of
the calls listed without numbers and the counts; :func:`summary_line`
prints ``"N dropout calls: a audited, b listed (reason: count, …)"``.

A call's reason, first that applies: its site row's own (a site the
capture could not read: its error, e.g. eval and train paths differ),
``p = 0``, not inverted dropout (alpha dropout), a mask not readable
against the norm's rows, not selected (``sites=`` named others), entangled (its only sites' bypass depends on its own
mask), an attention call whose weights could not be read (how they were used),
attention skipped (``attention=False``), the op that stops its path to the
first norm it reaches (a linear layer: the linear-path family), or no norm
reached at all.
"""

from __future__ import annotations

from collections import Counter
from typing import Dict, List, Optional, Sequence, Tuple

__all__ = ["coverage", "summary_line", "collapse_warnings"]


def _stop_reason(paths) -> Tuple[str, str]:
    """``(kind, reason)`` for a call whose paths to norms are not sites."""
    from ..model.discovery import beyond_linear  # torch is imported only where a model is traced

    first = paths[0]
    op = first.stop
    beyond = beyond_linear(first.ops) if op.startswith("linear") else None
    if beyond is not None:  # past the linear layer, an op the linear-path family cannot take
        kind = f"through {beyond.split(':', 1)[0]}"
        product = beyond.split(":", 1)[0] in ("bmm", "matmul", "__matmul__", "einsum")
        what = f"through {op}, then {beyond} " + ("(a product of two tensors, which the linear-path family does "
                                                   "not follow)" if product else
                                                   "(a nonlinearity: no closed form on this path)")
    elif op.startswith("linear") and first.length > len(first.ops):  # the rest of the path not recorded
        kind = "through a linear layer"
        what = (f"through {op}, then {first.length - len(first.ops)} more ops not recorded (whether the path "
                "stays linear is not known)")
    elif op.startswith("linear"):
        kind = "through a linear layer"
        what = f"through {op} (a linear path the linear-path family did not audit: docs/linear-path.md)"
    else:
        kind = f"through {op.split(':', 1)[0]}"
        what = f"through {op}"
    more = f" (+{len(paths) - 1} more paths)" if len(paths) > 1 else ""
    return kind, f"{what} to {first.norm}{more}"


def coverage(found, audited: Sequence[str], listed_sites: Sequence[dict], selected: bool,
             attention_audited: Sequence[str], unreadable: Dict[str, str], attention_on: bool,
             deferred: Optional[Dict[str, str]] = None) -> Tuple[List[dict], dict]:
    """``(rows, counts)``: one row ``{"name", "form", "p", "reason",
    "kind"}`` per dropout call not audited (beyond the site rows already in
    ``listed_sites``), and ``{"calls", "audited", "listed", "reasons":
    {kind: count}}``. ``audited``: dropout calls with a site audited;
    ``selected``: whether ``sites=`` chose a subset."""
    done = set(audited) | set(attention_audited)
    site_listed = {r["name"].split("->")[0]: r for r in listed_sites}
    att = {a.call: a for a in found.attention}
    rows, kinds, listed = [], Counter(), 0
    calls = list(found.dropouts) + [c for c in att if c not in found.dropouts]
    for call in calls:
        if call in done:
            continue
        p = found.dropouts.get(call, att[call].p if call in att else 0.0)
        sites = [s for s in found.sites if s.dropout == call]
        paths = [x for x in found.paths if x.dropout == call and not x.site]
        unread = [r for k, r in getattr(found, "unread", {}).items() if k.split("->")[0] == call]
        if site_listed.get(call, {}).get("kind"):  # its site row's own reason (audit._split, a capture error)
            kind, reason = site_listed[call]["kind"], site_listed[call]["reason"]
        elif p == 0:
            kind, reason = "p = 0", "no dropout at this rate (p = 0)"
        elif call in getattr(found, "reasons", {}):
            kind, reason = "not inverted dropout", found.reasons[call]
        elif unread and not sites:
            kind, reason = "mask not readable", unread[0]
        elif call in att:
            if not attention_on:
                kind, reason = "attention skipped", "attention sites skipped (attention=False)"
            elif call in unreadable:
                kind, reason = "attention weights not readable", unreadable[call]
            else:
                kind, reason = "not selected", "not named in sites="
        elif selected and sites:
            kind, reason = "not selected", "not named in sites="
        elif sites and all(s.form == "entangled" for s in sites):
            kind, reason = "entangled", site_listed.get(call, {}).get("reason", sites[0].reason)
        elif sites and all(s.mask is not None and not s.mask.scaled_by_inverse_q() for s in sites):
            kind, reason = "mask not scaled by 1/q", (f"its mask keeps entries at {sites[0].mask.scale:g}, "
                                                      f"not 1/q = {1 / (1 - p):g}")
        elif call in (deferred or {}):  # a linear-path site the audit did not sample (audit/linear.py)
            kind, reason = "linear path not sampled", deferred[call]
        elif paths:
            kind, reason = _stop_reason(paths)
        else:
            kind, reason = "no norm reached", "reaches no LayerNorm/RMSNorm (before another norm or the output)"
        kinds[kind] += 1
        listed += 1
        if call in site_listed:  # its site rows say it already
            continue
        form = "attention" if call in att else "call"
        rows.append({"name": call, "form": form, "p": p, "reason": reason, "kind": kind})
    counts = {"calls": len(calls), "audited": len(done & set(calls)), "listed": listed,
              "reasons": dict(kinds)}
    # An attention call the attention family audited whose path on to a norm (its value product,
    # o_proj, the residual add: the linear-path family) was found but not sampled: listed as well.
    paths = [c for c in calls if c in done and c in (deferred or {})]
    for call in paths:
        p = found.dropouts.get(call, att[call].p if call in att else 0.0)  # an SDPA call: its attention site's
        rows.append({"name": call, "form": "attention path", "p": p, "reason": deferred[call],
                     "kind": "linear path not sampled"})
    if paths:
        counts["paths_not_sampled"] = len(paths)
    return rows, counts


def summary_line(counts: dict) -> str:
    """``"N dropout calls: a audited, b listed (reason: count, …)"``."""
    reasons = ", ".join(f"{k}: {v}" for k, v in sorted(counts["reasons"].items(), key=lambda kv: -kv[1]))
    paths = counts.get("paths_not_sampled", 0)
    return (f"{counts['calls']} dropout calls: {counts['audited']} audited, {counts['listed']} listed"
            + (f" ({reasons})" if reasons else "")
            + (f"; {paths} audited attention calls' paths on through the output projection to a norm "
               "listed (linear path not sampled)" if paths else ""))


def collapse_warnings(table: str, names: Sequence[str]) -> str:
    """The engine's table with its ``warning: <site>: <text>`` lines
    collapsed into one line per text with the count of sites (and the first
    site's name)."""
    texts: Dict[str, List[str]] = {}
    out: List[str] = []
    by_length = sorted(names, key=len, reverse=True)
    for line in table.split("\n"):
        name = next((n for n in by_length if line.startswith(f"warning: {n}: ")), None)
        if name is None:
            out.append(line)
            continue
        texts.setdefault(line[len(f"warning: {name}: "):], []).append(name)
    while out and not out[-1]:
        out.pop()
    for text, sites in texts.items():
        out.append(f"warning: {sites[0]}: {text}" if len(sites) == 1
                   else f"warning ({len(sites)} sites, first {sites[0]}): {text}")
    return "\n".join(out) + ("\n" if table.endswith("\n") else "")
