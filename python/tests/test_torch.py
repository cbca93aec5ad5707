"""dropmc.torch on PyTorch's own dropouts (CI installs the CPU wheel: pip install torch)."""

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import dropmc

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch)")
dt = pytest.importorskip("dropmc.torch")
F = torch.nn.functional

P = 0.1
# Above every claim's minimum budget (the largest is about 3.7e4 draws).
SAMPLES = 100_000
PER_UNIT = {
    "dropout.mean",
    "dropout.second_moment",
    "dropout.third_moment",
    "dropout.fourth_moment",
    "dropout.variance",
    "dropout.sum_mean",
    "semantics.survivors_exact",
    "semantics.eval_identity",
    "semantics.eval_draws_nothing",
    "semantics.backward_mask",
    "semantics.forward_preserves_input",
}


def verdicts(result):
    return {c["id"]: c["verdict"] for c in result.claims}


def failed_ids(result):
    return {c["id"] for c in result.failed()}


def timed(label, fn):
    start = time.perf_counter()
    result = fn()
    print(f"{label}: {time.perf_counter() - start:.1f} s at one thread")
    return result


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_nn_dropout_passes_every_claim_at_the_default_budget(dtype):
    torch.manual_seed(0)
    result = timed(f"nn.Dropout {np.dtype(dtype).name}", lambda: dt.check_dropout(torch.nn.Dropout(P), P, dtype=dtype))
    assert result.passed, str(result)
    v = verdicts(result)
    assert {k for k in PER_UNIT if v[k] == "pass"} == PER_UNIT, str(result)
    assert v["dropout.kept_count"] == "pass" and v["dropout.sum_variance"] == "pass"


def test_f_dropout_as_a_function_passes():
    torch.manual_seed(1)
    result = timed("F.dropout", lambda: dt.check_dropout(lambda x, training: F.dropout(x, P, training), P))
    assert result.passed, str(result)


def test_the_thread_setting_is_restored_after_the_check_and_one_thread_during_it():
    torch.set_num_threads(2)
    seen = []

    def layer(x, training):
        seen.append(torch.get_num_threads())
        return F.dropout(x, P, training)

    dt.check_dropout(layer, P, samples=SAMPLES)
    assert set(seen) == {1}
    assert torch.get_num_threads() == 2
    # Restored also when the layer raises.
    with pytest.raises(ZeroDivisionError):
        dt.check_dropout(lambda x, t: 1 / 0, P, samples=SAMPLES)
    assert torch.get_num_threads() == 2


def test_a_layer_drawing_from_its_own_generator_is_checked_through_it():
    g = torch.Generator().manual_seed(5)

    def drop(x, training):
        if not training:
            torch.rand(x.shape, generator=g)  # eval draws: the bug to catch
            return x
        keep = torch.rand(x.shape, generator=g, dtype=x.dtype) >= P
        return torch.where(keep, x / (1 - P), torch.zeros_like(x))

    result = dt.check_dropout(drop, P, generator=g, samples=SAMPLES)
    assert failed_ids(result) == {"semantics.eval_draws_nothing"}, str(result)
    assert any("eval mode draws" in c for c in result.likely_causes)


def test_dropout1d_per_unit_claims_pass_and_the_cross_unit_ones_fail():
    # On an (n, d) input Dropout1d drops whole rows (a channel of d units):
    # each unit is still kept with probability q and scaled by 1/q, but the
    # units of a row share one bit. Its mask-shape claims need the
    # mask_shape argument (issue 23 item 2, another branch).
    torch.manual_seed(2)
    result = timed("Dropout1d", lambda: dt.check_dropout(torch.nn.Dropout1d(P), P, samples=SAMPLES))
    v = verdicts(result)
    assert {k for k in PER_UNIT if v[k] == "pass"} == PER_UNIT, str(result)
    # A row's units share one bit, so a window of rows holds one random bit
    # a row: windows recur, and semantics.masks_never_repeat fails too; so does
    # its across-calls twin on one-row calls (issue 52 item 8), where each call's
    # row is one channel and holds one random bit.
    assert failed_ids(result) == {
        "dropout.sum_variance", "dropout.kept_count", "semantics.masks_never_repeat",
        "calls.one_row_masks_never_repeat",
    }, str(result)
    assert "not independently" in " ".join(result.likely_causes)


def test_dropout2d_on_channels_of_units_is_the_same_case():
    # (n, d) seen as (n, channels = 2, d/2, 1): two channels of units, each
    # dropped whole.
    torch.manual_seed(3)
    layer = torch.nn.Dropout2d(P)

    def drop(x, training):
        layer.train(training)
        n, d = x.shape
        return layer(x.reshape(n, 2, d // 2, 1)).reshape(n, d)

    x = [0.5, -1.2, 3.0, 2.0, 0.7, -0.4]
    result = timed("Dropout2d", lambda: dt.check_dropout(drop, P, x=x, samples=SAMPLES))
    v = verdicts(result)
    assert {k for k in PER_UNIT if v[k] == "pass"} == PER_UNIT, str(result)
    assert "dropout.sum_variance" in failed_ids(result), str(result)


def test_alpha_dropout_fails_the_inverted_dropout_claims():
    # AlphaDropout sets dropped units to a' = -lambda*alpha and applies an
    # affine map to every output, so a kept value is not x/q, no output is 0
    # (the mask read off the output is "all kept") and the moments follow
    # another law. Its eval path is the identity.
    torch.manual_seed(4)
    result = timed("AlphaDropout", lambda: dt.check_dropout(torch.nn.AlphaDropout(P), P, samples=SAMPLES))
    failed = failed_ids(result)
    assert {
        "dropout.mean",
        "dropout.second_moment",
        "dropout.variance",
        "dropout.kept_count",
        "semantics.survivors_exact",
        "semantics.backward_mask",
    } <= failed, str(result)
    v = verdicts(result)
    assert v["semantics.eval_identity"] == "pass"
    assert v["semantics.forward_preserves_input"] == "pass"
    assert any("survivors' scale" in c for c in result.likely_causes), result.likely_causes


def test_in_place_f_dropout_fails_forward_preserves_input():
    torch.manual_seed(6)
    layer = lambda x, training: F.dropout(x, P, training, inplace=True)  # noqa: E731
    result = timed("F.dropout(inplace=True)", lambda: dt.check_dropout(layer, P, backward=False, samples=SAMPLES))
    assert failed_ids(result) == {"semantics.forward_preserves_input"}, str(result)
    # Every row has nonzero units, which x/q or 0 rewrites: every row counts.
    claim = result.claim("semantics.forward_preserves_input")
    assert claim["estimate"] == claim["samples"] > 0
    assert "in-place" in " ".join(result.likely_causes)
    # With a backward, autograd refuses it; the adapter says what to do.
    with pytest.raises(ValueError, match="backward=False"):
        dt.check_dropout(layer, P, samples=SAMPLES)


def test_the_generator_object_is_refused_as_rng_state():
    g = torch.Generator().manual_seed(7)
    with pytest.raises(TypeError, match="same Generator object twice"):
        dropmc.check_dropout(lambda x, t: x, P, rng_state=lambda: g, samples=SAMPLES, backward=False)


def test_the_example_runs_and_passes():
    example = Path(__file__).resolve().parents[1] / "examples" / "torch_dropout.py"
    assert "NOT RUN" not in example.read_text()
    out = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "claims pass" in out.stdout and "FAIL" not in out.stdout, out.stdout
