"""Issue 52 item 8: a numpy dropout that keeps one mask per input shape and
reuses it on every call of that shape.

Within one call its rows differ, so ``semantics.masks_never_repeat`` (whose
1 000 rows at ``samples=1000`` come from one call of 8 192 rows) passed it,
and ``calls.one_row_sum_mean`` said "z = -inf - inconclusive": every one of
its one-row calls gave the same sum. Now ``calls.one_row_masks_never_repeat``
reads the keep masks of one-row calls, where every window of rows spans
calls (a correct dropout repeats a window with probability at most alpha:
python/src/claims/repeats.rs), and the one-row sum is decided below its
minimum budget by the distribution-free bound on its null range.
"""

import numpy as np

import dropmc
from implementations import Correct

P = 0.1


class MaskPerShape:
    """Inverted dropout that draws a mask the first time it sees a shape
    and reuses it on every later call of that shape."""

    def __init__(self, p, seed=0):
        self.p, self.rng, self.masks = p, np.random.default_rng(seed), {}

    def forward(self, x, training):
        if not training:
            return x
        if x.shape not in self.masks:
            self.masks[x.shape] = self.rng.random(x.shape) >= self.p
        return np.where(self.masks[x.shape], x / (1 - self.p), 0.0)


def claim(result, claim_id):
    return next(c for c in result.claims if c["id"] == claim_id)


def test_a_mask_reused_across_calls_fails_at_1000_draws():
    result = dropmc.check_dropout(MaskPerShape(P).forward, P, samples=1000, backward=False)
    repeats = claim(result, "calls.one_row_masks_never_repeat")
    assert repeats["verdict"] == "fail", str(result)
    assert any("from call to call" in c for c in result.likely_causes), result.likely_causes
    sum_mean = claim(result, "calls.one_row_sum_mean")
    # Every one-row call returns the same row: no spread, z infinite.
    assert np.isinf(sum_mean["z"]), sum_mean
    assert sum_mean["verdict"] == "fail", sum_mean
    assert "no spread" in sum_mean["note"], sum_mean["note"]
    assert not result.passed


def test_a_correct_dropout_passes_the_rule_at_1000_draws():
    result = dropmc.check_dropout(Correct(P).forward, P, samples=1000, backward=False)
    repeats = claim(result, "calls.one_row_masks_never_repeat")
    assert repeats["verdict"] == "pass", str(result)
    assert "rows of 1 per call" in repeats["note"], repeats["note"]
