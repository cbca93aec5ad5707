"""Flax's nn.Dropout through JAX on the CPU (CI installs jax and flax)."""

import numpy as np
import pytest

import dropmc

jax = pytest.importorskip("jax", reason="jax is not installed (pip install jax flax)")
nn = pytest.importorskip("flax.linen", reason="flax is not installed (pip install flax)")

P = 0.3


class FlaxDropout:
    """Flax's layer behind forward/backward/rng_state: a fresh key per
    training call, the last key kept so backward differentiates the same
    forward (same mask)."""

    def __init__(self, p, seed=0):
        self.layer = nn.Dropout(rate=p)
        self.key = jax.random.PRNGKey(seed)
        self.last = None
        self._train = jax.jit(
            lambda x, k: self.layer.apply({}, x, deterministic=False, rngs={"dropout": k})
        )

    def forward(self, x, training):
        if not training:
            # No rngs: if eval mode tried to draw, Flax would raise.
            return np.asarray(self.layer.apply({}, x, deterministic=True))
        self.key, self.last = jax.random.split(self.key)
        return np.asarray(self._train(x, self.last))

    def backward(self, x, grad, training):
        _, vjp = jax.vjp(lambda v: self._train(v, self.last), x)
        return np.asarray(vjp(grad)[0])

    def rng_state(self):
        return np.asarray(jax.random.key_data(self.key))


def test_flax_dropout_passes():
    layer = FlaxDropout(P, seed=0)
    result = dropmc.check_dropout(
        layer.forward,
        P,
        dtype=np.float32,  # JAX's default precision
        rng_state=layer.rng_state,
        backward=layer.backward,
    )
    assert result.passed, str(result)
    v = {c["id"]: c["verdict"] for c in result.claims}
    assert v["semantics.survivors_exact"] == "pass"
    assert v["semantics.backward_mask"] == "pass"
    assert v["semantics.eval_identity"] == "pass"


def test_flax_dropout_passes_at_another_rate():
    layer = FlaxDropout(0.1, seed=1)
    result = dropmc.check_dropout(layer.forward, 0.1, dtype=np.float32, samples=200_000, backward=False)
    assert result.passed, str(result)


def test_flax_layernorm_after_flax_dropout_matches_the_exact_value():
    x = np.array([0.5, -1.2, 3.0, 0.7, 2.0, -0.4], dtype=np.float32)
    drop = FlaxDropout(P, seed=2)
    ln = nn.LayerNorm(epsilon=1e-5, use_bias=False, use_scale=False)
    norm = jax.jit(lambda y: ln.apply({}, y))
    result = dropmc.check_norm_site(
        lambda X: drop.forward(X, True),
        lambda Y: np.asarray(norm(Y)),
        x,
        P,
        kind="layernorm",
        eps=1e-5,
        dtype=np.float32,
    )
    assert result.passed, str(result)


def test_flax_rmsnorm_after_flax_dropout_matches_the_exact_value():
    x = np.array([0.5, -1.2, 3.0, 0.7, 2.0], dtype=np.float32)
    drop = FlaxDropout(0.2, seed=3)
    rms = nn.RMSNorm(epsilon=1e-6, use_scale=False)
    norm = jax.jit(lambda y: rms.apply({}, y))
    result = dropmc.check_norm_site(
        lambda X: drop.forward(X, True),
        lambda Y: np.asarray(norm(Y)),
        x,
        0.2,
        kind="rmsnorm",
        eps=1e-6,
        dtype=np.float32,
    )
    assert result.passed, str(result)
