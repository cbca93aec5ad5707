"""The statistics the model-vs-audit tests share.

Each test compares an audited truth with the model's own train-mode Monte
Carlo over many components (tokens); one assertion covers them all, so the
suite's per-assertion level (the two-sided tail of ``dropmc.critical_z()``)
is split over the components (Bonferroni)."""

import math
from statistics import NormalDist

import numpy as np

import dropmc


def bonferroni_z(k: int) -> float:
    """|z| one of k components must exceed for the assertion to fail."""
    alpha = 2 * NormalDist().cdf(-dropmc.critical_z())
    return NormalDist().inv_cdf(1 - alpha / (2 * k))


def projected_z(truth, se, runs, seed: int = 7):
    """Per token, z of the Monte Carlo mean against the truth along one
    random direction ``a`` of the channels: ``runs`` is copies × tokens × d,
    ``truth`` and its standard error ``se`` tokens × d. The truth's error
    along ``a`` is bounded by ``se @ |a|`` (conservative: it assumes the
    channels' errors align); the Monte Carlo's from the copies' spread."""
    a = np.random.default_rng(seed).standard_normal(truth.shape[1])
    s = runs @ a
    mc, mc_se = s.mean(0), s.std(0, ddof=1) / math.sqrt(s.shape[0])
    return (mc - truth @ a) / np.sqrt(mc_se ** 2 + (se @ np.abs(a)) ** 2)


class _StopAtNorm(Exception):
    """Ends a Monte Carlo forward at the norm (``stop_at_norm``)."""


def train_mode_outputs(model, norm, inputs, runs, seed=8, train=True, channel_axis=-1, stop_at_norm=False):
    """The model's own Monte Carlo at one norm: ``norm``'s output (a
    submodule name) on one forward of ``model`` on ``runs`` copies of
    ``inputs`` (a tensor, or a dict of keyword tensors; repeated along the
    batch axis, so each copy draws its own masks), the draws seeded by
    ``seed``, under no_grad. ``train``: the model is put in train mode
    first (False: in the modes the caller set, e.g. one dropout alone);
    it is left in eval mode. Returns runs × tokens × d, float64 numpy, the
    channels read on ``channel_axis`` (a channels-first norm's: 1).
    ``stop_at_norm``: the forward ends at the norm's output (the draws up to
    it are the same, so are the outputs; a large model's rest is skipped)."""
    import torch

    def repeat(v):
        return v.repeat(runs, *([1] * (v.dim() - 1)))

    got = []

    def record(module, args, out):
        got.append(out.detach())
        if stop_at_norm:
            raise _StopAtNorm

    handle = model.get_submodule(norm).register_forward_hook(record)
    if train:
        model.train()
    torch.manual_seed(seed)
    try:
        with torch.no_grad():
            if isinstance(inputs, dict):
                model(**{k: repeat(v) for k, v in inputs.items()})
            else:
                model(repeat(inputs))
    except _StopAtNorm:
        pass
    finally:
        handle.remove()
        model.eval()
    out = got[0].movedim(channel_axis, -1).to(torch.float64)
    return out.reshape(runs, -1, out.shape[-1]).numpy()


def mean_and_se(runs):
    """The Monte Carlo mean over the first axis of ``runs`` and its standard error."""
    return runs.mean(0), runs.std(0, ddof=1) / math.sqrt(runs.shape[0])
