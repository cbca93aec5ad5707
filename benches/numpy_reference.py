#!/usr/bin/env python3
"""The obvious vectorised numpy implementation of the benchmark workloads W1-W3.

This is the baseline `dropmc bench` is compared against: masks as uniform
float64 draws compared with p (`rng.random(shape) >= p`, as the seed documents
do), processed in chunks of a few thousand masks, every statistic in float64.
It prints mask elements per second per workload, in the same format as
`dropmc bench` (text, or one JSON object with --json).

    python3 benches/numpy_reference.py [--workload W1|W2|W3|eval-ln|eval-rms|eval-attn]
                                       [--masks N] [--repeat R] [--json]
    python3 benches/numpy_reference.py --print-input x|a

With --repeat R each workload runs R times and the median run is reported
(default 1: a run lasts seconds, so one is stable; `dropmc bench`, whose
runs last tens of milliseconds, adds an untimed warm-up and takes 3).

The eval-* workloads compute, per draw, exactly what `dropmc eval ln|rms|attn`
computes on W1's input with the commands' defaults (gamma = 1, beta = 0,
eps = 0): the same statistics, each with its sum and sum of squares for a
standard error, including the second independent mask per draw that `eval ln`
uses for Var[M] (and `eval attn` for Var[R], Var[o]). `--print-input x` prints
W1's 512 values of x, comma-separated, as `eval ln --x` and `eval rms --x`
take them; `--print-input a` prints the attention row a = softmax(x) that
`eval attn --a` takes (with `--values` x). They are not part of the default
run (no --workload runs W1-W3 only).
"""

import argparse
import json
import sys
import time

import numpy as np

CHUNK = 4096  # masks per vectorised step
EPS = 1e-5    # LayerNorm epsilon
X_SEED = 20261130  # x is drawn once per workload from this seed


def w1(masks, rng):
    """E[LN(z)] per channel and E[V]: d = 512, p = 0.1, x ~ N(0.7, 1.3^2)."""
    d, p = 512, 0.1
    q = 1.0 - p
    x = np.random.default_rng(X_SEED).normal(0.7, 1.3, d)
    sum_ln = np.zeros(d)
    sum_ln2 = np.zeros(d)
    sum_v = 0.0
    sum_v2 = 0.0
    done = 0
    while done < masks:
        b = min(CHUNK, masks - done)
        m = rng.random((b, d)) >= p
        z = m * x / q
        mean = z.mean(axis=1)
        var = z.var(axis=1)
        ln = (z - mean[:, None]) / np.sqrt(var + EPS)[:, None]
        sum_ln += ln.sum(axis=0)
        sum_ln2 += (ln * ln).sum(axis=0)
        sum_v += var.sum()
        sum_v2 += (var * var).sum()
        done += b
    return d, {"E[V]": sum_v / masks, "E[LN_0]": sum_ln[0] / masks}


