"""Audit a PyTorch model's dropout→norm sites on its own activations.

``audit_torch(model, inputs)`` finds the sites with
:func:`dropmc.model.discovery.discover` (one neutral train-mode forward that
records data flow; the only site discovery of dropmc: the older fx-based
``find_sites``/``capture_sites`` are gone), captures them in one more
forward (:mod:`dropmc.audit.capture_eval`): each site's pre-dropout vector ``v``,
bypass ``h`` and the norm's ``γ, β, ε``, and hands them to dropmc's Rust
engine, which computes per token the true ``E[norm(h + dropout(v))]``
(exact enumeration for ``d ≤ 16``, else the fast site sampler), the eval
output ``norm(h + v)``, the first-order correction and the second-order
one, and their gaps to the truth. See docs/audit.md.

Coverage (:mod:`dropmc.audit.coverage`): every dropout call of the forward is
audited with numbers or listed with its reason (``audit.other_sites``),
and ``str(audit)`` opens with ``"N dropout calls: a audited, b listed
(reasons)"``.

Attention sites: eager attention (``F.dropout`` on a softmax whose output
meets the values in a ``matmul``/``bmm``, after views or not), SDPA calls
with ``dropout_p > 0`` and every ``nn.MultiheadAttention`` with
``dropout > 0`` are audited with the attention family's quantities on the
model's own softmax rows; a call whose weights cannot be read is listed
with the reason. ``attention=False`` skips them.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

from .. import _dropmc
from .budget import (MAX_SAMPLES, PLANNED_SHARE, Clock, check_samples, progress_mode, refuse_over_budget,
                           seconds_of)
from .npz import load, load_attention, save_captures
from .report import Audit
from ..model.mha import capture_attention_sites
from ..model.select import select as _select
from ..model.select import select_sites as _select_sites

__all__ = ["Audit", "audit_torch", "audit_captures", "capture", "load", "load_attention", "save_captures",
           "capture_attention_sites", "audit_attention_captures"]

#: Masks per token of the default budget (see docs/audit.md for what it
#: resolves): the Rust engine's ``dropmc::audit::DEFAULT_SAMPLES``.
DEFAULT_SAMPLES = int(_dropmc.AUDIT_DEFAULT_SAMPLES)

#: Tokens per site audited by default: a site with more is audited on a
#: seeded uniform sample of this many, its gaps' standard errors including
#: the sampling error (``dropmc::audit::DEFAULT_TOKENS``; docs/audit.md).
DEFAULT_TOKENS = int(_dropmc.AUDIT_DEFAULT_TOKENS)

#: Query rows per attention site the sampled check visits by default (at
#: most ``tokens``; every row when ``tokens="all"``): the closed forms cover
#: every row (``dropmc::audit::DEFAULT_ATTENTION_ROWS``).
DEFAULT_ATTENTION_ROWS = int(_dropmc.AUDIT_DEFAULT_ATTENTION_ROWS)

#: Mask draws per query, head and sampled coordinate of an attention site's
#: sampled check (``DEFAULT_ATTENTION_SAMPLES`` of src/audit/attention.rs).
DEFAULT_ATTENTION_SAMPLES = int(_dropmc.AUDIT_DEFAULT_ATTENTION_SAMPLES)



def _token_count(tokens):
    """``tokens=`` as the engine reads it: None for every token, else the
    sample size (a ValueError naming ``tokens`` otherwise)."""
    if tokens == "all":
        return None
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise ValueError(f"tokens must be 'all' or an int of at least 1 (tokens per site), got {tokens!r}")
    return tokens


def _attention(captures, samples, seed, tokens, mode, deadline=None):
    """``(table, json, moments)`` of :func:`audit_attention_captures`,
    ``mode`` the engine's progress mode, stopped at ``deadline`` seconds."""
    rows = _token_count(tokens)
    rows = None if rows is None else min(rows, DEFAULT_ATTENTION_ROWS)
    if not captures:
        return "", "[]", []
    return _dropmc.audit_attention_sites(captures, samples, seed, rows, mode, deadline)


