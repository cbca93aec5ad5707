"""Issue 33 (part A): the checks test the object the user passes, every path
checks what it can or says what it did not, the rate comes from the module,
and the messages name their cause (CI installs torch, jax and flax)."""

import re
import time

import numpy as np
import pytest

import dropmc

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch)")
dt = pytest.importorskip("dropmc.torch")
F = torch.nn.functional

FAST_BN = {"batch": 8, "steps": 10}
BUFFERS = {"batchnorm.running_stats", "batchnorm.fold_buffers"}


@pytest.fixture(autouse=True)
def one_thread():
    with dt.one_thread():
        yield


# --- 1. check_batchnorm trains the module it is given -------------------------


def test_a_batchnorm_without_running_statistics_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="no running statistics.*track_running_stats=False"):
        dt.check_batchnorm(torch.nn.BatchNorm1d(3, track_running_stats=False), 0.3)


class DriftingBatchNorm(torch.nn.BatchNorm1d):
    """A planted fault: the running variance drifts up 5 % a training step."""

    def forward(self, x):
        y = super().forward(x)
        if self.training:
            with torch.no_grad():
                self.running_var.mul_(1.05)
        return y


def test_a_subclass_whose_running_variance_drifts_fails_naming_the_buffer():
    result = dt.check_batchnorm(DriftingBatchNorm(3), 0.3, **FAST_BN)
    assert not result.passed and result.decided
    assert BUFFERS <= {c["id"] for c in result.failed()}, str(result)
    assert "running variance does not follow" in " ".join(result.likely_causes), result.likely_causes


def test_the_module_itself_is_trained_and_the_callers_buffers_are_untouched():
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm1d(4)
    with torch.no_grad():
        bn.weight.uniform_(0.5, 2.0)
        bn.bias.normal_()
        bn.running_mean.fill_(3.0)
    before = {k: v.clone() for k, v in bn.state_dict().items()}
    result = dt.check_batchnorm(bn, 0.3, **FAST_BN)
    assert result.passed, str(result)
    # One replicate is the module's own 4 features.
    assert len(result.to_dict()["mu"]) == 4
    assert all(torch.equal(before[k], v) for k, v in bn.state_dict().items())


def test_num_features_is_the_modules():
    with pytest.raises(ValueError, match="num_features = 2"):
        dt.check_batchnorm(torch.nn.BatchNorm1d(2), 0.3, mu=[0.0, 1.0, 2.0], sigma=[1.0, 1.0, 1.0])


def test_the_cumulative_average_is_checked_over_one_step():
    result = dt.check_batchnorm(torch.nn.BatchNorm1d(3, momentum=None), 0.3, batch=8)
    assert result.passed, str(result)
    assert result.to_dict()["steps"] == 1 and result.to_dict()["momentum"] == 1.0
    with pytest.raises(ValueError, match="cumulative average"):
        dt.check_batchnorm(torch.nn.BatchNorm1d(3, momentum=None), 0.3, steps=5)


def test_flax_batchnorm_passes_through_the_shipped_runner():
    pytest.importorskip("flax", reason="flax is not installed")
    import flax.linen as nn

    import dropmc.flax as dfx

    start = time.perf_counter()
    result = dfx.check_batchnorm(nn.BatchNorm(momentum=0.9), 0.3, **FAST_BN)
    print(f"dropmc.flax.check_batchnorm: {time.perf_counter() - start:.1f} s")
    assert result.passed, str(result)
    assert result.to_dict()["variance"] == "biased"
    # Declared as PyTorch's unbiased convention, the buffers fail.
    with pytest.raises(ValueError, match="declared unbiased=True, but the module's is False"):
        dfx.check_batchnorm(nn.BatchNorm(momentum=0.9), 0.3, unbiased=True)
    runner = dfx.batchnorm_runner(nn.BatchNorm(momentum=0.9))
    result = dropmc.check_batchnorm(runner, 0.3, momentum=0.2, unbiased=False, eps=1e-5, dtype="float32", **FAST_BN)
    assert BUFFERS <= {c["id"] for c in result.failed()}, str(result)


