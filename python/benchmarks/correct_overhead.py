"""Per-forward cost of dropmc.torch.correct in eval mode under
torch.no_grad(), one torch thread, batch 1, at d = 64 and d = 768:

  encoder  a post-LN nn.TransformerEncoder (4 and 12 heads,
           feed-forward 4d, 4 layers; 8 sites), 64 / 128 tokens
  bert     a Hugging Face BertModel of the same shape (random weights from
           a config; 8 sites), which has no fused eval path
  llama    a Hugging Face LlamaModel of the same shape, attention dropout 0.1
           (its sites are attention → o_proj → RMSNorm linear-path sites)

Variants, interleaved round by round so that machine load hits them alike:

  plain      the uncorrected model (for the encoder: torch's fused
             encoder-layer path)
  module     the encoder with the fused path switched off
             (torch.backends.mha.set_fastpath_enabled(False)): the module
             path, which a hooked model must take (the corrected encoder
             runs its own eval forward instead, dropmc.correct.fast)
  corrected  dropmc.torch.correct(model, x, scope="site"): the correction
  network    dropmc.torch.correct(model, x, scope="network"): every norm the
             noise reaches, for the noise of every dropout upstream

Prints the median time of each and the ratios to ``plain`` (and, for
the encoder, of ``corrected`` to ``module``). ``--clock wall`` (the
default) times with ``time.perf_counter``; ``--clock thread`` with
``time.thread_time``, the CPU time of the timing thread alone, which other
processes on a shared machine disturb far less (it still counts their
cache pressure, not their time slices).

    python python/benchmarks/correct_overhead.py [--rounds 15] [--only 64] [--clock thread]
"""

import argparse
import os
import statistics
import time

import torch

import dropmc.torch as dt

SHAPES = {64: dict(heads=4, tokens=64), 768: dict(heads=12, tokens=128)}
LAYERS = 4


def _encoder(d, heads):
    layer = torch.nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.1, batch_first=True)
    return torch.nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False).eval()


def _llama(d, heads):
    import transformers as T

    c = T.LlamaConfig(hidden_size=d, intermediate_size=4 * d, num_hidden_layers=LAYERS, num_attention_heads=heads,
                      num_key_value_heads=heads, vocab_size=100, max_position_embeddings=256, attention_dropout=0.1)
    c._attn_implementation = "eager"
    return T.LlamaModel(c).eval()


def _bert(d, heads):
    import transformers as T

    c = T.BertConfig(hidden_size=d, num_hidden_layers=LAYERS, num_attention_heads=heads,
                     intermediate_size=4 * d, vocab_size=100, max_position_embeddings=256,
                     hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    c._attn_implementation = "eager"
    return T.BertModel(c).eval()


CLOCK = time.perf_counter


def _timed(variants, rounds):
    """Interleaved medians; each timing repeats a call 5 times or more (~50 ms)."""
    with torch.no_grad():
        for f in variants.values():  # warm-up
            f()
        t0 = CLOCK()
        next(iter(variants.values()))()
        reps = max(5, int(5e-2 / max(CLOCK() - t0, 1e-6)))
        times = {k: [] for k in variants}
        for _ in range(rounds):
            for k, f in variants.items():
                t0 = CLOCK()
                for _ in range(reps):
                    f()
                times[k].append((CLOCK() - t0) / reps)
    return {k: statistics.median(ts) for k, ts in times.items()}, reps


def measure(d, rounds):
    s = SHAPES[d]
    torch.manual_seed(0)
    enc, x = _encoder(d, s["heads"]), torch.randn(1, s["tokens"], d)
    enc_c = dt.correct(enc, x, inplace=False, scope="site").eval()
    enc_n = dt.correct(enc, x, inplace=False, scope="network").eval()

    def module():
        torch.backends.mha.set_fastpath_enabled(False)
        try:
            return enc(x)
        finally:
            torch.backends.mha.set_fastpath_enabled(True)

    med, reps = _timed({"plain": lambda: enc(x), "module": module, "corrected": lambda: enc_c(x),
                        "network": lambda: enc_n(x)}, rounds)
    print(f"d = {d}, encoder ({LAYERS} layers, 1 x {s['tokens']} tokens, "
          f"{len(enc_c._dropmc_correction.sites)} sites, {rounds} rounds of {reps} calls): "
          + "  ".join(f"{k} {m * 1e3:.3f} ms" for k, m in med.items())
          + f"  | corrected/plain {med['corrected'] / med['plain']:.3f}"
          f"  corrected/module {med['corrected'] / med['module']:.3f}"
          f"  network/plain {med['network'] / med['plain']:.3f}  network/module {med['network'] / med['module']:.3f}")
    try:
        bert = _bert(d, s["heads"])
    except ImportError:
        return
    ids = {"input_ids": torch.randint(4, 100, (1, s["tokens"]), generator=torch.Generator().manual_seed(1))}
    bert_c = dt.correct(bert, ids, inplace=False, scope="site").eval()
    bert_n = dt.correct(bert, ids, inplace=False, scope="network").eval()
    med, reps = _timed({"plain": lambda: bert(**ids), "corrected": lambda: bert_c(**ids),
                        "network": lambda: bert_n(**ids)}, rounds)
    print(f"d = {d}, bert ({LAYERS} layers, 1 x {s['tokens']} tokens, "
          f"{len(bert_c._dropmc_correction.sites)} sites, {rounds} rounds of {reps} calls): "
          + "  ".join(f"{k} {m * 1e3:.3f} ms" for k, m in med.items())
          + f"  | corrected/plain {med['corrected'] / med['plain']:.3f}"
          f"  network/plain {med['network'] / med['plain']:.3f}")
    llama = _llama(d, s["heads"])
    llama_c = dt.correct(llama, ids, inplace=False, scope="site").eval()
    llama_n = dt.correct(llama, ids, inplace=False, scope="network").eval()
    med, reps = _timed({"plain": lambda: llama(**ids), "corrected": lambda: llama_c(**ids),
                        "network": lambda: llama_n(**ids)}, rounds)
    print(f"d = {d}, llama ({LAYERS} layers, 1 x {s['tokens']} tokens, "
          f"{len(llama_c._dropmc_correction.linear_sites)} linear-path sites, {rounds} rounds of {reps} calls): "
          + "  ".join(f"{k} {m * 1e3:.3f} ms" for k, m in med.items())
          + f"  | corrected/plain {med['corrected'] / med['plain']:.3f}"
          f"  network/plain {med['network'] / med['plain']:.3f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--only", type=int, choices=sorted(SHAPES))
    ap.add_argument("--clock", choices=["wall", "thread"], default="wall")
    args = ap.parse_args()
    global CLOCK
    CLOCK = time.thread_time if args.clock == "thread" else time.perf_counter
    print(f"clock: {args.clock}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    torch.set_num_threads(1)
    for d in SHAPES:
        if args.only in (None, d):
            measure(d, args.rounds)
    print(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
