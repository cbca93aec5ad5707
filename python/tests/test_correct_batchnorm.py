"""dropmc.torch.correct on a BatchNorm1d trained behind dropout: the fold
running_var ← q·running_var − p·running_mean² (src/formulas/batchnorm.rs).

A torch BatchNorm1d (affine=False, momentum=None: the running buffers are
the plain averages of the batch statistics, unbiased for the train-mode
input's mean and variance at every step) is trained on dropout(x) with x
clean data N(μ_g, σ_g²) in R independent replicate channels per
configuration g. After the fold, its eval output on fresh clean data has,
per channel, variance σ_g²/(rv_k + ε) with rv_k the folded buffer, whose
expectation is σ_g²: the variance of the output should be σ_g²/(σ_g² + ε),
the normalised dropout-free input's.

The statistic per configuration: the mean over its R channels of the
channel's sample variance s_k² (N fresh examples), against that target,
with the SE from the spread over the R channels (which holds both the
eval sample's noise and the buffers' training noise): Student t with
R − 1 degrees of freedom, two-sided at the suite's per-assertion level
(dropmc.critical_z(), turned into a t quantile by the Cornish–Fisher
expansion). Neglected: the Jensen bias of σ²/rv_k, relative
Var(rv_k)/rv_k² ≈ (2 + κ)/(B·T) ≤ 1e-4 here (κ the input's excess
kurtosis, < 10 for these inputs), below 0.1 SE.

Planted fault: the fold without its p·running_mean² term (q·running_var
alone), which must fail at the configuration with μ ≠ 0; and the unfolded
buffers, which must fail at both.
"""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
import dropmc  # noqa: E402
import dropmc.correct as C  # noqa: E402
import dropmc.torch as dt  # noqa: E402

torch.set_num_threads(1)

P = 0.3
CONFIGS = [(0.0, 1.0), (2.0, 1.0)]  # (μ, σ) of the clean input per configuration
REPLICATES = 128  # channels per configuration
BATCH, STEPS, EVAL_EXAMPLES = 256, 200, 4096
EPS = 1e-5


def _t_quantile(z, dof):
    """The Student-t quantile at the normal quantile z (Cornish–Fisher, two
    terms: relative error below 1e-4 at dof ≥ 30)."""
    return z + (z**3 + z) / (4 * dof) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * dof**2)


def _clean(n, generator):
    mu = torch.tensor([m for m, _ in CONFIGS for _ in range(REPLICATES)], dtype=torch.float64)
    sigma = torch.tensor([s for _, s in CONFIGS for _ in range(REPLICATES)], dtype=torch.float64)
    return mu + sigma * torch.randn(n, len(mu), generator=generator, dtype=torch.float64)


def _trained():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Dropout(P), nn.BatchNorm1d(len(CONFIGS) * REPLICATES, eps=EPS,
                                                        momentum=None, affine=False)).double()
    model.train()
    with torch.no_grad():
        for _ in range(STEPS):
            model(_clean(BATCH, g))
    return model.eval()


def _t_statistics(model):
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        y = model(_clean(EVAL_EXAMPLES, g)).numpy()
    s2 = y.var(axis=0, ddof=1).reshape(len(CONFIGS), REPLICATES)
    out = []
    for (mu, sigma), row in zip(CONFIGS, s2):
        target = sigma**2 / (sigma**2 + EPS)
        se = row.std(ddof=1) / math.sqrt(REPLICATES)
        t = (row.mean() - target) / se
        out.append((t, se))
    return out


@pytest.fixture(scope="module")
def trained():
    return _trained()


def _passes(stats):
    crit = _t_quantile(dropmc.critical_z(), REPLICATES - 1)
    return [bool(abs(t) < crit) for t, _ in stats]


def test_folded_eval_variance_matches_the_clean_inputs(trained):
    state = {k: v.clone() for k, v in trained.state_dict().items()}
    dt.correct(trained, sites=[("0", "1")])
    try:
        assert trained._dropmc_correction.folded == [("0", "1")]
        assert trained._dropmc_correction.unfolded == {}
        stats = _t_statistics(trained)
    finally:
        dt.uncorrect(trained)
    crit = _t_quantile(dropmc.critical_z(), REPLICATES - 1)
    for (mu, sigma), (t, se) in zip(CONFIGS, stats):
        p_value = math.erfc(abs(t) / math.sqrt(2))
        print(f"mu={mu} sigma={sigma}: t={t:.3f} (critical {crit:.3f}), p≈{p_value:.3g}, "
              f"SE={se:.2e}, MDE(90%)≈{(crit + 1.2816) * se:.2e}")
    assert all(_passes(stats)), stats
    # uncorrect restores the buffers bit for bit
    assert all(torch.equal(trained.state_dict()[k], v) for k, v in state.items())


def test_unfolded_buffers_fail(trained):
    assert _passes(_t_statistics(trained)) == [False, False]


def test_a_fold_without_its_mean_term_fails(trained, monkeypatch):
    real = C._dropmc.fold_batchnorm

    def wrong(rm, rv, p):
        return [(None if f is None else (1 - p) * v, r) for (f, r), v in zip(real(rm, rv, p), rv)]

    monkeypatch.setattr(C._dropmc, "fold_batchnorm", wrong)
    dt.correct(trained, sites=[("0", "1")])
    try:
        ok = _passes(_t_statistics(trained))
    finally:
        dt.uncorrect(trained)
    assert ok[1] is False, ok  # the μ ≠ 0 channels


def test_a_channel_without_a_fold_is_left_as_is_and_named():
    model = nn.Sequential(nn.Dropout(0.5), nn.BatchNorm1d(2)).eval()
    with torch.no_grad():
        model[1].running_mean.copy_(torch.tensor([10.0, 0.0]))
        model[1].running_var.copy_(torch.tensor([1.0, 1.0]))
    before = model[1].running_var.clone()
    dt.correct(model, sites=[("0", "1")])
    # channel 0: q·rv − p·rm² = 0.5 − 50 ≤ 0, no fold; channel 1: 0.5·1 − 0 = 0.5.
    assert model[1].running_var.tolist() == [1.0, 0.5]
    (reason,) = model._dropmc_correction.unfolded["1"]
    assert "channel 0" in reason
    dt.uncorrect(model)
    assert torch.equal(model[1].running_var, before)


def test_no_running_stats_is_refused():
    model = nn.Sequential(nn.Dropout(0.5), nn.BatchNorm1d(2, track_running_stats=False))
    with pytest.raises(ValueError, match="track_running_stats"):
        dt.correct(model, sites=[("0", "1")])


def test_batchnorm_sites_are_found():
    model = nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.5), nn.BatchNorm1d(4), nn.ReLU(), nn.Dropout(0.1))
    assert C.resolve_sites(model) == [("1", "2")]
