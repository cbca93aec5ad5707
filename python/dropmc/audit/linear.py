"""Linear-path sites in ``dropmc.torch.audit``: the rows of the ordinary
table for every dropout call discovery lists as reaching its norm through
a linear layer, or every attention dropout whose value product reaches a
norm through ``o_proj`` (docs/linear-path.md).

:func:`add_linear_sites` audits the paths the linear-path tracer found
(inside the audit's eval-mode capture forward, :func:`search`; else in one
more eval forward) with the Rust audit of each captured path (the truth
from ``samples`` masks per token sampled through the path, the eval and
first-order outputs) and gives the
:class:`~dropmc.audit.report.Audit` one row per site in
``audit.linear_sites`` (their truths, tokens × d, and SEs in
``audit.linear_truths``) and in its table: the same keys as the engine's
rows (``uncorrected``/``first_order`` gaps from the same noise-corrected
estimator, ``second_order`` None: the family has no second-order closed
form), ``form`` ``'linear'`` or ``'attention path'``. Chains the tracer
cannot follow (a nonlinearity, a norm-mixing op) stay listed by the
coverage with the op that stops them.
"""

from __future__ import annotations

import math
from typing import Dict, List, Tuple

__all__ = ["LinearPlan", "add_linear_sites", "plan_linear_sites", "search", "wanted"]


def wanted(found) -> bool:
    """Whether the forward has a call the family may reach: a dropout call
    with ``p > 0`` and no site of its own (its path may pass a linear
    layer; discovery does not follow every such path: T5's inner
    feed-forward dropout has none), or an eager or SDPA attention dropout."""
    with_site = {s.dropout for s in found.sites}
    return any(p > 0 and call not in with_site for call, p in found.dropouts.items()) or any(
        a.kind in ("eager", "sdpa") and a.p > 0 for a in found.attention)


def _finite_or_inf(gap: dict) -> dict:
    """A gap of the engine's JSON with its non-finite numbers (JSON
    ``null``: the bound and SE of a gap over one token) read as infinity."""
    return {k: float("inf") if v is None else v for k, v in gap.items()}


def _row(site, samples: int) -> dict:
    gaps = site["gaps"]
    first, eval_gap = _finite_or_inf(gaps["first_order"]), _finite_or_inf(gaps["uncorrected"])
    bound = not first["resolved"]
    denominator = first["upper"] if bound else first["rms"]
    tokens = int(site["truth"].shape[0])
    warnings = [] if tokens > 1 else [
        "one token audited: no second token to estimate the gaps' standard error from, so every gap "
        "is only bounded (by infinity); audit a sequence of two tokens or more"]
    return {
        "name": site["name"], "form": "attention path" if site["kind"] == "attention" else "linear",
        "norm": "LayerNorm" if site["norm"] == "layer" else "RMSNorm", "p": site["p"],
        "d": int(site["truth"].shape[1]), "tokens": tokens, "exact": False,
        "samples": samples, "uncorrected": eval_gap, "first_order": first, "second_order": None,
        "factor": eval_gap["rms"] / denominator if 0 < denominator < float("inf") else float("nan"),
        "factor_is_lower_bound": bound, "rho2": None, "resolution": gaps["resolution"],
        "warnings": warnings, "dropout": site["dropout"], "norm_call": site["norm_call"],
    }


def _cell(g: dict) -> str:
    """``G ± SE(G)``, or ``< upper`` (the engine's cell)."""
    return f"{g['rms']:.3e} ± {g['rms_se']:.1e}" if g["resolved"] else f"< {g['upper']:.1e}"


def _factor_cell(r: dict) -> str:
    """``factor`` (``>`` a lower bound), or ``—`` when it has no value
    (a one-token site: both gaps only bounded by infinity)."""
    if not math.isfinite(r["factor"]):
        return "—"
    return f"{'>' if r['factor_is_lower_bound'] else ''}{r['factor']:.1f}"


