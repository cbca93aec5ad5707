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