def test_keras_batchnormalization_passes_through_the_shipped_runner():
    import os

    os.environ.setdefault("KERAS_BACKEND", "jax")
    keras = pytest.importorskip("keras", reason="keras is not installed (pip install keras)")
    import dropmc.keras as dk

    start = time.perf_counter()
    result = dk.check_batchnorm(keras.layers.BatchNormalization(momentum=0.9), 0.3, **FAST_BN)
    print(f"dropmc.keras.check_batchnorm: {time.perf_counter() - start:.1f} s")
    assert result.passed, str(result)
    with pytest.raises(ValueError, match=r"declared momentum=0.2, but the layer's is 0.1"):
        dk.check_batchnorm(keras.layers.BatchNormalization(momentum=0.9), 0.3, momentum=0.2)
    runner = dk.batchnorm_runner(keras.layers.BatchNormalization(momentum=0.9))
    result = dropmc.check_batchnorm(runner, 0.3, momentum=0.1, unbiased=True, eps=1e-3, dtype="float32", **FAST_BN)
    assert BUFFERS <= {c["id"] for c in result.failed()}, str(result)


# --- 2. the mask-shape path checks eval, rng_state and backward ---------------


P = 0.3
SAMPLE = np.linspace(0.5, 2.0, 12).reshape(3, 4)


class EvalScalesChannelDropout(torch.nn.Module):
    """A planted fault: a channel dropout whose eval returns x (1 - p)."""

    def __init__(self):
        super().__init__()
        self.drop = torch.nn.Dropout1d(P)

    def forward(self, x):
        return self.drop(x) if self.training else x * (1 - P)


def test_a_channel_dropout_scaling_in_eval_fails_through_shared_axes():
    result = dt.check_dropout(EvalScalesChannelDropout(), P, x=SAMPLE, shared_axes=(2,), samples=20_000)
    assert not result.passed and result.decided
    assert {c["id"] for c in result.failed()} == {"semantics.eval_identity"}, str(result)
    assert "eval path is not the identity" in result.likely_causes[0]


def test_dropout1d_passes_every_shape_free_rule_through_shared_axes():
    torch.manual_seed(3)
    result = dt.check_dropout(torch.nn.Dropout1d(P), x=SAMPLE, shared_axes=(2,))
    assert result.passed, str(result)
    for rule in ("eval_identity", "eval_draws_nothing", "survivors_exact", "forward_preserves_input", "backward_mask"):
        assert result.claim(f"semantics.{rule}")["verdict"] == "pass", str(result)


def test_an_omitted_backward_is_listed_and_not_passed_as_on_the_elementwise_path():
    rng = np.random.default_rng(4)

    def channel_dropout(x, training):
        if not training:
            return x
        keep = rng.random((x.shape[0], x.shape[1], 1)) >= P
        return np.where(keep, x / (1 - P), 0.0)

    result = dropmc.check_dropout(channel_dropout, P, x=SAMPLE, shared_axes=(2,))
    assert result.passed_as_run and not result.passed
    assert "semantics.backward_mask" in result.unchecked
    assert "semantics.eval_draws_nothing" in {c["id"] for c in result.claims if c["verdict"] == "skipped"}


class RedrawingBackward(torch.autograd.Function):
    """A planted fault: the backward of a channel dropout draws a fresh mask."""

    @staticmethod
    def forward(ctx, x):
        keep = (torch.rand(x.shape[0], x.shape[1], 1, dtype=x.dtype) >= P).to(x.dtype)
        return x * keep / (1 - P)

    @staticmethod
    def backward(ctx, g):
        keep = (torch.rand(g.shape[0], g.shape[1], 1, dtype=g.dtype) >= P).to(g.dtype)
        return g * keep / (1 - P)


