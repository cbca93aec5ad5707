"""Issue 34's low-precision and caller's-batch cases, two seeds each.

    python python/benchmarks/low_precision_cases.py [--samples N]

Prints one line per case and seed: the verdict, the failing claims and the
wall time. Not a timed test (the tests are python/tests/test_half_precision.py).
"""

import argparse
import time

import numpy as np
import ml_dtypes

import dropmc

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)


def rounded_once(dtype, p, seed):
    """Kept values x/q computed in float64 and rounded once to dtype."""
    rng = np.random.default_rng(seed)
    q = 1.0 - p

    def forward(x, training):
        if not training:
            return x
        keep = rng.random(x.shape) >= p
        return np.where(keep, x.astype(np.float64) / q, 0.0).astype(dtype)

    return forward


def reciprocal(dtype, p, seed):
    """Survivors x * fl(1/q), the product rounded to dtype (PyTorch's rule)."""
    rng = np.random.default_rng(seed)
    s = np.asarray(1.0 / (1.0 - p)).astype(dtype)

    def forward(x, training):
        if not training:
            return x
        return np.where(rng.random(x.shape) >= p, x * s, np.zeros((), dtype)).astype(dtype)

    return forward


def float32_with_bf16_scale(p, seed):
    rng = np.random.default_rng(seed)
    s = np.float32(float(np.asarray(1.0 / (1.0 - p)).astype(BF16)))

    def forward(x, training):
        if not training:
            return x
        return np.where(rng.random(x.shape) >= p, x * s, np.float32(0)).astype(np.float32)

    return forward


def bf16_keep_test(p, seed):
    """The keep test on a bfloat16 uniform: 8 random bits (bfloat16's
    significand), u = k/256, kept when u >= p: at p = 0.1 the keep
    probability is 230/256 = 0.8984, not 0.9."""
    rng = np.random.default_rng(seed)
    q = 1.0 - p

    def forward(x, training):
        if not training:
            return x
        u = rng.integers(0, 256, size=x.shape) / 256.0
        keep = u >= p
        return np.where(keep, x.astype(np.float64) / q, 0.0).astype(BF16)

    return forward


def truncating(p, seed):
    """x/q in float32, cast to bfloat16 by dropping the low 16 bits."""
    rng = np.random.default_rng(seed)
    q = np.float32(1.0 - p)

    def forward(x, training):
        if not training:
            return x
        y = np.where(rng.random(x.shape) >= p, x.astype(np.float32) / q, np.float32(0)).astype(np.float32)
        bits = y.view(np.uint32) & np.uint32(0xFFFF0000)
        return bits.view(np.float32).astype(BF16)

    return forward


def numel_over_kept_channels(p, seed):
    """A channel dropout scaling survivors by numel/kept of the call's own mask."""
    rng = np.random.default_rng(seed)

    def forward(x, training):
        if not training:
            return x
        n, c = x.shape[0], x.shape[1]
        mask = rng.random((n, c) + (1,) * (x.ndim - 2)) >= p
        kept = mask.sum()
        scale = mask.size / kept if kept else 0.0
        return (x * mask * scale).astype(x.dtype)

    return forward


def torch_case(dtype, p, seed, **kw):
    import torch
    import dropmc.torch

    torch.manual_seed(seed)
    return lambda **k: dropmc.torch.check_dropout(torch.nn.Dropout(p), p, dtype=dtype, **k, **kw)


def cases():
    for dt, name in ((BF16, "bfloat16"), (F16, "float16")):
        for p in (0.1, 0.2, 0.3):
            yield f"rounded once {name} p={p}", lambda s, dt=dt, p=p: (rounded_once(dt, p, s), p, dict(dtype=dt, backward=False)), "pass"
    yield "float32 layer, bfloat16 scale p=0.1", lambda s: (float32_with_bf16_scale(0.1, s), 0.1, dict(dtype=np.float32, backward=False)), "fail"
    yield "bfloat16 keep test p=0.1", lambda s: (bf16_keep_test(0.1, s), 0.1, dict(dtype=BF16, backward=False)), "fail"
    yield "truncating cast p=0.1", lambda s: (truncating(0.1, s), 0.1, dict(dtype=BF16, backward=False)), "fail"
    yield "numel/kept channel dropout p=0.3", lambda s: (numel_over_kept_channels(0.3, s), 0.3, dict(x=np.ones((2, 3)), shared_axes=(2,), backward=False)), "fail"
    yield "numel/kept elementwise p=0.3", lambda s: (numel_over_kept_channels(0.3, s), 0.3, dict(backward=False)), "fail"
    yield "torch-like bf16 x*fl(1/q) strict p=0.1", lambda s: (reciprocal(BF16, 0.1, s), 0.1, dict(dtype=BF16, backward=False, rounding="once")), "fail"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=None)
    ap.add_argument("--torch", action="store_true")
    ap.add_argument("--only", default=None)
    args = ap.parse_args()
    extra = {} if args.samples is None else {"samples": args.samples}
    for name, make, want in cases():
        for seed in (1, 2):
            fwd, p, kw = make(seed)
            if "shared_axes" in kw:
                kw.pop("backward")
            if args.only and args.only not in name:
                continue
            t = time.perf_counter()
            r = dropmc.check_dropout(fwd, p, seed=seed, **kw, **extra)
            dt = time.perf_counter() - t
            fails = [f"{c['id']}(z={c.get('z') or 0:.1f})" for c in r.failed()]
            print(f"{name:40s} seed {seed}: {'pass' if r.passed else 'FAIL'} (want {want}) {dt:5.1f}s {' '.join(fails)} | {' / '.join(r.likely_causes)[:160]}", flush=True)
    if args.torch:
        import torch
        torch.set_num_threads(1)
        for dtype, p, kw, want in (("bfloat16", 0.2, {}, "pass"), ("bfloat16", 0.1, {}, "pass+warning"),
                                   (np.float16, 0.1, {}, "pass"), (np.float32, 0.1, {}, "pass")):
            for seed in (1, 2):
                t = time.perf_counter()
                r = torch_case(dtype, p, seed, **kw)(seed=seed, **extra)
                dt = time.perf_counter() - t
                fails = [f"{c['id']}(z={c.get('z') or 0:.1f})" for c in r.failed()]
                print(f"torch {np.dtype(dtype).name if dtype != 'bfloat16' else dtype} p={p:<4} seed {seed}: {'pass' if r.passed else 'FAIL'} (want {want}) {dt:5.1f}s {' '.join(fails)} | {' / '.join(r.likely_causes)[:200]}", flush=True)


if __name__ == "__main__":
    main()