def audit_attention_captures(captures: List[dict], *, samples: int = DEFAULT_ATTENTION_SAMPLES,
                             seed: int = 0, tokens=DEFAULT_TOKENS, progress=False):
    """``(table, json, moments)`` of captured attention sites, from dropmc's
    Rust engine (``samples`` draws per query, head and sampled coordinate
    for the sampled check, on every query row (``tokens="all"``) or a seeded
    sample of at most ``DEFAULT_ATTENTION_ROWS`` and ``tokens`` rows per
    site; the closed forms cover every row), with the progress on stderr
    as :func:`dropmc.audit.budget.progress_mode` reads ``progress``)."""
    check_samples("attention_samples", samples, 256, "draws per query, head and coordinate")
    return _attention(captures, samples, seed, tokens, progress_mode(progress))


def _check_budgets(samples, seed, attention_samples):
    check_samples("samples", samples, 129, "masks per token")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SAMPLES:
        raise ValueError(f"seed must be an int from 0 to 2**64 - 1, got {seed!r}")
    check_samples("attention_samples", attention_samples, 256, "draws per query, head and coordinate")


def _estimate(captures, attention_captures, samples, tokens, attention_samples):
    """``(all, least)`` seconds of the engine's estimate (audit_budget)."""
    count = _token_count(tokens)
    rows = None if count is None else min(count, DEFAULT_ATTENTION_ROWS)
    return _dropmc.audit_estimate(captures, samples, count, list(attention_captures), attention_samples, rows)


def audit_captures(captures: List[dict], *, samples: int = DEFAULT_SAMPLES, seed: int = 0,
                   attention_captures: Sequence[dict] = (),
                   attention_samples: int = DEFAULT_ATTENTION_SAMPLES, tokens=DEFAULT_TOKENS,
                   time_budget=None, progress=None) -> Audit:
    """Audits captured sites with dropmc's Rust engine (no model run), each
    on every token (``tokens="all"``) or a seeded uniform sample of
    ``tokens`` of them, within ``time_budget`` seconds, with progress on
    stderr (:func:`audit_torch`; a request estimated over the budget, or
    over an hour without one, is refused up front)."""
    clock = Clock(seconds_of(time_budget))
    _check_budgets(samples, seed, attention_samples)
    _token_count(tokens)
    mode = progress_mode(progress)
    attention_captures = list(attention_captures)
    refuse_over_budget(clock, samples, norm_and_attention=_estimate(
        captures, attention_captures, samples, tokens, attention_samples))
    return _audit_captures(captures, attention_captures, samples, seed, attention_samples, tokens, clock, mode)


def _audit_captures(captures, attention_captures, samples, seed, attention_samples, tokens, clock, mode,
                    reserve=0.0) -> Audit:
    """The audit of checked captures on ``clock``: the attention sites,
    then the norm sites planned in :data:`PLANNED_SHARE` of the time left
    less ``reserve`` (the linear-path sites' estimate), each step stopped
    at the clock's deadline."""
    attention = _attention(attention_captures, attention_samples, seed, tokens, mode,
                           clock.left("attention audit"))
    if captures:
        left = clock.left("audit of the norm sites")
        plan = None if left is None else max(PLANNED_SHARE * (left - reserve), 0.01 * left)
        table, text, truths = _dropmc.audit_sites(captures, samples, seed, _token_count(tokens), plan, mode,
                                                  left)
    else:
        table, text, truths = "", "[]", []
    return Audit(table, text, truths, captures, attention, attention_captures)


def _no_sites_message(found) -> str:
    return ("the model has no dropout call (nn.Dropout, F.dropout, SDPA dropout_p, a rand mask) in this "
            f"forward. The forward's {found.summary()}")


