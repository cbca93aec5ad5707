"""check_dropout on numpy implementations: correct ones pass, each known-wrong one
fails with the claims its bug breaks."""

import json
import time

import numpy as np
import pytest

import dropmc
from dropmc.testing import assert_dropout

from implementations import (
    Correct,
    DivideByP,
    FreshMaskInBackward,
    KeepBelowP,
    MultiplyByQ,
    Tutorial,
)

P = 0.3
# Above every claim's minimum budget (the largest at these inputs,
# dropout.sum_variance's pair form, is 19 432), so no claim is inconclusive by
# construction.
KILL_SAMPLES = 100_000


def check(layer, p=P, **kw):
    return dropmc.check_dropout(
        layer.forward, p, rng_state=layer.rng_state, backward=layer.backward, **kw
    )


def failed_ids(result):
    return {c["id"] for c in result.failed()}


def verdicts(result):
    return {c["id"]: c["verdict"] for c in result.claims}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_correct_dropout_passes_at_the_default_budget(dtype):
    start = time.perf_counter()
    result = check(Correct(P, seed=11), dtype=dtype)
    elapsed = time.perf_counter() - start
    assert result.passed, str(result)
    v = verdicts(result)
    for claim in (
        "dropout.mean",
        "dropout.second_moment",
        "dropout.variance",
        "dropout.kept_count",
        "semantics.eval_identity",
        "semantics.eval_draws_nothing",
        "semantics.survivors_exact",
        "semantics.backward_mask",
    ):
        assert v[claim] == "pass", (claim, str(result))
    # Issue 17: the default budget finishes in under 30 s on the 2-core machine.
    assert elapsed < 30.0, f"check_dropout took {elapsed:.1f} s"


def test_the_tutorials_eval_path_fails_identity_and_draws():
    result = check(Tutorial(P, seed=12), samples=KILL_SAMPLES)
    assert not result.passed
    failed = failed_ids(result)
    assert "semantics.eval_identity" in failed, str(result)
    assert "semantics.eval_draws_nothing" in failed, str(result)
    # Training mode is the correct one: its claims pass.
    assert verdicts(result)["dropout.mean"] == "pass"


def test_keep_below_p_fails_the_moments_and_the_kept_count():
    result = check(KeepBelowP(P, seed=13), samples=KILL_SAMPLES)
    failed = failed_ids(result)
    assert {"dropout.mean", "dropout.kept_count", "dropout.sum_mean"} <= failed, str(result)
    # Its survivors are still x/q and its eval is the identity.
    assert "semantics.survivors_exact" not in failed
    assert "semantics.eval_identity" not in failed


def test_divide_by_p_fails_the_mean_and_the_survivors():
    result = check(DivideByP(P, seed=14), samples=KILL_SAMPLES)
    failed = failed_ids(result)
    assert {"dropout.mean", "dropout.second_moment", "semantics.survivors_exact"} <= failed, str(result)
    # The mask itself is right.
    assert "dropout.kept_count" not in failed


def test_multiply_by_q_fails_the_mean_and_the_survivors():
    result = check(MultiplyByQ(P, seed=15), samples=KILL_SAMPLES)
    failed = failed_ids(result)
    assert {"dropout.mean", "semantics.survivors_exact"} <= failed, str(result)
    assert "dropout.kept_count" not in failed


def test_a_fresh_mask_in_backward_fails_the_backward_mask_only():
    result = check(FreshMaskInBackward(P, seed=16), samples=KILL_SAMPLES)
    assert failed_ids(result) == {"semantics.backward_mask"}, str(result)


def test_without_rng_state_and_backward_those_claims_are_skipped():
    result = dropmc.check_dropout(Correct(P, seed=17).forward, P, samples=KILL_SAMPLES)
    v = verdicts(result)
    assert v["semantics.eval_draws_nothing"] == "skipped"
    assert v["semantics.backward_mask"] == "skipped"
    # An omitted backward is unchecked, so the run has not passed (issue 23);
    # backward=False declares a forward without one.
    assert result.passed_as_run and not result.passed
    assert "not checked: backward" in str(result)
    assert dropmc.check_dropout(Correct(P, seed=17).forward, P, samples=KILL_SAMPLES, backward=False).passed
    # The tutorial's eval path still fails on its output alone.
    bad = dropmc.check_dropout(Tutorial(P, seed=18).forward, P, samples=KILL_SAMPLES)
    assert "semantics.eval_identity" in failed_ids(bad)


def test_p_zero_checks_the_identity():
    layer = Correct(0.0, seed=19)
    result = dropmc.check_dropout(layer.forward, 0.0, backward=layer.backward)
    assert verdicts(result)["semantics.p_zero_identity"] == "pass", str(result)
    assert result.passed
    # A layer that scales at p = 0 (by 1/0.999...) is caught.
    off = Correct(0.0, seed=19)
    off.scale = lambda x, kept: (x * 1.0000001).astype(x.dtype)
    bad = dropmc.check_dropout(off.forward, 0.0)
    assert "semantics.p_zero_identity" in failed_ids(bad)


