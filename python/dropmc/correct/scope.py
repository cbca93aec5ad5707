"""The scope ``dropmc.torch.correct(..., scope=None)`` applies:
:func:`default_scope` from the arguments (shared with :mod:`dropmc.assess`,
which names its rows by it), and :func:`by_default`, which applies it and
falls back to the per-site scope when the network scope finds no norm."""

from __future__ import annotations

from typing import Callable, Tuple

__all__ = ["default_scope", "by_default"]

#: How :func:`dropmc.correct.correct` begins the refusal of a network scope
#: that found no LayerNorm/RMSNorm call the noise reaches.
NO_NORM = "no norm to correct"


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
    * ``order=2``: the per-site second-order estimates keep their default
      (the network scope's ``order=2``, its nonlinearities' mean shift,
      :mod:`dropmc.model.network_shift`, is asked for by ``scope="network"``);
    * ``linear=True``: the linear-path sites are per-site corrections."""
    if inputs is None and not kwargs:
        return "site", "the default without example inputs (the network ledger needs a forward on them)"
    if sites is not None:
        return "site", "the default with sites named (network scope corrects every norm and names no sites)"
    if order != 1:
        return "site", ("the default at order=2 (the per-site second-order estimates; scope='network' "
                        "names the mean shift)")
    if linear:
        return "site", "the default with linear=True (linear-path sites are per-site corrections)"
    return "network", "the default"


def by_default(call: Callable, inputs, sites, order: int, linear, kwargs):
    """``call(scope=...)`` (``correct`` with every other argument bound)
    at :func:`default_scope`'s scope; when that is the network's and it
    finds no norm the noise reaches (the ledger could not follow the
    dropout's noise, e.g. a drop-path draw: ``Correction.network_uncovered``
    of that attempt), the per-site scope instead, which may still find
    sites. Any other refusal is raised as it is. Sets
    ``Correction.scope_reason``."""
    scope, reason = default_scope(inputs, sites, order, linear, kwargs)
    try:
        model = call(scope=scope)
    except ValueError as e:
        if scope != "network" or not str(e).startswith(NO_NORM):
            raise
        scope, reason = "site", f"the default's fall-back: the network scope refused ({e})"
        model = call(scope=scope)
    model._dropmc_correction.scope_reason = reason
    return model