def w2(masks, rng):
    """E[M], E[V], E[R^2]: d = 4096, p = 0.5."""
    d, p = 4096, 0.5
    q = 1.0 - p
    x = np.random.default_rng(X_SEED).normal(0.7, 1.3, d)
    sums = np.zeros(6)
    done = 0
    while done < masks:
        b = min(CHUNK // 4, masks - done)
        m = rng.random((b, d)) >= p
        z = m * x / q
        mean = z.mean(axis=1)
        r2 = (z * z).mean(axis=1)
        var = r2 - mean * mean
        for i, t in enumerate((mean, var, r2)):
            sums[2 * i] += t.sum()
            sums[2 * i + 1] += (t * t).sum()
        done += b
    return d, {"E[M]": sums[0] / masks, "E[V]": sums[2] / masks, "E[R2]": sums[4] / masks}


def w3(masks, rng):
    """Attention rows: T = 128 keys, p = 0.1; E[R], Var R, E[o]."""
    t, p = 128, 0.1
    q = 1.0 - p
    g = np.random.default_rng(X_SEED)
    logits = g.normal(0.0, 1.0, t)
    a = np.exp(logits - logits.max())
    a /= a.sum()
    v = g.normal(0.0, 1.0, t)
    s_r = s_r2 = s_o = s_o2 = 0.0
    done = 0
    while done < masks:
        b = min(CHUNK, masks - done)
        m = rng.random((b, t)) >= p
        w = m * a / q
        r = w.sum(axis=1)
        o = w @ v
        s_r += r.sum()
        s_r2 += (r * r).sum()
        s_o += o.sum()
        s_o2 += (o * o).sum()
        done += b
    mean_r = s_r / masks
    return t, {"E[R]": mean_r, "Var R": (s_r2 / masks - mean_r ** 2) * masks / (masks - 1), "E[o]": s_o / masks}


def w1_x():
    """W1's input: d = 512 values x ~ N(0.7, 1.3^2) from X_SEED."""
    return np.random.default_rng(X_SEED).normal(0.7, 1.3, 512)


def attention_row(x):
    """The attention row of the eval-attn workload: softmax(x)."""
    e = np.exp(x - x.max())
    return e / e.sum()


def eval_ln(masks, rng):
    """`dropmc eval ln --x <W1> --p 0.1`: per draw [M, (M - M')^2/2, V, t_c, LN(z)],
    M' from a second independent mask; t_c = sum_k LN(z)_k w_k with
    w = LN(x) / |LN(x)|^2 (the least-squares shrink factor; beta = 0)."""
    p, x = 0.1, w1_x()
    d, q = x.size, 1.0 - p
    u = (x - x.mean()) / np.sqrt(x.var())
    w = u / (u * u).sum()
    sums = np.zeros(4 + d)
    squares = np.zeros(4 + d)
    done = 0
    while done < masks:
        b = min(CHUNK, masks - done)
        z = (rng.random((b, d)) >= p) * x / q
        mean = z.mean(axis=1)
        var = z.var(axis=1)
        # eps = 0: a constant z (all dropped) gives LN = beta = 0.
        inv = np.where(var > 0.0, 1.0 / np.sqrt(np.where(var > 0.0, var, 1.0)), 0.0)
        ln = (z - mean[:, None]) * inv[:, None]
        t_c = ln @ w
        z2 = (rng.random((b, d)) >= p) * x / q
        half_sq = 0.5 * (mean - z2.mean(axis=1)) ** 2
        stats = np.concatenate([np.stack([mean, half_sq, var, t_c], axis=1), ln], axis=1)
        sums += stats.sum(axis=0)
        squares += (stats * stats).sum(axis=0)
        done += b
    m = sums / masks
    return d, {"E[M]": m[0], "Var[M]": m[1], "E[V]": m[2], "c": m[3], "E[LN_0]": m[4]}


def eval_rms(masks, rng):
    """`dropmc eval rms --x <W1> --p 0.1`: per draw [R^2, RMSNorm(z)]."""
    p, x = 0.1, w1_x()
    d, q = x.size, 1.0 - p
    sums = np.zeros(1 + d)
    squares = np.zeros(1 + d)
    done = 0
    while done < masks:
        b = min(CHUNK, masks - done)
        z = (rng.random((b, d)) >= p) * x / q
        r2 = (z * z).mean(axis=1)
        inv = np.where(r2 > 0.0, 1.0 / np.sqrt(np.where(r2 > 0.0, r2, 1.0)), 0.0)
        stats = np.concatenate([r2[:, None], z * inv[:, None]], axis=1)
        sums += stats.sum(axis=0)
        squares += (stats * stats).sum(axis=0)
        done += b
    m = sums / masks
    return d, {"E[R^2]": m[0], "E[RMS_0]": m[1]}


def eval_attn(masks, rng):
    """`dropmc eval attn --a softmax(<W1>) --values <W1> --p 0.1`: per draw
    [b, R, (R - R')^2/2, o, (o - o')^2/2], R', o' from a second mask."""
    p, v = 0.1, w1_x()
    a = attention_row(v)
    d, q = a.size, 1.0 - p
    sums = np.zeros(d + 4)
    squares = np.zeros(d + 4)
    done = 0
    while done < masks:
        n = min(CHUNK, masks - done)
        b1 = (rng.random((n, d)) >= p) * a / q
        b2 = (rng.random((n, d)) >= p) * a / q
        r1, r2 = b1.sum(axis=1), b2.sum(axis=1)
        o1, o2 = b1 @ v, b2 @ v
        scalars = np.stack([r1, 0.5 * (r1 - r2) ** 2, o1, 0.5 * (o1 - o2) ** 2], axis=1)
        stats = np.concatenate([b1, scalars], axis=1)
        sums += stats.sum(axis=0)
        squares += (stats * stats).sum(axis=0)
        done += n
    m = sums / masks
    return d, {"E[R]": m[d], "Var[R]": m[d + 1], "E[o]": m[d + 2], "Var[o]": m[d + 3]}


WORKLOADS = {"W1": (w1, 1_000_000), "W2": (w2, 1_000_000), "W3": (w3, 1_000_000),
             "eval-ln": (eval_ln, 1_000_000), "eval-rms": (eval_rms, 1_000_000),
             "eval-attn": (eval_attn, 1_000_000)}
DEFAULT_RUN = ["W1", "W2", "W3"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", choices=sorted(WORKLOADS))
    ap.add_argument("--masks", type=int, help="masks (rows) per workload; default 10^6")
    ap.add_argument("--repeat", type=int, default=1, help="timed runs per workload (median reported)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--print-input", choices=["x", "a"],
                    help="print W1's x (or the row softmax(x)) comma-separated and exit")
    args = ap.parse_args()
    if args.print_input:
        x = w1_x()
        values = x if args.print_input == "x" else attention_row(x)
        print(",".join(repr(float(v)) for v in values))
        return 0
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    names = [args.workload] if args.workload else DEFAULT_RUN
    results = []
    for name in names:
        fn, default = WORKLOADS[name]
        masks = args.masks or default
        runs = []
        for _ in range(args.repeat):
            rng = np.random.default_rng(1)
            start = time.perf_counter()
            cpu_start = time.process_time()
            d, est = fn(masks, rng)
            runs.append((time.perf_counter() - start, time.process_time() - cpu_start, d, est))
        secs, cpu, d, est = sorted(runs, key=lambda r: r[0])[len(runs) // 2]
        results.append({
            "workload": name, "path": "numpy", "masks": masks, "elements": masks * d,
            "seconds": secs, "runs": [r[0] for r in runs],
            "elements_per_second": masks * d / secs, "cpu_seconds": cpu,
            "estimates": est,
        })
    if args.json:
        print(json.dumps({"numpy": np.__version__, "results": results}, indent=2))
    else:
        for r in results:
            est = ", ".join(f"{k} = {v:.6g}" for k, v in r["estimates"].items())
            print(f"{r['workload']}  {r['path']:9}  {r['masks']:>10} masks  {r['seconds']:8.3f} s  "
                  f"{r['elements_per_second']:.3e} mask elements/s  cpu {r['cpu_seconds']:.2f} s  ({est})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
