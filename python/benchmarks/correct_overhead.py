"""Per-forward cost of dropmc.torch.correct: a corrected model's eval
forward against the plain one's, under ``torch.no_grad()``, one torch
thread, batch 1, 4 layers, at d = 64 (4 heads, 64 tokens) and d = 768
(12 heads, 128 tokens). Random weights, no download.

Models:

  encoder         a post-LN nn.TransformerEncoder (feed-forward 4d,
                  dropout 0.1); plain runs torch's fused encoder-layer
                  kernel, which a corrected layer leaves (dropmc.correct.fast
                  runs its own eval forward)
  encoder-module  the same encoder with the fused path switched off
                  (torch.backends.mha.set_fastpath_enabled(False)) for
                  plain and corrected alike: the module path
  gpt2, llama, bert
                  Hugging Face GPT2Model (pre-LN, p 0.1 everywhere),
                  LlamaModel (attention dropout 0.1: attention sites only)
                  and BertModel (post-LN), eager attention, built by
                  python/tests/hf_models.py

Variants, each ``dropmc.torch.correct(model, inputs, inplace=False, **kw)``:

  network   the default (scope="network")
  site      scope="site"
  order2    order=2 (per-site, second order)
  linear    linear=True (per-site, with the linear-path sites)

A variant ``correct`` refuses is printed with its reason. Timing: the
variants and plain are interleaved round by round (each round times each
of them over the same number of calls, about 50 ms of plain calls), so a
drift of the machine's load falls on all alike. Per row: the medians over
the rounds, their ratio, and a 95 % paired bootstrap interval of that
ratio (the rounds resampled with replacement, plain and variant together,
2 000 times). The load average is printed before and after. ``--clock
thread`` times the timing thread's CPU time (``time.thread_time``), which
other processes' time slices do not enter (their cache pressure does).

    python python/benchmarks/correct_overhead.py [--rounds 21] [--only 64] [--models gpt2,llama]
        [--variants network,site] [--clock thread]
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import dropmc.torch as dt  # noqa: E402
from hf_models import build  # noqa: E402

SHAPES = {64: dict(heads=4, tokens=64), 768: dict(heads=12, tokens=128)}
LAYERS = 4
P = 0.1
MODELS = ("encoder", "encoder-module", "gpt2", "llama", "bert")
VARIANTS = {"network": {}, "site": dict(scope="site"), "order2": dict(order=2), "linear": dict(linear=True)}
BOOTSTRAP = 2000
CLOCK = time.perf_counter


def _encoder(d, heads):
    layer = torch.nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=P, batch_first=True)
    return torch.nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False).eval()


class _ModulePath(torch.nn.Module):
    """A model run with torch's fused encoder path switched off."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        torch.backends.mha.set_fastpath_enabled(False)
        try:
            return self.inner(x)
        finally:
            torch.backends.mha.set_fastpath_enabled(True)


def model_and_inputs(name, d):
    """``(model, inputs)`` in eval mode: ``inputs`` a tensor or a dict of keyword inputs."""
    s = SHAPES[d]
    torch.manual_seed(0)
    if name.startswith("encoder"):
        model, x = _encoder(d, s["heads"]), torch.randn(1, s["tokens"], d)
        return (_ModulePath(model) if name == "encoder-module" else model), x
    model = build(name, layers=LAYERS, d=d, heads=s["heads"], p=P, positions=256).eval()
    ids = torch.randint(4, 100, (1, s["tokens"]), generator=torch.Generator().manual_seed(1))
    return model, {"input_ids": ids}


def _call(model, inputs):
    return (lambda: model(**inputs)) if isinstance(inputs, dict) else (lambda: model(inputs))


def timed(calls, rounds):
    """``({name: [seconds per call, one a round]}, calls per timing)``, the
    names interleaved within each round."""
    with torch.no_grad():
        for f in calls.values():  # warm-up
            f()
        first = next(iter(calls.values()))
        t0 = CLOCK()
        first()
        reps = max(3, int(5e-2 / max(CLOCK() - t0, 1e-6)))
        times = {k: [] for k in calls}
        for _ in range(rounds):
            for k, f in calls.items():
                t0 = CLOCK()
                for _ in range(reps):
                    f()
                times[k].append((CLOCK() - t0) / reps)
    return times, reps


def ratio_interval(variant, plain, seed=0):
    """The ratio of medians and its 95 % paired bootstrap interval."""
    v, p = np.asarray(variant), np.asarray(plain)
    idx = np.random.default_rng(seed).integers(0, len(v), (BOOTSTRAP, len(v)))
    boot = np.median(v[idx], axis=1) / np.median(p[idx], axis=1)
    return float(np.median(v) / np.median(p)), np.percentile(boot, [2.5, 97.5])


def measure(name, d, rounds, variants=tuple(VARIANTS)):
    """Times plain and each of ``variants`` of one model; prints a row per variant."""
    model, inputs = model_and_inputs(name, d)
    calls, refused = {"plain": _call(model, inputs)}, {}
    target = model.inner if isinstance(model, _ModulePath) else model
    for variant in variants:
        kw = VARIANTS[variant]
        try:
            corrected = dt.correct(target, inputs, inplace=False, **kw).eval()
        except ValueError as e:
            refused[variant] = str(e).split(";")[0][:90]
            continue
        wrapped = _ModulePath(corrected) if isinstance(model, _ModulePath) else corrected
        calls[variant] = _call(wrapped, inputs)
    times, reps = timed(calls, rounds)
    plain = statistics.median(times["plain"])
    for variant in variants:
        head = f"| {name} | {d} | {variant} |"
        if variant in refused:
            print(f"{head} {plain * 1e3:.3f} | refused: {refused[variant]} | | |", flush=True)
            continue
        r, (lo, hi) = ratio_interval(times[variant], times["plain"])
        print(f"{head} {plain * 1e3:.3f} | {statistics.median(times[variant]) * 1e3:.3f} | **{r:.3f}** | "
              f"{lo:.3f}–{hi:.3f} |", flush=True)
    return reps


def _load():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--only", type=int, choices=sorted(SHAPES))
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated, of " + ", ".join(MODELS))
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of " + ", ".join(VARIANTS))
    ap.add_argument("--clock", choices=["wall", "thread"], default="wall")
    args = ap.parse_args()
    global CLOCK
    CLOCK = time.thread_time if args.clock == "thread" else time.perf_counter
    models, variants = [m for m in args.models.split(",") if m], [v for v in args.variants.split(",") if v]
    for option, got, known in (("--models", models, MODELS), ("--variants", variants, VARIANTS)):
        if not got or any(g not in known for g in got):
            ap.error(f"{option}: {got}: choose from {', '.join(known)}")
    torch.set_num_threads(1)
    print(f"clock {args.clock}, {args.rounds} rounds; load average {_load()}")
    print("| model | d | variant | plain (ms) | corrected (ms) | corrected / plain | 95 % interval |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for d in SHAPES:
        if args.only in (None, d):
            for name in models:
                measure(name, d, args.rounds, variants)
    print(f"load average at the end {_load()}")


if __name__ == "__main__":
    main()
