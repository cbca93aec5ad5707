"""dropmc.flax on Flax's nn.Dropout and a jax.random.bernoulli dropout (CI installs jax, flax)."""

import time

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="jax is not installed (pip install jax flax)")
nn = pytest.importorskip("flax.linen", reason="flax is not installed (pip install flax)")
df = pytest.importorskip("dropmc.flax")

P = 0.1
SAMPLES = 100_000


def test_flax_dropout_passes_through_the_adapter():
    start = time.perf_counter()
    result = df.check_dropout(nn.Dropout(rate=P), P)
    print(f"flax nn.Dropout: {time.perf_counter() - start:.1f} s")
    assert result.passed, str(result)
    assert result.claim("semantics.backward_mask")["verdict"] == "pass"
    assert result.claim("semantics.eval_draws_nothing")["verdict"] == "pass"


def test_a_jax_function_with_a_wrong_scale_fails_the_survivors():
    def drop(x, training, key):
        if not training:
            return x
        keep = jax.random.bernoulli(key, 1 - P, x.shape)
        return jax.numpy.where(keep, x / P, 0.0)  # 1/p, not 1/q

    result = df.check_dropout(drop, P, samples=SAMPLES)
    failed = {c["id"] for c in result.failed()}
    assert {"dropout.mean", "semantics.survivors_exact", "semantics.backward_mask"} <= failed, str(result)
    assert "dropout.kept_count" not in failed


def test_the_adapters_state_is_a_value():
    layer = df.Dropout(nn.Dropout(rate=P))
    before = layer.rng_state()
    layer.forward(np.ones((4, 3), np.float32), True)
    assert (before != layer.rng_state()).any()
    after = layer.rng_state()
    layer.forward(np.ones((4, 3), np.float32), False)
    assert (after == layer.rng_state()).all()
