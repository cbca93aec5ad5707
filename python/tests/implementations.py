"""Dropout implementations in numpy: correct ones and the gallery's known-wrong ones.

Each is a small layer object with ``forward(x, training)``, ``backward(x,
grad, training)`` (the gradient of its most recent forward) and
``rng_state()``; the wrong ones differ from ``Correct`` in one place each.
"""

import numpy as np


class Correct:
    """Inverted dropout: keep with probability q = 1 - p, scale survivors by 1/q."""

    def __init__(self, p, seed=0):
        self.p = p
        self.rng = np.random.default_rng(seed)
        self.mask = None

    def rng_state(self):
        return self.rng.bit_generator.state

    def keep(self, shape):
        return self.rng.random(shape) >= self.p

    def scale(self, x, kept):
        return np.where(kept, x / (1 - self.p), 0.0).astype(x.dtype)

    def forward(self, x, training):
        if not training:
            return x
        self.mask = self.keep(x.shape)
        return self.scale(x, self.mask)

    def backward(self, x, grad, training):
        return self.scale(grad, self.mask)


class Tutorial(Correct):
    """The tutorial's bug: the mask is drawn before the training branch, and
    eval returns ``x * (1 - p)`` (the original scheme's eval mixed into
    inverted dropout)."""

    def forward(self, x, training):
        self.mask = self.keep(x.shape)
        if training:
            return self.scale(x, self.mask)
        return (x * (1 - self.p)).astype(x.dtype)


class KeepBelowP(Correct):
    """The keep rule written backwards: ``u < p`` kept."""

    def keep(self, shape):
        return self.rng.random(shape) < self.p


class DivideByP(Correct):
    """Survivors scaled by 1/p instead of 1/q."""

    def scale(self, x, kept):
        return np.where(kept, x / self.p, 0.0).astype(x.dtype)


class MultiplyByQ(Correct):
    """Survivors multiplied by q instead of divided by it."""

    def scale(self, x, kept):
        return np.where(kept, x * (1 - self.p), 0.0).astype(x.dtype)


class FreshMaskInBackward(Correct):
    """The backward pass draws a new mask instead of reusing the forward's."""

    def backward(self, x, grad, training):
        return self.scale(grad, self.keep(grad.shape))
