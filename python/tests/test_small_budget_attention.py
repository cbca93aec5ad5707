"""Issue 44 item 1 on the attention and mask-shape paths: below a claim's
minimum budget a gross error fails by the distribution-free bound on the
statistic's known range, a correct layer is never failed, and an
inconclusive moment states the smallest effect its bound decides."""

import numpy as np

import dropmc

# The per-assertion level and the bound's MDE, written from docs/statistics.md
# and Maurer & Pontil (2009) in test_small_budget.py, not read from the code.
from test_small_budget import ALPHA, bound_mde
X_CL = np.array([[[1.0, 0.5, 2.0, 1.5], [-1.0, -0.5, -2.0, 0.0], [0.25, 3.0, 1.0, 0.5]]])


def attention_dropout(p, seed, keep_below_p=False):
    """A numpy attention dropout, ``b = m a / q``; with ``keep_below_p`` the
    keep rule written backwards (``u < p`` kept: a fraction p)."""
    rng = np.random.default_rng(seed)

    def dropout(a):
        u = rng.random(a.shape)
        keep = u < p if keep_below_p else u >= p
        return np.where(keep, a / (1 - p), 0.0)

    return dropout


def channelwise(p, seed, keep_below_p=False):
    rng = np.random.default_rng(seed)

    def forward(x, training):
        if not training:
            return x
        u = rng.random(x.shape[:2] + (1,) * (x.ndim - 2))
        keep = u < p if keep_below_p else u >= p
        return np.where(keep, x / (1 - p), 0.0)

    return forward


def claims_of(result):
    return {c["id"]: c for c in result.claims}


def test_keep_below_p_fails_the_attention_means_at_1000_draws():
    # E[b_i] = a_i p/q = a_i / 9 at p = 0.1. Before: inconclusive ("no null range is known").
    result = dropmc.check_attention_dropout(attention_dropout(0.1, 3, keep_below_p=True), 0.1, samples=1_000)
    c = claims_of(result)
    for cid in ("attention.entry_mean", "attention.row_sum_mean", "attention.output_mean"):
        assert c[cid]["min_samples"] > 1_000, c[cid]
        assert c[cid]["verdict"] == "fail", c[cid]
        assert "distribution-free" in c[cid]["note"], c[cid]
        assert c[cid]["p_value"] <= ALPHA, c[cid]


def test_an_inconclusive_attention_moment_states_the_smallest_effect_its_bound_decides():
    n = 1_000
    result = dropmc.check_attention_dropout(attention_dropout(0.1, 4), 0.1, samples=n)
    c = claims_of(result)["attention.row_sum_mean"]
    assert c["verdict"] == "inconclusive", c
    # R = sum m_i a_i / q lies in [0, sum a_i / q] = [0, 1/0.9].
    se = (c["estimate"] - c["analytic"]) / c["z"]
    expected = bound_mde(se, n, 1 / 0.9)
    assert abs(c["mde"] - expected) <= 1e-9 * expected, (c["mde"], expected)
    assert "decides a deviation of" in c["note"], c["note"]


def test_keep_below_p_fails_the_mask_shape_mean_at_1000_draws():
    result = dropmc.check_dropout(
        channelwise(0.1, 5, keep_below_p=True), 0.1, x=X_CL, shared_axes=(2,), backward=False, samples=1_000
    )
    c = claims_of(result)["mask_shape.mean"]
    assert c["verdict"] == "fail", c


def test_correct_attention_and_mask_shape_dropouts_are_never_failed_at_small_budgets():
    """A slice of python/benchmarks/small_budget_sweep.py --families attention,mask_shape."""
    fails, checks = [], 0
    for seed in range(2):
        for p in (0.1, 0.5):
            for samples in (200, 2_000):
                for result in (
                    dropmc.check_attention_dropout(attention_dropout(p, 10 + seed), p, samples=samples),
                    dropmc.check_dropout(
                        channelwise(p, 20 + seed), p, x=X_CL, shared_axes=(2,), backward=False, samples=samples
                    ),
                ):
                    checks += 1
                    fails += [(p, samples, cid) for cid, v in claims_of(result).items() if v["verdict"] == "fail"]
    assert checks == 16 and not fails, fails