def test_a_backward_with_a_fresh_mask_fails_through_shared_axes():
    def layer(x, training):
        return RedrawingBackward.apply(x) if training else x

    result = dt.check_dropout(layer, P, x=SAMPLE, shared_axes=(2,), samples=20_000)
    assert "semantics.backward_mask" in {c["id"] for c in result.failed()}, str(result)


# --- 2. check_sdpa drives heads and grouped-query heads ------------------------


def shared_mask_attention(dims):
    """A planted fault: SDPA whose dropout mask is shared over ``dims`` of
    the (batch, heads, queries, keys) weights."""

    def attention(q, k, v, dropout_p=0.0, scale=None, enable_gqa=False):
        if enable_gqa:
            group = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        w = torch.softmax(q @ k.transpose(-2, -1) * scale, dim=-1)
        shape = list(w.shape)
        for d in dims:
            shape[d] = 1
        keep = torch.rand(shape, dtype=w.dtype) >= dropout_p
        return torch.where(keep, w / (1 - dropout_p), torch.zeros_like(w)) @ v

    return attention


@pytest.mark.parametrize("dims, kv_heads", [((1,), None), ((0,), None), ((1,), 1)])
def test_an_sdpa_mask_shared_across_heads_or_batch_fails_as_correlated_rows(dims, kv_heads):
    torch.manual_seed(5)
    result = dt.check_sdpa(0.2, attention=shared_mask_attention(dims), kv_heads=kv_heads, samples=100_000)
    assert not result.passed and result.decided
    assert "attention.row_sum_variance" in {c["id"] for c in result.failed()}, str(result)
    assert "rows of one call are correlated" in result.likely_causes[0], result.likely_causes


def test_sdpa_with_grouped_query_heads_passes():
    torch.manual_seed(6)
    result = dt.check_sdpa(0.2, kv_heads=1, samples=100_000)
    assert result.passed, str(result)
    # The same function with a fresh mask per weight passes too (the plant's control).
    assert dt.check_sdpa(0.2, attention=shared_mask_attention(()), samples=100_000).passed


def test_an_even_head_count_is_refused():
    with pytest.raises(ValueError, match="heads must be odd"):
        dt.sdpa_dropout(0.2, heads=4)


# --- 4. torch norm sites, device ------------------------------------------------


def test_check_norm_site_reads_a_768_wide_layernorm_with_random_gamma_beta():
    torch.manual_seed(7)
    ln = torch.nn.LayerNorm(768)
    with torch.no_grad():
        ln.weight.normal_(1.0, 0.3)
        ln.bias.normal_(0.0, 0.3)
    x = torch.randn(768, dtype=torch.float64).numpy()
    start = time.perf_counter()
    result = dt.check_norm_site(torch.nn.Dropout(0.1), ln, x, 0.1)
    print(f"dropmc.torch.check_norm_site(Dropout(0.1), LayerNorm(768)): {time.perf_counter() - start:.1f} s")
    assert result.passed, str(result)
    assert result.to_dict()["dtype"] == "float32"


class LayerNormWithoutBias(torch.nn.LayerNorm):
    """A planted fault: a LayerNorm whose forward forgets its β."""

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, None, self.eps)


@pytest.mark.parametrize("norm_class", [torch.nn.LayerNorm, torch.nn.RMSNorm])
def test_norm_parameters_come_from_the_module(norm_class):
    torch.manual_seed(8)
    norm = norm_class(12, dtype=torch.float64)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        if getattr(norm, "bias", None) is not None:
            norm.bias.uniform_(-1.0, 1.0)
    x = np.linspace(-1.0, 2.0, 12)
    result = dt.check_norm_site(torch.nn.Dropout(0.2), norm, x, device="cpu", h=np.full(12, 0.5))
    assert result.passed, str(result)


