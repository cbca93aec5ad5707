"""Correct dropouts checked at small budgets: how many claims fail.

    python python/benchmarks/small_budget_sweep.py            # 336 checks
    python python/benchmarks/small_budget_sweep.py --seeds 2  # fewer

Below a claim's minimum budget its verdict comes from the distribution-free
bound (issue 44): a correct layer must never fail. Each check is one
`check_dropout` call on a correct layer: the tests' numpy `Correct`
(python/tests/implementations.py) and `torch.nn.Dropout` through
`dropmc.torch.check_dropout`, at p in {0.05, 0.1, 0.3, 0.5, 0.7, 0.9, 0.95}
and budgets {100, 1 000, 5 000, 20 000}, one torch thread. Prints the
number of checks, of claims per verdict, and every failing claim (there
should be none), then the wall time.
"""

import argparse
import collections
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

import dropmc  # noqa: E402
from implementations import Correct  # noqa: E402

RATES = (0.05, 0.1, 0.3, 0.5, 0.7, 0.9, 0.95)
BUDGETS = (100, 1_000, 5_000, 20_000)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=6, help="seeds per (rate, budget, layer)")
    args = parser.parse_args()
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
                layer = Correct(p, seed=1000 * seed + samples)
                numpy_result = dropmc.check_dropout(
                    layer.forward, p, samples=samples, rng_state=layer.rng_state
                )
                torch.manual_seed(7919 * seed + samples)
                torch_result = dt.check_dropout(torch.nn.Dropout(p), samples=samples)
                for name, result in (("numpy", numpy_result), ("torch", torch_result)):
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
