"""check_attention_dropout on numpy attention dropouts: a correct one passes,
planted wrong ones fail with the claims they break named."""

import numpy as np
import pytest

import dropmc

P = 0.3
# Above every attention claim's minimum budget (the default mean test's, 37 490).
SAMPLES = 50_000


def attention_dropout(p, seed=0, scale=None, renormalise=False):
    rng = np.random.default_rng(seed)
    q = 1.0 - p

    def dropout(A):
        keep = rng.random(A.shape) >= p
        b = np.where(keep, A / (q if scale is None else scale), 0.0)
        if renormalise:
            s = b.sum(axis=1, keepdims=True)
            b = np.where(s > 0, b / np.where(s > 0, s, 1.0), 0.0)
        return b

    return dropout


def failed(result):
    return {c["id"] for c in result.failed()}


MOMENTS = {
    "attention.entry_mean",
    "attention.row_sum_mean",
    "attention.row_sum_variance",
    "attention.output_mean",
    "attention.output_variance",
}


def test_a_correct_attention_dropout_passes_every_claim():
    result = dropmc.check_attention_dropout(attention_dropout(P), P, samples=SAMPLES)
    assert result.passed, str(result)
    ran = {c["id"] for c in result.claims if c["verdict"] != "skipped"}
    assert ran == MOMENTS | {"attention.dropped_row"}
    assert result.claim("attention.row_sum_pmf")["verdict"] == "skipped"
    assert "attention.row_sum_pmf" in str(result)


def test_targets_follow_the_users_row_and_values():
    a, v = [0.1, 0.6, 0.3], [2.0, 0.5, -1.0]
    result = dropmc.check_attention_dropout(attention_dropout(P), P, a=a, values=v, samples=SAMPLES)
    assert result.passed, str(result)
    odds = P / (1 - P)
    assert result.claim("attention.row_sum_variance")["analytic"] == pytest.approx(odds * (0.01 + 0.36 + 0.09))
    assert result.claim("attention.output_mean")["analytic"] == pytest.approx(0.2 + 0.3 - 0.3)
    assert result.claim("attention.output_variance")["analytic"] == pytest.approx(odds * (0.04 + 0.09 + 0.09))


def test_renormalised_rows_fail_the_row_sum_variance_and_the_rule():
    result = dropmc.check_attention_dropout(attention_dropout(P, renormalise=True), P, samples=SAMPLES)
    assert not result.passed and result.decided
    assert {"attention.row_sum_variance", "attention.dropped_row", "attention.entry_mean"} <= failed(result), str(result)


def test_a_scale_of_one_over_p_fails_the_means_and_the_rule():
    result = dropmc.check_attention_dropout(attention_dropout(P, scale=P), P, samples=SAMPLES)
    assert not result.passed and result.decided
    assert {"attention.entry_mean", "attention.row_sum_mean", "attention.dropped_row"} <= failed(result), str(result)


def test_below_the_minimum_budget_a_claim_is_inconclusive_not_failed():
    result = dropmc.check_attention_dropout(attention_dropout(P), P, samples=1000)
    assert not result.decided and not result.failed()
    assert result.minimum_budget() is not None and result.minimum_budget() > 1000
    assert "inconclusive" in str(result)


def test_same_seed_same_result():
    one = dropmc.check_attention_dropout(attention_dropout(P, seed=3), P, samples=40_000).to_json()
    two = dropmc.check_attention_dropout(attention_dropout(P, seed=3), P, samples=40_000).to_json()
    assert one == two


def test_float32():
    rng = np.random.default_rng(1)

    def dropout(A):
        return np.where(rng.random(A.shape) >= P, A / np.float32(1 - P), np.float32(0)).astype(np.float32)

    result = dropmc.check_attention_dropout(dropout, P, samples=SAMPLES, dtype=np.float32)
    assert result.passed, str(result)


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"a": [0.5, 0.0, 0.5]}, ValueError, "positive"),
        ({"a": [0.5, 0.5], "values": [1.0]}, ValueError, "one entry per key"),
        ({"a": [[0.5, 0.5]]}, ValueError, "1-D"),
        ({"samples": 1}, ValueError, "samples"),
        ({"dtype": np.int32}, TypeError, "dtype"),
    ],
)
def test_bad_input_raises_in_python_terms(kwargs, error, words):
    with pytest.raises(error, match=words):
        dropmc.check_attention_dropout(attention_dropout(P), P, **kwargs)


def test_a_wrong_output_shape_is_a_clear_error():
    with pytest.raises(ValueError, match="shape"):
        dropmc.check_attention_dropout(lambda A: A[:, :2], P)
    with pytest.raises(TypeError, match="callable"):
        dropmc.check_attention_dropout(None, P)
    with pytest.raises(ValueError, match="drop rate"):
        dropmc.check_attention_dropout(attention_dropout(P), 1.0)
