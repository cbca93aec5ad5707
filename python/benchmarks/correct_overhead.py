"""Per-forward cost of dropmc.torch.correct: a BERT-base-sized
nn.TransformerEncoder (d = 768, 12 heads, feed-forward 3072, 12 post-LN
layers, 24 corrected sites) in eval mode under torch.no_grad(), one torch
thread, batch 1 × 128 tokens. Three variants, interleaved round by round
so that machine load hits them alike:

  plain      the uncorrected model (torch's fused encoder-layer path)
  module     the uncorrected model with the fused path switched off
             (torch.backends.mha.set_fastpath_enabled(False)): the cost of
             leaving the fused path alone
  corrected  dropmc.torch.correct(model): module path + the correction

Prints the median wall time of each and the ratios to ``plain``.

    python python/benchmarks/correct_overhead.py [--rounds 7] [--tokens 128]
"""

import argparse
import statistics
import time

import torch

import dropmc.torch as dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--tokens", type=int, default=128)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(768, 12, 3072, dropout=0.1, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 12, enable_nested_tensor=False).eval()
    x = torch.randn(1, args.tokens, 768)
    corrected = dt.correct(model, inplace=False).eval()

    def plain():
        return model(x)

    def module():
        torch.backends.mha.set_fastpath_enabled(False)
        try:
            return model(x)
        finally:
            torch.backends.mha.set_fastpath_enabled(True)

    def fixed():
        return corrected(x)

    variants = {"plain": plain, "module": module, "corrected": fixed}
    times = {k: [] for k in variants}
    with torch.no_grad():
        for f in variants.values():  # warm-up
            f()
        for _ in range(args.rounds):
            for k, f in variants.items():
                t0 = time.perf_counter()
                f()
                times[k].append(time.perf_counter() - t0)
    base = statistics.median(times["plain"])
    print(f"BERT-base-sized nn.TransformerEncoder, 1 x {args.tokens} tokens, 1 thread, "
          f"{args.rounds} interleaved rounds, {len(corrected._dropmc_correction.sites)} corrected sites")
    for k, ts in times.items():
        m = statistics.median(ts)
        print(f"{k:10s} median {m * 1e3:8.1f} ms  (min {min(ts) * 1e3:8.1f})  ratio to plain {m / base:.3f}")


if __name__ == "__main__":
    main()
