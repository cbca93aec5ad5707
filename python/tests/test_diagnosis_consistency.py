"""issue 44: a likely cause or warning is emitted only when the results it
describes hold. Each test plants a layer whose diagnosis used to contradict
its verdicts."""

import numpy as np
import pytest

import dropmc
from implementations import Correct

MOMENTS = (
    "dropout.mean",
    "dropout.second_moment",
    "dropout.third_moment",
    "dropout.fourth_moment",
    "dropout.variance",
    "dropout.sum_mean",
    "dropout.sum_variance",
    "dropout.kept_count",
)


def verdicts(result):
    return {c["id"]: c["verdict"] for c in result.claims}


def causes(result):
    return result.likely_causes if hasattr(result, "likely_causes") else result.summary["likely_causes"]


class OffByAPartPerBillion(Correct):
    """Survivors x/q (1 + 1e-9): the survivor rule sees it, no moment can."""

    def scale(self, x, kept):
        return np.where(kept, x / (1 - self.p) * (1 + 1e-9), 0.0).astype(x.dtype)


def test_a_survivor_cause_says_the_moments_fail_only_when_one_does():
    layer = OffByAPartPerBillion(0.1, seed=3)
    result = dropmc.check_dropout(layer.forward, 0.1, samples=2_000, rng_state=layer.rng_state)
    v = verdicts(result)
    assert v["semantics.survivors_exact"] == "fail", v
    failing = [m for m in MOMENTS if v.get(m) == "fail"]
    text = " ".join(causes(result))
    assert "survivors' scale is wrong" in text, text
    assert ("the moments fail with it" in text) == bool(failing), (failing, text)


def test_the_rounding_warning_never_contradicts_the_verdicts():
    """bfloat16 with the keep probability itself rounded to bfloat16 (p =
    0.1: q = 0.8984375): the moments fail, and the warning (if any) must not
    say every moment is consistent; a truncating cast fails the survivor
    rule, and no warning may then say the kept values are roundings of x/q."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("ml_dtypes")
    import dropmc.torch as dt

    torch.set_num_threads(1)
    torch.manual_seed(0)
    q_rounded = float(torch.tensor(0.9, dtype=torch.bfloat16))

    def rounded_keep(x, training):
        if not training:
            return x
        keep = torch.rand(x.shape) < q_rounded
        return torch.where(keep, x / 0.9, torch.zeros_like(x)).to(x.dtype)

    def truncating(x, training):
        if not training:
            return x
        keep = torch.rand(x.shape) >= 0.1
        y = torch.where(keep, x.float() / 0.9, torch.zeros_like(x, dtype=torch.float32))
        bits = y.view(torch.int32) & ~0xFFFF  # drop the low 16 bits: truncation
        return bits.view(torch.float32).to(torch.bfloat16)

    # The rounded keep probability fails the moments at the default budget
    # (about 15 s); the truncation fails the survivor rule at any budget.
    for forward, samples in ((rounded_keep, None), (truncating, 20_000)):
        result = dt.check_dropout(forward, 0.1, dtype="bfloat16", samples=samples, backward=False)
        v = verdicts(result)
        text = " ".join(causes(result))
        failing = [m for m in MOMENTS if v.get(m) == "fail"]
        if forward is rounded_keep:
            assert failing and "warning:" in text, (v, text)
        else:
            assert v["semantics.survivors_exact"] == "fail", v
        if failing:
            assert "every moment is consistent" not in text, (failing, text)
        if v.get("semantics.survivors_exact") == "fail":
            assert "roundings of x/q and" not in text, text
        print(forward.__name__, failing, v.get("semantics.survivors_exact"), text[:300])
