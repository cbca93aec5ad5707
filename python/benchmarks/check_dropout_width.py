"""Wall and CPU time of a whole `check_dropout` call at model widths.

    python python/benchmarks/check_dropout_width.py            # d = 16, 768, 4096
    python python/benchmarks/check_dropout_width.py --d 768 --forward torch

Each run: a correct dropout at p = 0.1 on x of d normal values (seed 0), the
default budgets, one torch thread. `numpy` is the tests' `Correct` layer
(python/tests/implementations.py), `torch` is `dropmc.torch.check_dropout` on
`torch.nn.Dropout(0.1)`. Prints one line per run: the wall time, the CPU time
of the process (on a shared machine the wall time includes waiting for a
core), the rows the forward produced and the verdict counts. The targets
(issue 33): d = 768 under 20 s, d = 4096 under 60 s.
"""

import argparse
import collections
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

import dropmc  # noqa: E402
from implementations import Correct  # noqa: E402

P = 0.1


def run(forward_kind, d):
    x = np.random.default_rng(0).normal(0.3, 1.0, d)
    wall, cpu = time.perf_counter(), time.process_time()
    if forward_kind == "torch":
        import torch

        from dropmc import torch as dropmc_torch

        torch.set_num_threads(1)
        torch.manual_seed(0)
        result = dropmc_torch.check_dropout(torch.nn.Dropout(P), P, x=x)
    else:
        layer = Correct(P, seed=0)
        result = dropmc.check_dropout(
            layer.forward, P, x=x, rng_state=layer.rng_state, backward=layer.backward
        )
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    verdicts = collections.Counter(c["verdict"] for c in result.claims)
    rows = result.to_dict().get("rows")
    print(
        f"{forward_kind:5s} d = {d:5d}: wall {wall:7.1f} s, cpu {cpu:7.1f} s, rows {rows}, "
        f"passed {result.passed}, {dict(verdicts)}",
        flush=True,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d", type=int, action="append", help="width (repeatable)")
    parser.add_argument("--forward", choices=["numpy", "torch"], action="append")
    args = parser.parse_args()
    for d in args.d or [16, 768, 4096]:
        for kind in args.forward or ["numpy", "torch"]:
            run(kind, d)


if __name__ == "__main__":
    main()