def test_the_sum_claims_budgets_come_from_the_inputs_own_law():
    # S = Σ m_k x_k / q over every mask of x, written out here; the minimum
    # budget of a mean test with skewness γ is max((γ c³ / (3 acosh 2))², c⁴)
    # rounded up, c = Φ⁻¹(1 − α/2) (Python's NormalDist, not statrs).
    import itertools
    import math
    from statistics import NormalDist

    x, p = np.array([1.0, -0.5, 2.0, 0.25]), 0.3
    q = 1 - p
    law = []
    for mask in itertools.product([0, 1], repeat=len(x)):
        m = np.array(mask)
        law.append((q ** m.sum() * p ** (len(x) - m.sum()), float((m * x).sum() / q)))
    w = np.array([a for a, _ in law])
    s = np.array([b for _, b in law])
    mu = (w * s).sum()
    m2, m3, m4, m6 = ((w * (s - mu) ** r).sum() for r in (2, 3, 4, 6))
    # (S − S′)²/2: E D² = 2μ₂, E D⁴ = 2μ₄ + 6μ₂², E D⁶ = 2μ₆ + 30μ₂μ₄ − 20μ₃².
    e1, e2, e3 = m2, (2 * m4 + 6 * m2**2) / 4, (2 * m6 + 30 * m2 * m4 - 20 * m3**2) / 8
    pair_var, pair_third = e2 - e1**2, e3 - 3 * e1 * e2 + 2 * e1**3
    # The per-assertion level: the suite's 10⁻⁶ over its 10 000 assertions.
    alpha = 1e-6 / 10_000
    c = NormalDist().inv_cdf(1 - alpha / 2)

    def budget(gamma):
        return math.ceil(max((abs(gamma) * c**3 / (3 * math.acosh(2))) ** 2, c**4))

    result = check(Correct(P, seed=22), p=p, x=x, samples=1000)
    for claim_id, gamma in [
        ("dropout.sum_mean", m3 / m2**1.5),
        ("dropout.sum_variance", pair_third / pair_var**1.5),
    ]:
        got = result.claim(claim_id)["min_samples"]
        # The budget goes as c⁶; NormalDist and statrs agree on c far better
        # than 10⁻⁵ relative, so at budgets below 10⁵ the two roundings up
        # are at most one draw apart.
        assert abs(got - budget(gamma)) <= 1, (claim_id, got, budget(gamma))


def test_a_budget_below_the_minimum_is_inconclusive_not_a_pass():
    result = check(Correct(P, seed=20), samples=1000)
    v = verdicts(result)
    assert v["dropout.mean"] == "inconclusive"
    assert not result.passed
    note = result.claim("dropout.mean")["note"]
    assert "stated size" in note, note


def test_result_json_table_and_claim_dicts():
    result = check(Tutorial(P, seed=21), samples=KILL_SAMPLES)
    data = json.loads(result.to_json())
    # dropmc report --json's layout.
    for key in ("seed", "subject", "family_alpha", "assertion_alpha", "critical_z", "claims"):
        assert key in data
    ids = [c["id"] for c in data["claims"]]
    assert ids == [c["id"] for c in result.claims]
    by_id = {c["id"]: c for c in data["claims"]}
    assert by_id["semantics.eval_identity"]["verdict"] == "fail"
    assert by_id["dropout.mean"]["test"] == "student-t"
    assert by_id["semantics.rate_rule"]["verdict"] == "skipped"
    claim = result.claim("semantics.eval_identity")
    assert set(claim) >= {"id", "verdict", "z", "p_value", "mde", "estimate", "analytic", "note"}
    assert claim["verdict"] in {"pass", "fail", "inconclusive", "skipped"}
    assert claim["estimate"] > 0 and claim["analytic"] == 0
    mean = result.claim("dropout.mean")
    assert abs(mean["z"]) < dropmc.critical_z() and 0 < mean["p_value"] <= 1 and mean["mde"] > 0
    text = str(result)
    assert "semantics.eval_identity" in text and "FAIL" in text


def test_assert_dropout_explains_each_failure():
    layer = Tutorial(P, seed=22)
    with pytest.raises(AssertionError) as info:
        assert_dropout(layer.forward, P, rng_state=layer.rng_state, samples=KILL_SAMPLES)
    message = str(info.value)
    assert "semantics.eval_identity" in message
    assert "eval output != input: the eval path rescales" in message
    assert "semantics.eval_draws_nothing" in message and "draws random numbers" in message
    assert "estimate" in message and "analytic" in message and "z = " in message
    # A correct layer returns its result.
    ok = Correct(P, seed=23)
    assert assert_dropout(ok.forward, P, samples=KILL_SAMPLES, backward=False).passed


def test_the_run_is_reproducible_given_the_users_seed():
    a = check(Correct(P, seed=24), samples=50_000).to_json()
    b = check(Correct(P, seed=24), samples=50_000).to_json()
    assert a == b
    c = check(Correct(P, seed=25), samples=50_000).to_json()
    assert a != c


def test_a_user_input_row_is_used():
    x = [1.5, -0.25, 4.0]
    result = dropmc.check_dropout(Correct(0.2, seed=26).forward, 0.2, x=x, samples=KILL_SAMPLES, backward=False)
    mean = result.to_dict()["claims"][0]
    assert mean["id"] == "dropout.mean"
    assert mean["analytic"] == x
    assert result.passed