def table(rows: List[dict]) -> str:
    """The rows in the engine table's columns (``gap 2nd`` is ``—``)."""
    header = ["linear-path site", "form", "norm", "p", "d", "tokens", "truth", "gap eval", "gap 1st",
              "gap 2nd", "factor"]
    cells = [[r["name"], r["form"], r["norm"], f"{r['p']:g}", str(r["d"]), str(r["tokens"]),
              f"{r['samples']} masks", _cell(r["uncorrected"]), _cell(r["first_order"]), "—",
              _factor_cell(r)] for r in rows]
    widths = [max(len(c[i]) for c in cells + [header]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in [header] + cells]
    lines.append("linear paths: truth from masks sampled through the path (further dropouts on it are the "
                 "identity); gap 1st is the linear-path first order; no second-order closed form")
    return "\n".join(lines) + "\n"


#: Multiply-adds of linear-path sampling per second on the 2-core machine
#: (the time estimates of the deferral reason and the progress line).
#: Measured: a 6-layer d = 512 encoder's six feed-forward sites, 64 tokens ×
#: 4096 masks × 512 × 2048 = 1.6·10¹² multiply-adds, took 460 s.
LINEAR_WORK_PER_SECOND = 3.6e9

#: Multiply-adds the default audit spends on linear-path sites before it
#: lists them instead (``linear=None``): at :data:`LINEAR_WORK_PER_SECOND`
#: about 5 s — the order of the rest of a default audit.
LINEAR_AUDIT_WORK = 2e10


def search(model, found, linear=None):
    """The path tracer (:func:`dropmc.model.linear_path.path_tracer`, a context)
    to run inside the audit's eval-mode capture forward, or None when the
    audit has no linear-path family to look for (``linear=False``, or no
    call it may reach: :func:`wanted`)."""
    from ..model.linear_path import path_tracer, rates_of

    if linear is False or not wanted(found):
        return None
    return path_tracer(model, rates_of(found))


class LinearPlan:
    """The linear-path sites an audit will sample (``sites``, their
    estimated wall ``seconds``) and those it lists instead with the reason
    (``deferred``: dropout call → reason)."""

    def __init__(self, sites, seconds: float, deferred: Dict[str, str]):
        self.sites, self.seconds, self.deferred = sites, seconds, deferred


def plan_linear_sites(model, args, kwargs, found, *, samples: int, linear=None, paths=None) -> LinearPlan:
    """The model's linear-path sites and what :func:`add_linear_sites` will
    do with them: ``linear=False`` nothing; ``None`` sample them when their
    work is at most :data:`LINEAR_AUDIT_WORK`, else list them with the
    estimate; ``True`` sample them. ``paths``: the sites the capture
    forward's path tracer found (:func:`search`); None runs one more eval
    forward to find them."""
    from ..model.linear_path import find_linear_paths, rates_of, sampling_work

    if linear is False or not wanted(found):
        return LinearPlan([], 0.0, {})
    known = set(found.dropouts) | {a.call for a in found.attention}
    if paths is None:
        paths = find_linear_paths(model, args, kwargs, rates_of(found))
    sites = [s for s in paths if s["dropout"] in known]
    work = sum(sampling_work(s, samples) for s in sites)
    seconds = work / LINEAR_WORK_PER_SECOND
    if linear is None and work > LINEAR_AUDIT_WORK:
        why = (f"a linear-path site, not audited by default at this size: {len(sites)} such sites need "
               f"{work:.1e} multiply-adds of sampling (about {seconds:.0f} s on 2 cores, over the default's "
               f"{LINEAR_AUDIT_WORK:.0e}); audit(..., linear=True) audits them, at a cost proportional to samples=")
        return LinearPlan([], 0.0, {s["dropout"]: why for s in sites})
    return LinearPlan(sites, seconds, {})


def add_linear_sites(audit, plan: LinearPlan, *, samples: int, seed: int, progress: str = "",
                     clock=None) -> Tuple[List[str], Dict[str, str]]:
    """Audits the sites of ``plan`` and appends their rows, truths and
    table to ``audit``; returns the dropout calls audited (discovery's
    names) for the coverage line, and the plan's deferred calls with their
    reason. Each site's sampling is stopped at what ``clock``
    (:class:`dropmc.audit.budget.Clock`) has left. With ``progress`` (the
    engine's mode) a line on stderr counts the sites and their estimated
    time, then the time taken."""
    from ..model.linear_path import audit_sites

    sites = plan.sites
    if not sites:
        return [], dict(plan.deferred)
    if progress:
        import sys
        import time

        start = time.perf_counter()
        noun = "linear-path site" if len(sites) == 1 else "linear-path sites"
        print(f"dropmc audit: {len(sites)} {noun}, about {plan.seconds:.0f} s ...", file=sys.stderr, flush=True)
    sites = audit_sites(sites, samples, seed, deadline=None if clock is None else clock.left)
    if progress:
        print(f"dropmc audit: linear-path sites done in {time.perf_counter() - start:.1f} s", file=sys.stderr,
              flush=True)
    rows = [_row(s, samples) for s in sites]
    audit.linear_sites = rows
    audit.linear_truths = [(s["truth"], s["truth_se"]) for s in sites]
    audit.linear_table = table(rows)
    return [r["dropout"] for r in rows], {}
