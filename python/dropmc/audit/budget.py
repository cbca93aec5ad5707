"""The audit's wall-time contract (issue 52): ``time_budget`` checked and
turned into deadlines, the up-front refusal of a request whose estimated
time is over the budget (or, without one, an hour), ``samples`` checked
against what the engine can count, and the progress mode.

The estimate is the Rust engine's (``_dropmc.audit_estimate``,
``src/audit/estimate.rs``) for the norm and attention sites plus the
linear-path sites' multiply-adds at
:data:`dropmc.audit.linear.LINEAR_WORK_PER_SECOND`. The bound itself is
the deadline every Rust call is given (``python/src/supervise.rs``: a
``TimeoutError`` naming ``time_budget`` when a step outlives it), so a
wrong estimate costs a refusal or a stop, never a run past the budget.
"""

from __future__ import annotations

import time
from typing import Optional

from .. import _dropmc

__all__ = ["Clock", "MAX_SAMPLES", "budget_left", "check_samples", "progress_mode", "refuse_over_budget", "seconds_of",
           "show_progress"]

#: The largest ``samples`` the engine counts (a ``u64``).
MAX_SAMPLES = 2 ** 64 - 1

#: The estimate a request without a ``time_budget`` may have, in seconds
#: (``dropmc::audit::estimate::UNBUDGETED_SECONDS``: an hour).
UNBUDGETED_SECONDS = float(_dropmc.AUDIT_UNBUDGETED_SECONDS)

#: The share of a step's time left that the norm sites plan their tokens
#: in: the rest is the margin for the batch in flight, so the plan ends
#: before the deadline that stops the step.
PLANNED_SHARE = 0.9


def check_samples(name: str, samples, least: int, what: str) -> int:
    """``samples``-like argument ``name`` checked: an int in
    ``[least, MAX_SAMPLES]`` (a ValueError naming ``name`` otherwise)."""
    if isinstance(samples, bool) or not isinstance(samples, int) or not least <= samples <= MAX_SAMPLES:
        raise ValueError(f"{name} must be an int from {least} to 2**64 - 1 ({what}), got {samples!r}")
    return samples


def seconds_of(time_budget) -> Optional[float]:
    """``time_budget=`` checked: None, or a finite float > 0 (seconds)."""
    if time_budget is None:
        return None
    if isinstance(time_budget, bool) or not isinstance(time_budget, (int, float)) or not (
            0 < time_budget < float("inf")):
        raise ValueError(f"time_budget must be a finite number of seconds > 0, got {time_budget!r}")
    return float(time_budget)


class Clock:
    """The wall-time bound of one audit call: ``seconds`` (None: none)
    from its creation."""

    def __init__(self, seconds: Optional[float]):
        self.seconds = seconds
        self.start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def left(self, step: str) -> Optional[float]:
        """Seconds left for ``step`` (None without a budget); a
        TimeoutError naming ``time_budget`` when none is."""
        if self.seconds is None:
            return None
        left = self.seconds - self.elapsed()
        if left <= 0:
            raise TimeoutError(f"time_budget={self.seconds:g} s ran out before the {step} "
                               f"({self.elapsed():.1f} s had passed); raise time_budget")
        return left


def refuse_over_budget(clock: Clock, samples: int, *, norm_and_attention, linear_seconds: float = 0.0):
    """Refuses (a ValueError naming ``samples``, with the estimate) a
    request whose estimated time is over what the clock has left, or over
    :data:`UNBUDGETED_SECONDS` without a budget. ``norm_and_attention``:
    ``(all, least)`` of ``_dropmc.audit_estimate`` (``least``: one batch of
    tokens per norm site, all a budget makes the audit do)."""
    full, least = norm_and_attention
    if clock.seconds is None:
        estimate, limit, what = full + linear_seconds, UNBUDGETED_SECONDS, "an hour (no time_budget given)"
    else:
        estimate = least + linear_seconds
        limit = clock.left("audit's sampling")
        what = f"the {limit:.1f} s left of time_budget={clock.seconds:g}"
    if estimate > limit:
        parts = f"norm and attention sites about {full if clock.seconds is None else least:.3g} s"
        if linear_seconds:
            parts += f", linear-path sites about {linear_seconds:.3g} s"
        raise ValueError(
            f"samples={samples}: the audit would take about {estimate:.3g} s ({parts}; "
            f"src/audit/estimate.rs), over {what}; lower samples= (or tokens=), or give a larger "
            "time_budget")


def progress_mode(progress) -> str:
    """``progress=`` as the engine shows it: ``''`` (False), ``'terminal'``
    (a line rewritten in place, when stderr is a terminal), else
    ``'lines'`` (True: a line per 10 % of the work) or ``'slow'`` (None: a
    line per 10 % once the run has taken 2 s)."""
    if progress is not None and not isinstance(progress, bool):
        raise TypeError(f"progress must be a bool or None, got {type(progress).__name__}")
    if progress is False:
        return ""
    import sys

    if getattr(sys.stderr, "isatty", lambda: False)():
        return "terminal"
    return "lines" if progress else "slow"


def show_progress(progress) -> bool:
    """``progress=`` as a yes/no for the Python-side steps (the network
    audit, :mod:`dropmc.assess`): True or False, or None for "when stderr
    is a terminal"."""
    if progress is not None and not isinstance(progress, bool):
        raise TypeError(f"progress must be a bool or None, got {type(progress).__name__}")
    return progress_mode(progress) == "terminal" if progress is None else progress


def budget_left(seconds: Optional[float], start: float) -> Optional[float]:
    """What is left of a ``time_budget`` of ``seconds`` (None: no budget)
    since ``time.perf_counter()`` read ``start``, at least a tenth of it
    (the later steps still get a share when the earlier ones overran)."""
    return None if seconds is None else max(seconds - (time.perf_counter() - start), 0.1 * seconds)
