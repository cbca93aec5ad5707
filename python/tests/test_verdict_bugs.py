"""The wrong or silent verdicts of issue 23, each with its repro."""

import resource
import time

import numpy as np
import pytest

import dropmc
from dropmc.testing import explain

from implementations import Correct, FreshMaskInBackward

P = 0.1
SAMPLES = 100_000


def failed_ids(result):
    return {c["id"] for c in result.failed()}


class Float32Dropout:
    """A correct float32 dropout: fl32(x / fl32(q)) or 0."""

    def __init__(self, p, seed):
        self.p, self.rng = p, np.random.default_rng(seed)

    def forward(self, x, training):
        if not training:
            return x
        keep = self.rng.random(x.shape) >= self.p
        return np.where(keep, x / np.float32(1 - self.p), np.float32(0)).astype(np.float32)


def test_a_float32_subnormal_input_does_not_fail_a_correct_dropout():
    # fl32(2^-149 / 0.9) = 2^-149: a correct kept output equals x, so
    # E[z] = 0.9 x. Before the fix the mean failed at z = -333.
    x = [0.5, 1.401298464324817e-45, 2.0]
    result = dropmc.check_dropout(Float32Dropout(P, 1).forward, P, x=x, dtype=np.float32, backward=False)
    assert result.passed, str(result)
    mean = result.to_dict()["claims"][0]
    assert mean["id"] == "dropout.mean"
    # Reported in units of 2^-149 (so the squares in the standard errors do
    # not underflow): E[z] = 0.9 * fl32(x/0.9) = 0.9 x.
    assert mean["analytic"][1] == pytest.approx(0.9, rel=1e-6)
    assert "unit 1 times 2^149" in result.claim("dropout.mean")["note"]
    # The normal units keep the textbook target, x itself.
    assert mean["analytic"][0] == 0.5 and mean["analytic"][2] == 2.0


def test_the_subnormal_target_still_catches_a_wrong_scale():
    class TimesQ(Float32Dropout):
        def forward(self, x, training):
            if not training:
                return x
            keep = self.rng.random(x.shape) >= self.p
            return np.where(keep, x * np.float32(1 - self.p), np.float32(0)).astype(np.float32)

    x = [0.5, 1.401298464324817e-45, 2.0]
    result = dropmc.check_dropout(TimesQ(P, 2).forward, P, x=x, dtype=np.float32, backward=False, samples=SAMPLES)
    assert {"dropout.mean", "semantics.survivors_exact"} <= failed_ids(result), str(result)


def test_the_generator_object_as_rng_state_is_an_error():
    rng = np.random.default_rng(3)
    layer = Correct(P, seed=3)
    with pytest.raises(TypeError, match="same Generator object twice.*by value"):
        dropmc.check_dropout(layer.forward, P, rng_state=lambda: rng, backward=False, samples=SAMPLES)


def test_a_snapshot_that_is_a_view_of_live_state_is_copied():
    class DrawsInEval(Correct):
        """Eval advances a counter held in an array; rng_state returns a
        fresh view of it each time (a new object, the same memory)."""

        def __init__(self, p, seed):
            super().__init__(p, seed)
            self.counter = np.zeros(1)

        def forward(self, x, training):
            if not training:
                self.counter += 1
                return x
            return super().forward(x, training)

    layer = DrawsInEval(P, 4)
    result = dropmc.check_dropout(
        layer.forward, P, rng_state=lambda: layer.counter[:], backward=layer.backward, samples=SAMPLES
    )
    assert failed_ids(result) == {"semantics.eval_draws_nothing"}, str(result)


