"""semantics.masks_never_repeat: a generator with a short period (issue 23).

Before this rule an LCG mod 2**16 was caught in 7 of 10 runs, by the kept
count alone; its stream repeats every 2**16 / d rows, so a window of rows
recurs bit for bit, which a correct generator does with probability at
most alpha (python/src/claims/repeats.rs).
"""

import numpy as np
import pytest

import dropmc
from implementations import Correct

P = 0.1


class Lcg16Dropout:
    """Inverted dropout whose uniforms come from the LCG
    s <- (25173 s + 13849) mod 2**16, u = s / 2**16 (full period 2**16)."""

    def __init__(self, p, state):
        s, seq = state, np.empty(1 << 16)
        for i in range(1 << 16):
            s = (25173 * s + 13849) & 0xFFFF
            seq[i] = s / 65536.0
        self.p, self.seq, self.at = p, seq, 0

    def forward(self, x, training):
        if not training:
            return x
        idx = (self.at + np.arange(x.size)) % self.seq.size
        self.at = (self.at + x.size) % self.seq.size
        keep = self.seq[idx].reshape(x.shape) >= self.p
        return np.where(keep, x / (1 - self.p), 0.0)


class ReseededEachCall(Correct):
    """A fresh generator with the same seed on every call."""

    def forward(self, x, training):
        self.rng = np.random.default_rng(5)
        return super().forward(x, training)


def verdict(result, claim="semantics.masks_never_repeat"):
    return next(c for c in result.claims if c["id"] == claim)["verdict"]


@pytest.mark.parametrize("state", range(10))
def test_a_16_bit_lcg_is_caught_in_every_run(state):
    layer = Lcg16Dropout(P, state)
    result = dropmc.check_dropout(layer.forward, P, samples=20_000, backward=False, seed=state)
    assert verdict(result) == "fail", str(result)
    assert any("keep masks recur" in c and "short period" in c for c in result.likely_causes), result.likely_causes


def test_a_generator_reseeded_on_each_call_is_caught():
    result = dropmc.check_dropout(ReseededEachCall(P).forward, P, samples=20_000, backward=False)
    assert verdict(result) == "fail", str(result)


def test_a_correct_dropout_passes_and_the_window_is_stated():
    result = dropmc.check_dropout(Correct(P).forward, P, samples=20_000, backward=False)
    claim = next(c for c in result.claims if c["id"] == "semantics.masks_never_repeat")
    assert claim["verdict"] == "pass", str(result)
    assert "windows of" in claim["note"] and "mask bits" in claim["note"], claim["note"]


def test_below_two_windows_the_rule_is_skipped_with_its_minimum():
    result = dropmc.check_dropout(Correct(P).forward, P, samples=20, backward=False)
    claim = next(c for c in result.claims if c["id"] == "semantics.masks_never_repeat")
    assert claim["verdict"] == "skipped" and "needs at least" in claim["note"], claim
