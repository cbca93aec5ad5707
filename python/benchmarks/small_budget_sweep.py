"""Correct dropouts checked at small budgets: how many claims fail.

    python python/benchmarks/small_budget_sweep.py            # 336 checks
    python python/benchmarks/small_budget_sweep.py --seeds 2  # fewer
    python python/benchmarks/small_budget_sweep.py --families attention,mask_shape

Below a claim's minimum budget its verdict comes from the distribution-free
bound (issue 44): a correct layer must never fail. Each check is one
`check_dropout` call on a correct layer: the tests' numpy `Correct`
(python/tests/implementations.py) and `torch.nn.Dropout` through
`dropmc.torch.check_dropout`, at p in {0.05, 0.1, 0.3, 0.5, 0.7, 0.9, 0.95}
and budgets {100, 1 000, 5 000, 20 000}, one torch thread. Prints the
number of checks, of claims per verdict, and every failing claim (there
should be none), then the wall time.

``--families`` adds (or selects) the attention and mask-shape paths: a
correct numpy attention dropout through `check_attention_dropout` at the
seed row, and a correct numpy channel-wise dropout through `check_dropout`
with `shared_axes=(2,)` on a (1, 3, 4) block.
"""

import argparse
import collections
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

import numpy as np  # noqa: E402

import dropmc  # noqa: E402
from implementations import Correct  # noqa: E402

RATES = (0.05, 0.1, 0.3, 0.5, 0.7, 0.9, 0.95)
BUDGETS = (100, 1_000, 5_000, 20_000)
#: A (1, C = 3, L = 4) block for the channel-wise (mask-shape) checks.
X_CL = np.array([[[1.0, 0.5, 2.0, 1.5], [-1.0, -0.5, -2.0, 0.0], [0.25, 3.0, 1.0, 0.5]]])


def attention_dropout(p, seed):
    """A correct numpy attention dropout: ``b = m a / q``, a fresh keep bit per entry."""
    rng = np.random.default_rng(seed)
    return lambda a: np.where(rng.random(a.shape) >= p, a / (1 - p), 0.0)


def channelwise(p, seed):
    """A correct numpy channel-wise dropout on (n, C, L): one keep bit per (n, C)."""
    rng = np.random.default_rng(seed)

    def forward(x, training):
        if not training:
            return x
        return np.where(rng.random(x.shape[:2] + (1,) * (x.ndim - 2)) >= p, x / (1 - p), 0.0)

    return forward


def other_families(families, p, samples, seed):
    """The attention and mask-shape checks of one (rate, budget, seed)."""
    if "attention" in families:
        yield "attention", dropmc.check_attention_dropout(attention_dropout(p, seed), p, samples=samples)
    if "mask_shape" in families:
        yield "mask_shape", dropmc.check_dropout(
            channelwise(p, seed), p, x=X_CL, shared_axes=(2,), backward=False, samples=samples
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=6, help="seeds per (rate, budget, layer)")
    parser.add_argument(
        "--families", default="dropout", help="comma-separated: dropout, attention, mask_shape"
    )
    args = parser.parse_args()
    families = set(args.families.split(","))
    import torch

    import dropmc.torch as dt

    torch.set_num_threads(1)
    counts = collections.Counter()
    fails = []
    checks = 0
    start = time.perf_counter()
    for seed in range(args.seeds):
        for p in RATES:
            for samples in BUDGETS:
                results = list(other_families(families, p, samples, 1000 * seed + samples))
                if "dropout" in families:
                    layer = Correct(p, seed=1000 * seed + samples)
                    results.append(("numpy", dropmc.check_dropout(
                        layer.forward, p, samples=samples, rng_state=layer.rng_state
                    )))
                    torch.manual_seed(7919 * seed + samples)
                    results.append(("torch", dt.check_dropout(torch.nn.Dropout(p), samples=samples)))
                for name, result in results:
                    checks += 1
                    for c in result.claims:
                        counts[c["verdict"]] += 1
                        if c["verdict"] == "fail":
                            fails.append((name, p, samples, seed, c["id"], c.get("note")))
    print(f"{checks} checks of correct dropouts; claims per verdict: {dict(counts)}")
    for f in fails:
        print("FAIL", *f)
    print(f"{len(fails)} failing claims; wall {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