def _split(chosen):
    """``(clean, other)``: the sites the engine audits (elementwise, token-level
    and grouped masks alike) and the rows listed without numbers."""
    other, clean = [], []
    for s in chosen:
        row = {"name": s.name, "form": s.form, "p": s.p}
        if s.mask is not None:
            row["mask"] = s.mask.kind
        if s.form == "entangled":
            other.append(dict(row, reason=s.reason, kind="entangled"))
        elif s.p == 0:
            other.append(dict(row, p=0.0, reason="no dropout at this rate (p = 0)", kind="p = 0"))
        elif s.mask is not None and not s.mask.scaled_by_inverse_q():
            other.append(dict(row, kind="mask not scaled by 1/q", reason=(
                f"the mask keeps entries at {s.mask.scale:g}, not 1/q (drop-path divides its input by q "
                "instead: v would be read as x/q)")))
        else:
            clean.append(s)
    return clean, other


def capture(model, inputs=None, *, sites: Optional[Sequence] = None, norms=None, token_mask=None,
            **kwargs) -> List[dict]:
    """The engine's capture dicts of ``model``'s norm sites (all the clean
    ones, or those ``sites`` names) on ``inputs``, without auditing them:
    the discovery and capture of :func:`audit_torch` (there is no other;
    ``find_sites``/``capture_sites``, the fx rule, are gone)."""
    from .capture_eval import capture_traced
    from ..model.discovery import call_inputs, discover

    args, kw = call_inputs(inputs, kwargs)
    found = discover(model, *args, norms=norms, **kw)
    chosen = found.sites if sites is None else _select_sites(found, sites, dict(model.named_modules()))
    return capture_traced(model, args, kw, found, _split(chosen)[0], [], token_mask=token_mask)[0]


