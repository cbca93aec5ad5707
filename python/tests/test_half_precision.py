"""check_dropout in float16 and bfloat16 (issue 23, item 3).

The survivor rule follows the dtype's rounding; the moment claims keep
their exact targets, so a bias the dtype puts into the survivors fails
them, and the likely cause says so in numbers.
"""

import numpy as np
import pytest

import dropmc

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = np.dtype(ml_dtypes.bfloat16)

P = 0.1
SAMPLES = 200_000


def numpy_dropout(dtype, scale=None, inplace=False):
    """Inverted dropout computed in ``dtype``: survivors ``x * fl(1/q)``
    (or ``x * scale``), the rule PyTorch's half-precision dropout uses."""
    rng = np.random.default_rng(7)
    s = np.asarray(1.0 / (1.0 - P) if scale is None else scale).astype(dtype)

    def forward(x, training):
        assert x.dtype == dtype, x.dtype
        if not training:
            return x
        keep = rng.random(x.shape) >= P
        out = np.where(keep, x * s, np.zeros((), dtype)).astype(dtype)
        if inplace:
            x[...] = out
            return x
        return out

    return forward


def by_id(result):
    return {c["id"]: c for c in result.claims}


@pytest.mark.parametrize("dtype", [np.dtype(np.float16), BF16], ids=["float16", "bfloat16"])
def test_the_survivor_rule_follows_the_dtypes_rounding(dtype):
    result = dropmc.check_dropout(numpy_dropout(dtype), P, dtype=dtype, samples=SAMPLES, backward=False)
    claims = by_id(result)
    for rule in ("semantics.survivors_exact", "semantics.eval_identity", "semantics.forward_preserves_input"):
        assert claims[rule]["verdict"] == "pass", str(result)
    assert claims["dropout.kept_count"]["verdict"] == "pass", str(result)


def test_a_survivor_scale_off_by_one_float16_step_fails_the_survivor_rule():
    # fl16(1/0.9) = 1.111328125; the next float16 up is 1.1123046875.
    wrong = numpy_dropout(np.dtype(np.float16), scale=1.1123046875)
    result = dropmc.check_dropout(wrong, P, dtype=np.float16, samples=SAMPLES, backward=False)
    assert by_id(result)["semantics.survivors_exact"]["verdict"] == "fail", str(result)
    assert not result.passed


def test_bfloat16_rounding_bias_fails_the_moments_and_is_named_in_numbers():
    # fl_bf16(1/0.9) = 1.109375, -0.156 % from 1/q: E[z] = 0.998 x.
    result = dropmc.check_dropout(numpy_dropout(BF16), P, dtype="bfloat16", samples=SAMPLES, backward=False)
    claims = by_id(result)
    assert claims["semantics.survivors_exact"]["verdict"] == "pass", str(result)
    failing = [c["id"] for c in result.claims if c["verdict"] == "fail"]
    assert any(c.startswith("dropout.") and "moment" in c for c in failing), str(result)
    (cause,) = result.likely_causes
    assert "  " not in cause, cause
    assert "bfloat16 roundings of x/q" in cause and "1.109375" in cause and "-0.156%" in cause, cause


def test_a_float32_scale_rounded_once_to_float16_is_not_flagged_by_the_cause():
    # float16's bias is too small for the moments at this budget: no cause.
    result = dropmc.check_dropout(numpy_dropout(np.dtype(np.float16)), P, dtype=np.float16, samples=SAMPLES, backward=False)
    assert result.passed, str(result)
    assert result.likely_causes == []


def test_an_in_place_float16_dropout_is_seen_writing_into_its_input():
    inplace = numpy_dropout(np.dtype(np.float16), inplace=True)
    result = dropmc.check_dropout(inplace, P, dtype=np.float16, samples=20_000, backward=False)
    assert by_id(result)["semantics.forward_preserves_input"]["verdict"] == "fail", str(result)


def test_a_float16_subnormal_input_is_judged_on_its_rounding():
    # 2**-24 is float16's smallest subnormal: fl16(x/q) is x itself.
    result = dropmc.check_dropout(
        numpy_dropout(np.dtype(np.float16)), P, x=[0.5, 2.0**-24, 2.0], dtype=np.float16,
        samples=SAMPLES, backward=False,
    )
    assert by_id(result)["dropout.mean"]["verdict"] == "pass", str(result)
    assert by_id(result)["semantics.survivors_exact"]["verdict"] == "pass", str(result)


def test_a_forward_answering_in_another_dtype_gets_a_hint():
    def widened(x, training):
        return x.astype(np.float32)

    with pytest.raises(TypeError, match=r"returned dtype float32, expected float16 .*pass dtype=np.float32"):
        dropmc.check_dropout(widened, P, dtype=np.float16, samples=100, backward=False)


def test_unsupported_dtypes_are_named():
    with pytest.raises(TypeError, match="float64, float32, float16, bfloat16"):
        dropmc.check_dropout(numpy_dropout(np.dtype(np.float16)), P, dtype=np.int8)


def test_a_norm_site_in_half_precision_is_refused_with_the_reason():
    with pytest.raises(TypeError, match="check_norm_site runs in float64 or float32"):
        dropmc.check_norm_site(lambda x: x, lambda y: y, [1.0, 2.0, 3.0], P, dtype=np.float16)


def test_torch_half_precision_dropout():
    torch = pytest.importorskip("torch")
    import dropmc.torch

    torch.manual_seed(0)
    half = dropmc.torch.check_dropout(torch.nn.Dropout(P), P, dtype=np.float16, samples=SAMPLES)
    assert half.passed, str(half)
    bf16 = dropmc.torch.check_dropout(torch.nn.Dropout(P), P, dtype="bfloat16", samples=SAMPLES)
    claims = by_id(bf16)
    assert claims["semantics.survivors_exact"]["verdict"] == "pass", str(bf16)
    assert claims["semantics.backward_mask"]["verdict"] == "pass", str(bf16)
    assert not bf16.passed and "1.109375" in bf16.likely_causes[0], str(bf16)
