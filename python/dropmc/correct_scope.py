"""The scope ``dropmc.torch.correct(..., scope=None)`` applies
(:func:`default_scope`), shared by :mod:`dropmc.correct` and
:mod:`dropmc.assess` (which names its rows by it)."""

from __future__ import annotations

from typing import Tuple

__all__ = ["default_scope"]


def default_scope(inputs=None, sites=None, order: int = 1, linear=None, kwargs=None) -> Tuple[str, str]:
    """``(scope, reason)``: the scope ``correct(..., scope=None)`` applies.

    ``"network"`` (every norm corrected for every dropout upstream: what
    each norm saw in training) whenever it can run; ``"site"`` when the
    call asks for something only the per-site scope has, so that
    ``correct(model)`` on module-named sites, the BatchNorm folds found
    without inputs, ``correct(model, inputs, sites=...)`` (an assess
    recommendation, an ``Audit``), ``order=2`` and ``linear=True`` keep
    working as before:

    * no example inputs: the network ledger is measured on a forward on them;
    * ``sites`` named: network scope corrects every norm the noise reaches
      and names no sites;
    * ``order=2``: network scope has a first-order form only;
    * ``linear=True``: the linear-path sites are per-site corrections."""
    if inputs is None and not kwargs:
        return "site", "the default without example inputs (the network ledger needs a forward on them)"
    if sites is not None:
        return "site", "the default with sites named (network scope corrects every norm and names no sites)"
    if order != 1:
        return "site", "the default at order=2 (network scope is first-order only)"
    if linear:
        return "site", "the default with linear=True (linear-path sites are per-site corrections)"
    return "network", "the default"