def audit_torch(model, inputs=None, *, samples: int = DEFAULT_SAMPLES, seed: int = 0,
                sites: Optional[Sequence] = None, attention: bool = True,
                attention_samples: int = DEFAULT_ATTENTION_SAMPLES, norms=None, token_mask=None,
                tokens=DEFAULT_TOKENS, time_budget=None, progress=None, linear=None, **kwargs) -> Audit:
    """Finds ``model``'s dropout→norm and attention-dropout sites
    (:func:`dropmc.model.discovery.discover`), captures them in one more forward
    (which also carries the linear-path search when it is an eval-mode one:
    two model runs in all) and audits them (``samples`` masks per token from ``seed``;
    ``attention_samples`` draws per query, head and sampled coordinate for
    the attention sites' sampled check).

    ``tokens``: a site with more tokens than this int is audited on a
    seeded uniform sample of that many (the table says "128 of 1024"; the
    gaps' standard errors include the sampling error; an attention site's
    sampled check visits that many query rows, its closed forms every row);
    ``"all"`` audits every token. ``audit.truth(i)`` then holds the sampled
    tokens' rows, ``audit.token_indices(i)`` their indices.
    ``time_budget`` (seconds, a float > 0) bounds the wall time: each norm
    site gets its planned work's share of what is left after discovery,
    capture and the attention checks, and stops before a batch of 16 tokens
    that would overrun it (a uniform sample still; the table says how many
    tokens each site got); a step that outlives the budget is stopped with
    a TimeoutError. A request estimated over the budget (or an hour without
    one) is refused up front, a ValueError naming ``samples``
    (:mod:`dropmc.audit.budget`). Ctrl-C ends the call within a second.
    ``progress``: progress on stderr (sites done, time left), in place on a
    terminal, else a line per 10 %; None (the default) shows it on a
    terminal, and elsewhere once the run has taken 2 s.
    ``linear``: the linear-path sites (a dropout reaching its norm through
    linear layers, docs/linear-path.md; rows in ``audit.linear_sites``):
    None (the default) samples them when their work is at most
    ``dropmc.audit.linear.LINEAR_AUDIT_WORK`` multiply-adds and else lists them with
    the estimate; True always; False never.

    ``inputs``: a tensor, a tuple of positional arguments, or a dict of
    keyword arguments; further keyword arguments go to the forward too.
    ``sites`` names a subset (call names as the table prints them: tuples
    for norm sites, strings for attention calls); ``attention=False`` skips
    the attention sites; ``norms`` maps module names to a
    :class:`dropmc.model.norms.NormSpec` for norms the recognition cannot read.
    Padded tokens are left out by the mask of each site's sequence:
    ``token_mask`` (a tensor, or ``{module prefix: tensor}``), else the
    forward's ``decoder_attention_mask`` for sites under a ``decoder``
    module and its ``attention_mask`` for the rest (``audit.tokens`` says
    how many were audited). Every dropout call not audited is listed with
    its reason (``audit.other_sites``, ``audit.coverage``)."""
    try:
        import torch.nn as nn
    except ImportError as e:  # pragma: no cover
        raise ImportError("dropmc.audit.audit_torch needs torch") from e
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(attention, bool):
        raise TypeError(f"attention must be a bool, got {type(attention).__name__}")
    if linear is not None and not isinstance(linear, bool):
        raise TypeError(f"linear must be None or a bool, got {type(linear).__name__}")
    clock = Clock(seconds_of(time_budget))
    _check_budgets(samples, seed, attention_samples)
    _token_count(tokens)
    mode = progress_mode(progress)
    from contextlib import nullcontext

    from .capture_eval import capture_traced, failure_row, in_eval
    from .coverage import coverage
    from ..model.discovery import call_inputs, discover
    from ..model.inputs import check_call, unwrap_compiled, validate_inputs

    model = unwrap_compiled(model, "audit")
    args, kw = call_inputs(inputs, kwargs)
    validate_inputs(model, args, kw)
    check_call(model, args, kw)
    found = discover(model, *args, norms=norms, **kw)
    modules = dict(model.named_modules())
    if sites is None:
        chosen, calls = found.sites, [a.call for a in found.attention]
    else:
        chosen, calls = _select(found, sites, modules)
    clean, other = _split(chosen)
    picked = [a for a in found.attention if a.call in calls and attention]
    other += [{"name": a.call, "form": "attention", "p": 0.0, "reason": "no dropout at this rate (p = 0)"}
              for a in picked if a.p == 0]
    traced_attention = [a for a in picked if a.kind != "mha" and a.p > 0]
    mha = [a.call for a in picked if a.kind == "mha" and a.p > 0]
    if not found.dropouts and not found.attention:
        raise ValueError(_no_sites_message(found))
    from .linear import search
    from ..model.linear_path import paths_of

    paths, tracing = None, search(model, found, linear) if sites is None and in_eval(clean) else None
    with tracing if tracing is not None else nullcontext() as tracer:  # one eval forward: capture, paths
        captures, attention_caps, counted, unreadable = capture_traced(
            model, args, kw, found, clean, traced_attention, token_mask=token_mask, inner=tracer)
        if tracer is not None:
            paths = paths_of(tracer)
    del tracer
    failed = [s for s in clean if s.name in unreadable]  # a site's capture error: its listed row
    other += [failure_row(s, unreadable.pop(s.name)) for s in failed]
    clean = [s for s in clean if s not in failed]
    if mha:
        attention_caps += capture_attention_sites(model, args, mha, kw)
    from .linear import add_linear_sites, plan_linear_sites  # docs/linear-path.md

    plan = (plan_linear_sites(model, args, kw, found, samples=samples, linear=linear, paths=paths)
            if sites is None else None)
    reserve = 0.0 if plan is None else plan.seconds
    refuse_over_budget(clock, samples, linear_seconds=reserve, norm_and_attention=_estimate(
        captures, attention_caps, samples, tokens, attention_samples))
    audit = _audit_captures(captures, attention_caps, samples, seed, attention_samples, tokens, clock, mode,
                            reserve)
    linear, deferred = (add_linear_sites(audit, plan, samples=samples, seed=seed, progress=mode, clock=clock)
                        if plan is not None else ([], {}))
    rows, counts = coverage(found, [s.dropout for s in clean] + linear, other, sites is not None,
                            [c["name"] for c in attention_caps], unreadable, attention, deferred)
    for row, site in zip(audit.sites, clean):  # the engine's rows, in the captures' order
        if site.mask is not None:
            row.update(mask=site.mask.kind, mask_sharing=site.mask.text)
    audit.other_sites = other + rows
    audit.coverage = counts
    audit.tokens = counted
    audit.discovery = found
    audit.draws = list(found.draws)
    return audit
