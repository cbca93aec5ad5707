"""How one call of a forward is named: the one naming rule every pass
reads and writes (discovery's trace, the linear-path tracer, the network
ledger, the network audit and its control variate, ``correct``; issue 50).

A module (or a functional call such as ``F.dropout`` inside a module) may
run several times in one forward, and each run is its own site:

1. Count the runs of one base name in call order, from ``k = 0``.
2. The ``k``-th run is named ``base`` when ``k = 0`` and ``base#k``
   after, so a module called once keeps its own name and the names of a
   model without reuse are its module names.
3. Read back: the base is the text before ``#`` (:func:`module_of`), the
   index the number after it, 0 without one (:func:`call_index`).
"""

from __future__ import annotations

__all__ = ["call_name", "call_index", "module_of"]


def call_name(base: str, k: int) -> str:
    """The name of the ``k``-th run (from 0) of ``base`` (steps 1–2)."""
    return base if k == 0 else f"{base}#{k}"


def module_of(call: str) -> str:
    """The base of a call name: ``a.b#2`` → ``a.b`` (step 3)."""
    return call.split("#")[0]


def call_index(call: str) -> int:
    """The run index of a call name: ``a.b#2`` → 2, ``a.b`` → 0 (step 3)."""
    return int(call.split("#")[1]) if "#" in call else 0
