"""dropmc's pytest plugin (registered through the ``pytest11`` entry point).

A test asks for the ``dropmc_check`` fixture and calls it like
:func:`dropmc.check_dropout`::

    def test_my_dropout(dropmc_check):
        dropmc_check(my_forward, 0.1, backward=my_backward, rng_state=my_state)

The fixture runs the check and, when the result has not passed, fails the
test with the claim table (``str(result)``: every claim's verdict, estimate,
analytic value and z, the likely cause and what was not checked); it
returns the :class:`dropmc.Result` otherwise.

Options: ``--dropmc-samples N`` caps every claim's draws (default: each
claim's own budget) and ``--dropmc-seed S`` sets dropmc's seed (default 1);
an explicit ``samples=`` or ``seed=`` in the call wins. A run the
option's cap leaves with claims inconclusive and none failed is skipped,
the message naming the claims and the budget that decides them (a correct
layer is not failed for the cap).
"""

from __future__ import annotations

import pytest

import dropmc


def _positive_int(minimum):
    def parse(text):
        value = int(text)
        if value < minimum:
            raise ValueError(f"must be an integer >= {minimum}")
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse


def pytest_addoption(parser):
    group = parser.getgroup("dropmc", "dropmc's statistical dropout checks")
    group.addoption(
        "--dropmc-samples",
        type=_positive_int(2),
        default=None,
        help="cap every dropmc claim's draws (default: each claim's own budget)",
    )
    group.addoption(
        "--dropmc-seed",
        type=_positive_int(0),
        default=None,
        help="dropmc's seed for its own streams (default 1)",
    )


def _below_budget(samples: int, result) -> str:
    """Why a run capped by ``--dropmc-samples`` decided nothing wrong but not everything."""
    ids = ", ".join(c["id"] for c in result.inconclusive())
    return (
        f"dropmc: --dropmc-samples {samples} is below the minimum budget of {ids} (the largest needs "
        f"{result.minimum_budget()} draws): nothing failed, but those claims are inconclusive at this "
        f"cap; pass --dropmc-samples >= {result.minimum_budget()}, or omit it for each claim's own budget"
    )


@pytest.fixture
def dropmc_check(request):
    """``dropmc_check(forward, p, **kwargs)``: :func:`dropmc.check_dropout`,
    failing the test with the claim table unless the result passed."""
    samples = request.config.getoption("dropmc_samples")
    seed = request.config.getoption("dropmc_seed")

    def run(forward, p, **kwargs):
        capped = samples is not None and "samples" not in kwargs
        if capped:
            kwargs["samples"] = samples
        if seed is not None:
            kwargs.setdefault("seed", seed)
        result = dropmc.check_dropout(forward, p, **kwargs)
        if not result.passed and capped and not result.failed() and result.inconclusive():
            # Nothing failed; the cap left claims undecided: the option's
            # doing, not the layer's.
            pytest.skip(_below_budget(samples, result))
        if not result.passed:
            pytest.fail(f"dropout at p = {p} did not pass dropmc's claims:\n{result}", pytrace=False)
        return result

    return run
