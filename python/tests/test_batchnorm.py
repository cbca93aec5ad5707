"""check_batchnorm on numpy BatchNorms: a correct one passes, planted wrong
ones fail with the claims they break named."""

import numpy as np
import pytest

import dropmc

P = 0.3
# A short schedule keeps each check well under a second: 40 000 replicates
# of 10 batches of 8 (the default is 30 batches of 16).
FAST = {"batch": 8, "steps": 10}


def numpy_batchnorm(momentum=0.1, unbiased=True, eps=1e-5, eval_mode="buffers"):
    """A fresh BatchNorm per call, trained on each batch, then evaluated."""

    def run(batches, x):
        c = batches.shape[2]
        rm, rv = np.zeros(c), np.ones(c)
        for b in batches:
            n = b.shape[0]
            var = b.var(axis=0) * (n / (n - 1) if unbiased else 1.0)
            rm = (1 - momentum) * rm + momentum * b.mean(axis=0)
            rv = (1 - momentum) * rv + momentum * var
        if eval_mode == "buffers":
            y = (x - rm) / np.sqrt(rv + eps)
        elif eval_mode == "batch":  # left in train mode: normalises by x's own statistics
            y = (x - x.mean(axis=0)) / np.sqrt(x.var(axis=0) + eps)
        elif eval_mode == "no_mean":  # forgets the running mean
            y = x / np.sqrt(rv + eps)
        return rm, rv, y

    return run


def failed(result):
    return {c["id"] for c in result.failed()}


CLAIMS = {"batchnorm.running_stats", "batchnorm.fold_buffers", "batchnorm.eval_mean", "batchnorm.variance_shift"}


def test_a_correct_batchnorm_passes_every_claim():
    result = dropmc.check_batchnorm(numpy_batchnorm(), P, **FAST)
    assert result.passed, str(result)
    assert {c["id"] for c in result.claims if c["verdict"] != "skipped"} == CLAIMS
    assert "batchnorm.li2018" in str(result)


def test_the_biased_convention_passes_when_declared():
    result = dropmc.check_batchnorm(numpy_batchnorm(unbiased=False), P, unbiased=False, **FAST)
    assert result.passed, str(result)


def test_targets_by_hand_at_one_step():
    # One step of momentum 1/2 from (0, 1), p = 0.5, mu = 2, sigma = 1,
    # B = 4: v = (1 + 0.5*4)/0.5 = 6, E[rm] = 1, E[rv] = (1 + 6)/2 = 3.5.
    result = dropmc.check_batchnorm(
        numpy_batchnorm(momentum=0.5), 0.5, momentum=0.5, mu=[2.0], sigma=[1.0], batch=4, steps=1
    )
    assert result.passed, str(result)
    stats = result.to_dict()["claims"][0]
    assert stats["id"] == "batchnorm.running_stats"
    assert stats["analytic"] == pytest.approx([1.0, 3.5])


@pytest.mark.parametrize(
    "layer, declared, must_fail",
    [
        # The biased batch variance while declared unbiased (the default).
        (numpy_batchnorm(unbiased=False), {}, {"batchnorm.running_stats", "batchnorm.fold_buffers"}),
        # Momentum 0.2 while declared 0.1.
        (numpy_batchnorm(momentum=0.2), {}, {"batchnorm.running_stats", "batchnorm.fold_buffers"}),
        # Eval left in train mode (x's own batch statistics).
        (numpy_batchnorm(eval_mode="batch"), {}, {"batchnorm.variance_shift"}),
        # Eval without the running mean.
        (numpy_batchnorm(eval_mode="no_mean"), {}, {"batchnorm.eval_mean"}),
    ],
)
def test_a_wrong_batchnorm_fails_naming_the_claims(layer, declared, must_fail):
    result = dropmc.check_batchnorm(layer, P, **FAST, **declared)
    assert not result.passed and result.decided
    assert must_fail <= failed(result), str(result)


def test_below_the_minimum_budget_a_claim_is_inconclusive_not_failed():
    result = dropmc.check_batchnorm(numpy_batchnorm(), P, samples=500, **FAST)
    assert not result.decided and not result.failed()
    assert result.minimum_budget() > 500


def test_same_seed_same_result():
    one = dropmc.check_batchnorm(numpy_batchnorm(), P, samples=40_000, seed=4, **FAST).to_json()
    two = dropmc.check_batchnorm(numpy_batchnorm(), P, samples=40_000, seed=4, **FAST).to_json()
    assert one == two


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"momentum": 0.0}, ValueError, "momentum"),
        ({"batch": 1}, ValueError, "batch"),
        ({"steps": 0}, ValueError, "steps"),
        ({"mu": [0.0, 1.0], "sigma": [1.0]}, ValueError, "sigma"),
        ({"sigma": [1.0, 0.0, 1.0]}, ValueError, "sigma"),
        ({"eps": -1.0}, ValueError, "eps"),
        ({"unbiased": "yes"}, TypeError, "unbiased"),
    ],
)
def test_bad_input_raises_in_python_terms(kwargs, error, words):
    with pytest.raises(error, match=words):
        dropmc.check_batchnorm(numpy_batchnorm(), P, **kwargs)


def test_a_wrong_return_is_a_clear_error():
    with pytest.raises(TypeError, match="running_mean, running_var, y"):
        dropmc.check_batchnorm(lambda b, x: None, P, **FAST)
    with pytest.raises(ValueError, match="running_var of shape"):
        dropmc.check_batchnorm(lambda b, x: (np.zeros(b.shape[2]), np.ones(3), x), P, **FAST)


def test_the_buffer_claims_budgets_come_from_the_buffers_own_law():
    # One batch of two at momentum 1: rv is the unbiased variance of two
    # dropped-out draws, (z − z′)²/2, z = m x / q, x ~ N(0, 1), p = 1/2. Its
    # law by the cases of the two masks (written out here, not the crate's
    # k-statistics): both keep (q²), z − z′ ~ N(0, 2/q²); one keeps (2pq),
    # ±x/q; neither (p²), 0. E Y^r = E D^{2r} / 2^r with E N^{2r} = (2r − 1)!!.
    import math
    from statistics import NormalDist

    p = 0.5
    q = 1 - p
    both, one = 2 / q**2, 1 / q**2  # variances of D in the two cases
    e = [(q * q * both**r + 2 * p * q * one**r) * math.prod(range(1, 2 * r, 2)) / 2**r for r in (1, 2, 3)]
    var, third = e[1] - e[0] ** 2, e[2] - 3 * e[0] * e[1] + 2 * e[0] ** 3
    gamma = third / var**1.5  # rm = (z + z′)/2 is symmetric: skewness 0
    c = NormalDist().inv_cdf(1 - 1e-6 / 10_000 / 2)  # the suite's per-assertion α
    want = math.ceil(max((gamma * c**3 / (3 * math.acosh(2))) ** 2, c**4))
    result = dropmc.check_batchnorm(
        numpy_batchnorm(momentum=1.0), p, mu=[0.0], sigma=[1.0], batch=2, steps=1, momentum=1.0, samples=500
    )
    got = result.claim("batchnorm.running_stats")["min_samples"]
    # c⁶ agrees far better than 10⁻⁵ relative: the roundings up one draw apart.
    assert abs(got - want) <= 1, (got, want, gamma)
    assert want > 1750  # the skewness, not the c⁴ floor, sets it