def test_a_norm_that_ignores_its_beta_fails():
    torch.manual_seed(9)
    norm = LayerNormWithoutBias(12, dtype=torch.float64)
    with torch.no_grad():
        norm.bias.fill_(0.25)
    result = dt.check_norm_site(torch.nn.Dropout(0.2), norm, np.linspace(-1.0, 2.0, 12))
    assert [c["id"] for c in result.failed()] == ["norm_site.layernorm_mean"], str(result)
    assert "the norm computes something else" in result.likely_causes[0], result.likely_causes


def test_an_unknown_norm_is_refused():
    with pytest.raises(TypeError, match="not a norm dropmc recognises"):
        dt.check_norm_site(torch.nn.Dropout(0.1), torch.nn.Identity(), np.ones(4))


def test_the_device_argument_runs_the_dropout_there():
    torch.manual_seed(10)
    result = dt.check_dropout(torch.nn.Dropout(0.2), device="cpu", samples=50_000)
    assert not result.failed(), str(result)
    with pytest.raises((RuntimeError, ValueError)):
        dt.check_dropout(torch.nn.Dropout(0.2), device="no-such-device", samples=50_000)


# --- 6. the rate comes from the module ---------------------------------------


def test_a_declared_rate_that_contradicts_the_module_is_refused_naming_both():
    with pytest.raises(ValueError, match=r"declared p = 0.3.*Dropout.p = 0.1"):
        dt.check_dropout(torch.nn.Dropout(0.1), 0.3)
    with pytest.raises(TypeError, match="p is required"):
        dt.check_dropout(lambda x, training: x)


def test_the_flax_adapter_reads_the_rate_too():
    pytest.importorskip("flax", reason="flax is not installed")
    import flax.linen as nn

    import dropmc.flax as dfx

    with pytest.raises(ValueError, match=r"declared p = 0.3.*Dropout.rate = 0.1"):
        dfx.check_dropout(nn.Dropout(rate=0.1), 0.3)


def test_a_rate_mismatch_found_from_the_samples_is_named_first():
    rng = np.random.default_rng(11)

    def forward(x, training):  # an inverted dropout at p = 0.1, declared 0.3
        if not training:
            return x
        return np.where(rng.random(x.shape) >= 0.1, x / 0.9, 0.0)

    result = dropmc.check_dropout(forward, 0.3, rng_state=lambda: rng.bit_generator.state, backward=False)
    assert not result.passed
    first = result.likely_causes[0]
    assert "another rate than the declared p = 0.3" in first, result.likely_causes
    # The kept fraction over 10^6 rows of 5 units: its SE is 1.3e-4, so 0.1 is within 5e-3.
    assert abs(float(re.search(r"p ≈ ([0-9.]+)", first).group(1)) - 0.1) < 5e-3, first


# --- 7. messages ---------------------------------------------------------------


def test_the_default_values_do_not_leak_into_a_longer_row():
    torch.manual_seed(12)
    result = dropmc.check_attention_dropout(dt.sdpa_dropout(0.2), 0.2, a=[0.25] * 4, samples=50_000)
    assert len(result.to_dict()["values"]) == 4
    assert not result.failed(), str(result)


def test_an_attention_row_not_summing_to_one_is_refused_as_the_cli_does():
    with pytest.raises(ValueError, match=r"a sums to 1.1, not 1 \(within a float32 softmax's rounding"):
        dropmc.check_attention_dropout(dt.sdpa_dropout(0.2), 0.2, a=[0.3, 0.3, 0.5])
    # The CLI's words, word for word.
    with pytest.raises(ValueError, match=r"a sums to 1.1, not 1 \(within a float32 softmax's rounding"):
        dropmc.eval("attn", a=[0.3, 0.3, 0.5], p=0.2)


def test_a_failed_batchnorm_or_mask_shape_run_has_a_likely_cause():
    result = dt.check_batchnorm(torch.nn.BatchNorm1d(3, momentum=0.2), 0.3, momentum=0.1, **FAST_BN)
    assert result.likely_causes and "momentum" in result.likely_causes[0]
