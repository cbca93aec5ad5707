"""Should I correct, and where? ``dropmc.torch.assess(model, data, metric)``
measures what :func:`dropmc.correct.correct` does to the number the user
cares about, with the paired statistics of :mod:`dropmc.assess.stats`.

Variants, each run over the same batches (docs/correct.md, "When to
correct: assess"):

* ``plain``: the eval forward;
* ``corrected (network scope)``: ``correct(model, inputs)`` at
  ``correct``'s default scope (the network's, or ``scope`` when named),
  and ``corrected (site scope)``: every site ``correct(model, inputs,
  sites=sites, scope="site")`` corrects — norm, BatchNorm and linear-path
  sites alike (one row, labelled by its scope, when the scope is the
  site's: ``scope="site"``, or ``sites`` named, which the network scope
  does not take);
* ``[k] alone``: the per-site call with every other site in ``exclude=``;
* ``all but [k]``: with ``exclude=[site k]`` (no such row with one site:
  it is plain). These rows and the recommendation are per-site
  corrections: sites are what the per-site scope names.

Every variant's per-unit values are compared with plain's on the same
units (``d_u = metric(variant)_u − metric(plain)_u``, lower is better) and
the rows on all units form one Holm family at ``alpha``. The
recommendation: the units are split in two halves by a seeded
permutation; the sites whose "alone" row is "better" on half A at
:data:`~dropmc.assess.stats.SCREEN_LEVEL` are chosen, and that set is then
tested once, at ``alpha``, on half B, which did not choose it.
``result.recommended`` is the chosen set when half B confirms it
"better", else ``[]`` (leave the model uncorrected).

Cost: each distinct site set is one pass of ``k`` batches — ``variants ×
k`` forwards of the metric (``result.forwards``), plus per variant the
discovery and rehearsal forwards of ``correct`` on the example inputs
(``result.model_forwards`` counts every forward). Batches are read
lazily and kept (the same units for every variant, also from a one-shot
iterator); ``time_budget`` caps ``k`` from the measured time per forward,
never below the units the test needs.

The model is left as it came (uncorrected, its training mode restored)
on every exit: a result, an error or Ctrl-C (``KeyboardInterrupt``
propagates after the cleanup).
"""

from __future__ import annotations

import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from .report import Assessment, site_name
from .stats import MIN_UNITS_PER_TEST, SCREEN_LEVEL, holm, paired, suite_alpha, suite_power, verdict
from ..audit.budget import seconds_of as _seconds
from ..audit.budget import show_progress as _show_progress
from ..correct import correct, uncorrect

__all__ = ["assess", "MIN_UNITS"]

#: The fewest units ``assess`` accepts: each half needs
#: :data:`~dropmc.assess.stats.MIN_UNITS_PER_TEST` for its own test.
MIN_UNITS = 2 * MIN_UNITS_PER_TEST

#: ``correct``'s keyword for the per-site rows: a site alone, all sites
#: but one, the recommendation. Sites are dropout→norm pairs, which only
#: the per-site scope names (the network scope corrects every norm).
_SITE = {"scope": "site"}


class _Batches:
    """``data`` read once, lazily, each ``(inputs, target)`` batch kept."""

    def __init__(self, data) -> None:
        try:
            self._it = iter(data)
        except TypeError:
            raise ValueError(f"data must be an iterable of (inputs, target) batches, got "
                             f"{type(data).__name__}") from None
        self.kept: List[Tuple[Any, Any]] = []
        self.done = False

    def get(self, i: int) -> Optional[Tuple[Any, Any]]:
        while len(self.kept) <= i and not self.done:
            try:
                item = next(self._it)
            except StopIteration:
                self.done = True
                break
            if not isinstance(item, (tuple, list)) or len(item) != 2:
                raise ValueError(f"data: batch {len(self.kept)} is not an (inputs, target) pair "
                                 f"(got {type(item).__name__})")
            self.kept.append((item[0], item[1]))
        return self.kept[i] if i < len(self.kept) else None


def _unit_count(target) -> Optional[int]:
    """The units a batch's target holds: its first dimension (a tensor or
    array), its length (a list or tuple); None for anything else (a dict,
    a scalar), whose count only the metric knows."""
    shape = getattr(target, "shape", None)
    if shape is not None:
        return int(shape[0]) if len(shape) > 0 else None
    return len(target) if isinstance(target, (list, tuple)) else None