def test_an_in_place_dropout_fails_forward_preserves_input():
    class InPlace(Correct):
        def forward(self, x, training):
            if not training:
                return x
            self.mask = self.keep(x.shape)
            x *= self.mask / (1 - self.p)
            return x

    layer = InPlace(P, 5)
    result = dropmc.check_dropout(layer.forward, P, rng_state=layer.rng_state, backward=layer.backward, samples=SAMPLES)
    assert "semantics.forward_preserves_input" in failed_ids(result), str(result)
    assert any("in-place" in c for c in result.likely_causes)
    ok = Correct(P, 5)
    good = dropmc.check_dropout(ok.forward, P, rng_state=ok.rng_state, backward=ok.backward, samples=SAMPLES)
    assert good.claim("semantics.forward_preserves_input")["verdict"] == "pass"


def test_an_omitted_backward_is_not_checked_and_not_passed():
    layer = FreshMaskInBackward(P, seed=6)  # a wrong backward nobody asked about
    result = dropmc.check_dropout(layer.forward, P, rng_state=layer.rng_state, samples=SAMPLES)
    assert result.passed_as_run
    assert not result.passed and not result
    assert set(result.unchecked) == {"semantics.backward_mask"}
    assert "not checked: backward (pass backward=" in str(result)
    # Given, it fails; declared absent, the rest passes.
    with_backward = dropmc.check_dropout(
        layer.forward, P, rng_state=layer.rng_state, backward=layer.backward, samples=SAMPLES
    )
    assert failed_ids(with_backward) == {"semantics.backward_mask"}
    declared = dropmc.check_dropout(layer.forward, P, rng_state=layer.rng_state, backward=False, samples=SAMPLES)
    assert declared.passed and not declared.unchecked


def test_one_mask_shared_by_every_row_is_blamed_on_reused_masks_not_the_scale():
    class SharedMask(Correct):
        def keep(self, shape):
            return np.broadcast_to(self.rng.random((1, shape[1])) >= self.p, shape)

    layer = SharedMask(P, 7)
    result = dropmc.check_dropout(layer.forward, P, rng_state=layer.rng_state, backward=layer.backward, samples=SAMPLES)
    assert "dropout.mean" in failed_ids(result), str(result)
    causes = " ".join(result.likely_causes)
    assert "masks are reused" in causes, causes
    assert "scale" not in causes and "inverted" not in causes, causes
    assert "scale" not in explain(result.claim("dropout.mean"))


def test_the_kept_count_names_its_component_as_the_count():
    class KeepsFive(Correct):
        """Keeps exactly 5 of the 6 units of each row (a fixed drop count)."""

        def keep(self, shape):
            kept = np.ones(shape, dtype=bool)
            kept[np.arange(shape[0]), self.rng.integers(0, shape[1], shape[0])] = False
            return kept

    # Each unit is kept with probability 5/6 = q at p = 1/6, but K is always 5.
    p = 1 / 6
    result = dropmc.check_dropout(KeepsFive(p, 8).forward, p, x=np.ones(6), backward=False, samples=SAMPLES)
    claim = result.claim("dropout.kept_count")
    assert claim["verdict"] == "fail"
    line = explain(claim)
    assert f"(the count K = {claim['component']})" in line and "unit" not in line.split(":")[0], line
    assert f"at the count K = {claim['component']} " in result.claim("dropout.kept_count")["note"]
    assert "not independently" in " ".join(result.likely_causes)


def test_a_wide_row_is_served_in_bounded_batches():
    # d = 100 000 at samples = 2: before issue 23 every call had >= 256 rows
    # (2.6e7 elements per array, 1.1 GB, 15 s).
    d = 100_000
    rng = np.random.default_rng(9)
    elements = []

    def forward(x, training):
        elements.append(x.size)
        if not training:
            return x
        return np.where(rng.random(x.shape) >= P, x / (1 - P), 0.0)

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    dropmc.check_dropout(forward, P, x=np.ones(d), samples=2, backward=False)
    elapsed = time.perf_counter() - start
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert max(elements) == d  # one row per call at this width
    assert len(elements) < 100
    print(f"d = {d}, samples = 2: {elapsed:.1f} s, peak RSS grew {grown_mb:.0f} MB")
    assert grown_mb < 300, grown_mb
