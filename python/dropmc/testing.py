"""Assertions for test suites: ``assert_dropout(forward, p)`` in a pytest test."""

from __future__ import annotations

from typing import Any, Callable

from .checks.core import Result, _component, critical_z
from .checks.dropout import check_dropout

__all__ = ["assert_dropout", "MEANINGS", "explain"]

#: What a failure of each claim means for the implementation.
MEANINGS = {
    "dropout.mean": "E[z] != x: the training output is biased (see the likely cause below)",
    "dropout.second_moment": "E[z^2] != x^2/q: the survivors' scale or the keep probability is wrong",
    "dropout.third_moment": "E[z^3] != x^3/q^2: the survivors' scale or the keep probability is wrong",
    "dropout.fourth_moment": "E[z^4] != x^4/q^3: the survivors' scale or the keep probability is wrong",
    "dropout.variance": "Var z != x^2 p/q: the mask's randomness is wrong (correlated passes, wrong keep probability)",
    "dropout.sum_mean": "E[sum z] != sum x: the layer is biased",
    "dropout.sum_variance": "Var[sum z] != (p/q) sum x^2: units are not dropped independently, or the rate is wrong",
    "dropout.kept_count": "the number of kept units is not Binomial(d, 1-p): the keep rule or the rate is wrong",
    "semantics.eval_identity": "eval output != input: the eval path rescales or drops",
    "semantics.eval_draws_nothing": "eval mode changed the generator's state: the eval path draws random numbers",
    "semantics.survivors_exact": "a kept output is not x/(1-p) to the rounding of the dtype: survivors are scaled wrongly",
    "semantics.forward_preserves_input": "forward(x, True) wrote into x: an in-place dropout overwrites the caller's input",
    "semantics.backward_mask": "the backward pass does not use the forward pass's mask (or scales wrongly)",
    "semantics.p_zero_identity": "at p = 0 the layer is not the identity",
    "norm_site.layernorm_mean": "E[LayerNorm(dropout(x))] differs from dropmc's exact value",
    "norm_site.rmsnorm_mean": "E[RMSNorm(dropout(x))] differs from dropmc's exact value",
}


def _value(v) -> str:
    return "-" if v is None else f"{v:.6g}"


def explain(claim: dict) -> str:  # a dict of Result.claims
    """One line on a failed claim: its numbers and what the failure means."""
    where = "" if claim.get("component") is None else f" ({_component(claim)})"
    meaning = MEANINGS.get(claim["id"], claim.get("formula") or "")
    line = (
        f"{claim['id']}{where}: estimate {_value(claim.get('estimate'))}, "
        f"analytic {_value(claim.get('analytic'))}, z = {_value(claim.get('z'))} "
        f"(|z| > {critical_z():.2f} fails): {meaning}"
    )
    if claim.get("note"):
        line += f" [{claim['note']}]"
    return line


def assert_dropout(forward: Callable[[Any, bool], Any], p: float, **kwargs: Any) -> Result:
    """``check_dropout(forward, p, **kwargs)``, raising ``AssertionError`` unless it passed.

    ``forward(x, training)`` as :func:`dropmc.check_dropout` takes it. Fails
    when a claim failed *or* ran below its minimum budget (``samples`` too
    small: the message names the budget that decides it), as ``dropmc
    report`` exits 1 or 3. The message lists each failed (or inconclusive)
    claim with its estimate, analytic value, z and what the failure means.
    Returns the result.
    """
    result = check_dropout(forward, p, **kwargs)
    if not result.passed:
        if not result.failed() and not result.decided:
            undecided = result.inconclusive()
            raise AssertionError(
                f"dropout at p = {p} is undecided: {len(undecided)} dropmc claim(s) ran below their "
                f"minimum budget (the largest is {result.minimum_budget()} draws): pass "
                f"samples >= {result.minimum_budget()}, or leave samples unset\n"
                + "\n".join("  inconclusive: " + explain(c) for c in undecided)
            )
        bad = [c for c in result.claims if c["verdict"] in ("fail", "inconclusive")]
        lines = [f"dropout at p = {p} fails {len(bad)} dropmc claim(s), {len(result.unchecked)} unchecked:"]
        lines += ["  " + ("" if c["verdict"] == "fail" else "inconclusive: ") + explain(c) for c in bad]
        lines += [f"  likely cause: {cause}" for cause in result.likely_causes]
        lines += [f"  not checked: {what}" for what in result.unchecked.values()]
        raise AssertionError("\n".join(lines))
    return result