def _units(values, target, batch: int, label: str):
    """The metric's per-unit values as a float64 numpy vector, checked."""
    import numpy as np
    import torch

    where = f"batch {batch}, variant {label!r}"
    if not isinstance(values, torch.Tensor):
        raise ValueError(f"metric must return a tensor of per-unit values, got {type(values).__name__} ({where})")
    if values.dim() != 1:
        raise ValueError(f"metric must return a 1-D tensor, one value per unit (lower is better); got shape "
                         f"{tuple(values.shape)} ({where}){': a scalar' if values.dim() == 0 else ''}")
    expected = _unit_count(target)
    if expected is not None and values.numel() != expected:
        raise ValueError(f"metric returned {values.numel()} values but the target of {where} holds {expected} "
                         "units (its first dimension): one value per unit")
    out = values.detach().to(torch.float64).cpu().numpy()
    if not np.isfinite(out).all():
        raise ValueError(f"metric returned a non-finite value (NaN or inf) at unit "
                         f"{int(np.flatnonzero(~np.isfinite(out))[0])} ({where})")
    return out


def _check_arguments(model, metric, alpha, seed) -> float:
    import torch.nn as nn

    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if getattr(model, "_dropmc_correction", None) is not None:
        raise ValueError("model is already corrected: dropmc.torch.uncorrect(model) first (assess compares "
                         "the plain model with its corrections)")
    if not callable(metric):
        raise TypeError(f"metric must be callable as metric(output, target), got {type(metric).__name__}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    if alpha is None:
        return suite_alpha()
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise ValueError(f"alpha must be a number in (0, 1) (the family level), got {alpha!r}")
    return float(alpha)


def _scope_arguments(model, example, sites, scope) -> Tuple[List[Tuple[str, dict]], str]:
    """``([(row label, correct's scope kwargs)], note)`` for the corrected
    rows: the scope asked for (None: the one ``correct(model, example,
    sites=sites)`` applies by default, read from one correct/uncorrect:
    :mod:`dropmc.correct.scope`), each label naming it, and the per-site
    scope as a second row when the first is the network's."""
    if scope not in (None, "site", "network"):
        raise ValueError(f"scope must be 'site', 'network' or None (correct's default), got {scope!r}")
    if scope == "network" and sites is not None:
        raise ValueError("scope='network' corrects every norm the noise reaches and takes no sites: "
                         "scope='site' (or None) with sites=")
    chosen, why = scope, "named"
    if scope is None:
        correct(model, example, sites=sites)
        try:
            chosen, why = model._dropmc_correction.scope, model._dropmc_correction.scope_reason
        finally:
            uncorrect(model)
    rows = [(f"corrected ({chosen} scope)", {"scope": chosen})]
    if chosen != "site":
        rows.append(("corrected (site scope)", {"scope": "site"}))
    return rows, (f"scope: {chosen} ({why}); the per-site rows (alone, all but, recommended) are per-site "
                  "corrections")


class _Run:
    """One assessment's state: the batches, the cached metric values per
    site set, the forward counts and the clock."""

    def __init__(self, model, batches: _Batches, metric, example, sites, seconds, show) -> None:
        self.model, self.batches, self.metric, self.example = model, batches, metric, example
        self.sites = sites  # the user's sites= (None: every site)
        self.seconds, self.show = seconds, show
        self.values: Dict[Any, List[Any]] = {}
        self.forwards = 0
        self.limit: Optional[int] = None  # batches every variant uses (None: all)
        self.start = time.perf_counter()
        self.forward_seconds = 0.0

    def _forward(self, label: str, i: int):
        import torch

        from ..model.discovery import call_inputs

        inputs, target = self.batches.get(i)
        args, kw = call_inputs(inputs, {})
        t0 = time.perf_counter()
        with torch.no_grad():
            out = self.metric(self.model(*args, **kw), target)
        self.forward_seconds += time.perf_counter() - t0
        self.forwards += 1
        return _units(out, target, i, label)

    def _enough(self, i: int, pending: int) -> bool:
        """Whether batch ``i`` (0-based) still fits the time budget with
        ``pending`` more variants to run over as many batches."""
        if self.seconds is None or i == 0:
            return True
        units = sum(len(v) for v in self.values[None][:i])
        if units < MIN_UNITS:
            return True  # never below the units a valid test needs
        per = self.forward_seconds / max(self.forwards, 1)
        left = self.seconds - (time.perf_counter() - self.start)
        return (i + 1) * per * (1 + pending) <= left

    def plain(self, pending: int) -> None:
        """The plain pass, which also fixes how many batches every variant uses."""
        self.values[None] = []
        i = 0
        while self.batches.get(i) is not None and self._enough(i, pending):
            self.values[None].append(self._forward("plain", i))
            i += 1
        self.limit = i

    def variant(self, key, exclude: List[tuple], label: str, kw: dict, pending: int) -> None:
        """The metric's values with every site but ``exclude`` corrected
        (``correct``'s own selection, which reaches linear-path sites
        too), cached under ``key``."""
        if key in self.values:
            return
        if self.seconds is not None and pending > 0:  # shrink the batch count if the run is late
            per = (time.perf_counter() - self.start) / max(self.forwards, 1)
            left = self.seconds - (time.perf_counter() - self.start)
            self.limit = max(self._fewest_batches(), min(self.limit, int(left / (per * (pending + 1)))))
        correct(self.model, self.example, sites=self.sites, exclude=exclude, **kw)
        try:
            self.values[key] = [self._forward(label, i) for i in range(self.limit)]
        finally:
            uncorrect(self.model)
        for i, (a, b) in enumerate(zip(self.values[None], self.values[key])):
            if len(a) != len(b):
                raise ValueError(f"metric returned {len(b)} values for batch {i} under {label!r} but {len(a)} "
                                 "plain: one value per unit, the same units for every variant")

    def _fewest_batches(self) -> int:
        total = 0
        for i, v in enumerate(self.values[None]):
            total += len(v)
            if total >= MIN_UNITS:
                return i + 1
        return len(self.values[None])

    def say(self, text: str) -> None:
        if self.show:
            print(f"assess: {text} [{time.perf_counter() - self.start:.1f} s]", file=sys.stderr, flush=True)


def _sites_of(model, example, sites, kw) -> Tuple[List[tuple], dict]:
    """The sites ``correct(model, example, sites=sites)`` corrects (norm,
    BatchNorm and linear-path sites alike), and those it refused or
    skipped, from one correct/uncorrect."""
    correct(model, example, sites=sites, **kw)
    try:
        c = model._dropmc_correction
        found = [tuple(s) for group in (c.sites, c.folded, c.linear_sites) for s in group]
        other = {**{k: f"refused: {v}" for k, v in c.refused.items()},
                 **{k: f"skipped: {v}" for k, v in c.skipped.items()}}
    finally:
        uncorrect(model)
    return found, other


def _variants(found: List[tuple], scoped: List[Tuple[str, dict]]) -> List[Tuple[str, str, frozenset, dict]]:
    """``(label, kind, site set, scope kwargs)`` of every row but plain."""
    rows = [(label, "corrected", frozenset(found), kw) for label, kw in scoped]
    rows += [(f"{site_name(s)} alone", "alone", frozenset([s]), _SITE) for s in found]
    if len(found) > 1:
        rows += [(f"all but {site_name(s)}", "all but", frozenset(found) - {s}, _SITE) for s in found]
    return rows


def _key(sites: frozenset, kw: dict):
    return (sites, tuple(sorted(kw.items())))


def assess(model, data, metric, *, inputs=None, sites=None, scope=None, alpha=None, time_budget=None,
           progress=None, seed: int = 0) -> Assessment:
    """What correcting does to ``metric`` on ``data``, overall and site by
    site, and the sites to correct (``result.recommended``, chosen on one
    half of the units and confirmed on the other).

    ``data``: an iterable of ``(inputs, target)`` batches (``inputs`` a
    tensor, a tuple of positional arguments or a dict of keyword ones, as
    :func:`dropmc.audit.audit_torch` takes them); read once, batches kept.
    ``metric(output, target)``: a 1-D tensor with one value per unit
    (``len(target)`` of them: windows, sequences, structures — units that
    are independent of one another), lower is better. ``inputs``: the
    example inputs ``correct`` discovers the sites on (default: the first
    batch's). ``sites``: the sites to consider (as ``correct`` takes them;
    default every site it corrects). ``scope``: the scope of the first
    corrected row (None: ``correct``'s default; ``"network"`` refuses ``sites``). ``alpha``: the family level of the verdicts (default the
    suite's per-assertion level, :func:`dropmc.assess.stats.suite_alpha`).
    ``time_budget`` (seconds): caps the batches used. ``progress``: a line
    per variant on stderr (None: when stderr is a terminal). ``seed``: the
    permutation that splits the units into halves.

    ValueError naming the argument: a metric returning a scalar, a tensor
    of another length than the target's units, or a non-finite value; data
    that is empty or not ``(inputs, target)`` pairs; fewer than
    :data:`MIN_UNITS` units; a bad ``alpha``, ``time_budget`` or ``seed``; a
    model already corrected."""
    import numpy as np

    level = _check_arguments(model, metric, alpha, seed)
    seconds, show = _seconds(time_budget), _show_progress(progress)
    batches = _Batches(data)
    if batches.get(0) is None:
        raise ValueError("data yielded no batch: assess needs (inputs, target) batches")
    example = batches.get(0)[0] if inputs is None else inputs
    counted = [0]
    handle = model.register_forward_pre_hook(lambda *a: counted.__setitem__(0, counted[0] + 1))
    was_training = model.training
    try:
        model.eval()
        scoped, scope_note = _scope_arguments(model, example, sites, scope)
        found, other = _sites_of(model, example, sites, _SITE)
        rows = _variants(found, scoped)
        run = _Run(model, batches, metric, example, sites, seconds, show)
        run.plain(pending=len({_key(r[2], r[3]) for r in rows}) + 1)
        units = sum(len(v) for v in run.values[None])
        if units < MIN_UNITS:
            raise ValueError(f"data holds {units} units; assess needs at least {MIN_UNITS} "
                             f"({MIN_UNITS_PER_TEST} per half, each half's test one degree of freedom)")
        run.say(f"plain: {run.limit} batches, {units} units; {len(rows)} variants to run")
        by_key: Dict[Any, Any] = {}
        pending = len({_key(r[2], r[3]) for r in rows})
        for j, (label, kind, key, kw) in enumerate(rows):
            k = _key(key, kw)
            if k not in by_key:
                pending -= 1
                run.variant(k, [s for s in found if s not in key], label, kw, pending)
                by_key[k] = run.values[k]
                per = (time.perf_counter() - run.start) / max(run.forwards, 1)
                run.say(f"{j + 1}/{len(rows)} {label}; about {per * pending * run.limit:.0f} s left")
        plain = np.concatenate(run.values[None][:run.limit])
        diff = {k: np.concatenate(v[:run.limit]) - plain for k, v in by_key.items()}
        half_a, half_b = _halves(len(plain), seed)
        tests = _tests(rows, diff, half_a, half_b, level)
        chosen = [s for s, r in zip(found, [t for t in tests if t["kind"] == "alone"]) if r["verdict_a"] == "better"]
        confirmation = None
        if chosen:
            k = _key(frozenset(chosen), _SITE)
            if k not in by_key:
                run.variant(k, [s for s in found if s not in chosen], "recommended", _SITE, 0)
                by_key[k] = run.values[k]
            d = np.concatenate(by_key[k][:run.limit])[half_b] - plain[half_b]
            confirmation = paired(d.tolist(), level, suite_power())
            confirmation["verdict"] = verdict(confirmation, confirmation["p"] <= level)
        notes = [scope_note] + [f"{k}: {v}" for k, v in other.items()]
        if run.batches.get(run.limit) is not None:
            notes.append(f"time_budget: {run.limit} batches used, the rest of data not read")
        return Assessment(rows=tests, sites=found, chosen=chosen, confirmation=confirmation, alpha=level,
                          units=len(plain), halves=(len(half_a), len(half_b)), batches=run.limit,
                          forwards=run.forwards, model_forwards=counted[0], seconds=time.perf_counter() - run.start,
                          notes=notes, seed=seed)
    finally:
        if getattr(model, "_dropmc_correction", None) is not None:
            uncorrect(model)
        handle.remove()
        model.train(was_training)


def _halves(n: int, seed: int):
    """Half A and half B: the first ``⌊n/2⌋`` and the rest of a seeded permutation of the units."""
    import numpy as np

    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[: n // 2]), np.sort(order[n // 2:])


def _screen(test: dict) -> str:
    """A site's verdict on half A at :data:`SCREEN_LEVEL` (the choice)."""
    if test["t"] is None:  # SE 0, Δ ≠ 0: every unit moved the same way
        return "better" if test["delta"] < 0 else "worse"
    if test["p"] > SCREEN_LEVEL:
        return "no effect"
    return "better" if test["delta"] < 0 else "worse"


def _tests(rows, diff, half_a, half_b, level: float) -> List[dict]:
    """Each row's test on all units (one Holm family of every row, MDE at
    its Bonferroni level α / rows, Holm's first step), on half A (the
    "alone" rows screened at :data:`SCREEN_LEVEL`: the choice) and on half
    B (shown; only the chosen set is tested there, by the caller)."""
    power = suite_power()
    out = []
    for label, kind, key, kw in rows:
        d = diff[_key(key, kw)]
        out.append({"label": label, "kind": kind, "sites": sorted(site_name(s) for s in key),
                    "all": paired(d.tolist(), level / len(rows), power),
                    "a": paired(d[half_a].tolist(), SCREEN_LEVEL, power),
                    "b": paired(d[half_b].tolist(), level, power)})
    for t, (rejected, adjusted) in zip(out, holm([t["all"]["p"] for t in out], level)):
        t["verdict"], t["p_holm"] = verdict(t["all"], rejected), adjusted
    for t in out:
        if t["kind"] == "alone":
            t["verdict_a"] = _screen(t["a"])
    return out
