"""check_dropout(..., shared_axes=...): the mask-shape claims on a dropout whose
mask is shared over some axes (channel-wise dropout)."""

import numpy as np
import pytest

import dropmc

P = 0.3
# One sample (C = 3 channels, L = 4 positions): entries of each channel
# share a sign, so a shared mask's channel-sum variance (p/q)(sum x)^2
# differs from an elementwise mask's (p/q) sum x^2; one zero entry (the
# channel still has non-zero ones).
X_CL = np.array(
    [
        [1.0, 0.5, 2.0, 1.5],
        [-1.0, -0.5, -2.0, 0.0],
        [0.25, 3.0, 1.0, 0.5],
    ]
)
# The mask-shape claims, and the same mean on one-sample calls (issue 34).
MASK_SHAPE_CLAIMS = {"mask_shape.mean", "mask_shape.shared_variance", "mask_shape.shared_zero_column",
                     "calls.one_sample_mean"}


def channelwise(p, seed=0):
    """A correct numpy channel-wise dropout on (n, C, L): one mask per (n, C)."""
    rng = np.random.default_rng(seed)

    def forward(x, training):
        if not training:
            return x
        keep = rng.random(x.shape[:2] + (1,) * (x.ndim - 2)) >= p
        return np.where(keep, x / (1 - p), 0.0)

    return forward


def elementwise(p, seed=0):
    rng = np.random.default_rng(seed)

    def forward(x, training):
        if not training:
            return x
        return np.where(rng.random(x.shape) >= p, x / (1 - p), 0.0)

    return forward


def ran(result):
    return {c["id"]: c for c in result.claims if c["verdict"] != "skipped"}


# The semantics rules that hold whatever the mask's shape, run on the
# user's sample with the shared mask (issue 33; eval_draws_nothing needs
# rng_state, backward_mask a backward).
SHAPE_FREE_RULES = {"semantics.eval_identity", "semantics.survivors_exact", "semantics.forward_preserves_input"}


def test_numpy_channelwise_passes_the_mask_shape_claims():
    result = dropmc.check_dropout(channelwise(P), P, x=X_CL, shared_axes=(2,), backward=False)
    assert set(ran(result)) == MASK_SHAPE_CLAIMS | SHAPE_FREE_RULES, str(result)
    assert result.passed, str(result)
    # The elementwise claims are skipped with the reason, never failed.
    sum_var = result.claim("dropout.sum_variance")
    assert sum_var["verdict"] == "skipped"
    assert "independent mask per unit" in sum_var["note"]


def test_elementwise_declared_channelwise_fails_naming_the_claims():
    result = dropmc.check_dropout(elementwise(P), P, x=X_CL, shared_axes=(2,))
    failed = {c["id"] for c in result.failed()}
    assert {"mask_shape.shared_variance", "mask_shape.shared_zero_column"} <= failed, str(result)
    # The mean holds for any mask shape.
    assert result.claim("mask_shape.mean")["verdict"] == "pass", str(result)
    assert "not dropped together" in " ".join(result.likely_causes), result.likely_causes


def test_channelwise_undeclared_still_fails_the_elementwise_claims():
    # The same correct channel-wise layer without shared_axes fails the
    # elementwise claims (the repro): why shared_axes exists.
    # Every input of the suite has an even width: pairs of entries share a mask.
    layer = channelwise(P)
    result = dropmc.check_dropout(
        lambda x, t: layer(x.reshape(x.shape[0], -1, 2), t).reshape(x.shape),
        P,
        x=X_CL.ravel(),
        samples=200_000,
    )
    assert result.claim("dropout.sum_variance")["verdict"] == "fail", str(result)


def test_a_wrong_rate_fails_the_shared_claims():
    result = dropmc.check_dropout(channelwise(0.25), P, x=X_CL, shared_axes=(2,))
    assert "mask_shape.shared_zero_column" in {c["id"] for c in result.failed()}, str(result)


def test_torch_dropout2d_passes():
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    layer = torch.nn.Dropout2d(P)
    x = np.stack([X_CL, -X_CL[::-1]])  # (C = 2, H = 3, W = 4)

    def forward(a, training):
        layer.train(training)
        with torch.no_grad():
            return layer(torch.from_numpy(a)).numpy()

    result = dropmc.check_dropout(forward, P, x=x, shared_axes=(2, 3), backward=False)
    assert result.passed, str(result)


@pytest.mark.parametrize(
    "axes, error",
    [((0,), ValueError), ((3,), ValueError), ((1, 1), ValueError), ((), ValueError), (2, TypeError)],
)
def test_bad_shared_axes(axes, error):
    with pytest.raises(error):
        dropmc.check_dropout(channelwise(P), P, x=X_CL, shared_axes=axes)


def test_shared_axes_needs_x_and_a_nonzero_group():
    with pytest.raises(ValueError, match="needs x"):
        dropmc.check_dropout(channelwise(P), P, shared_axes=(2,))
    x = X_CL.copy()
    x[1] = 0.0
    with pytest.raises(ValueError, match="all zero"):
        dropmc.check_dropout(channelwise(P), P, x=x, shared_axes=(2,))
