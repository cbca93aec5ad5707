"""Wall time of dropmc.torch.audit on BERT-base (issues 32 item 7 and 43).

12 layers, d = 768, 12 heads, intermediate 3072, random weights from a config
(transformers needed, no download), attention "eager" or "sdpa". Times, in
one process and one torch thread, one eval forward of the model on the same
inputs (the median of 3, after a warm-up) and the whole audit (discovery +
capture + every site), and prints their ratio ("eval forwards"), the number of
first-order gaps resolved, and the audit table.

    python python/benchmarks/audit_bert.py [eager|sdpa] [samples] [batch] [length] [figure.png]
        [--tokens N|all] [--compare]

Defaults: eager, the audit's default samples and tokens, 1 × 128 tokens.
``--compare`` also times, in the same process, the audit of every token
(``tokens="all"``, the cost before tokens were sampled) and prints both
ratios. Issue 43's target: 4 × 256 in at most 15 eval forwards, at least 7
of 24 first-order gaps resolved. The forward runs on one torch thread while
the Rust sampler uses every core: compare ratios from one run on a quiet
machine (the load average is printed).
"""

import os
import sys
import time

import torch
import transformers as T

import dropmc
import dropmc.torch

torch.set_num_threads(1)
argv = sys.argv[1:]
tokens_arg = str(dropmc.audit.DEFAULT_TOKENS)
if "--tokens" in argv:
    at = argv.index("--tokens")
    tokens_arg = argv[at + 1]
    del argv[at:at + 2]
tokens = tokens_arg if tokens_arg == "all" else int(tokens_arg)
flags = [a for a in argv if a.startswith("--")]
values = [a for a in argv if not a.startswith("--")]
arg = lambda i, default: values[i] if len(values) > i else default  # noqa: E731
impl = arg(0, "eager")
samples = int(arg(1, dropmc.audit.DEFAULT_SAMPLES))
batch, length = int(arg(2, 1)), int(arg(3, 128))
torch.manual_seed(0)
config = T.BertConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                      intermediate_size=3072, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
config._attn_implementation = impl
model = T.BertModel(config).eval()
ids = torch.randint(1000, 20000, (batch, length), generator=torch.Generator().manual_seed(1))
kw = {"input_ids": ids, "attention_mask": torch.ones(batch, length, dtype=torch.long)}
with torch.no_grad():
    model(**kw)
    times = []
    for _ in range(3):
        t = time.perf_counter()
        model(**kw)
        times.append(time.perf_counter() - t)
forward = sorted(times)[1]


def timed(tokens):
    t0, c0 = time.perf_counter(), time.process_time()
    audit = dropmc.torch.audit(model, kw, samples=samples, seed=1, tokens=tokens)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    resolved = sum(bool(s["first_order"]["resolved"]) for s in audit.sites)
    print(f"tokens={tokens}: whole audit {wall:.2f} s wall ({cpu:.2f} s CPU; the Rust engine's threads count "
          f"in CPU) = {wall / forward:.1f} eval forwards; first-order gaps resolved {resolved} of "
          f"{len(audit.sites)}; load average {os.getloadavg()[0]:.1f}", flush=True)
    return audit


audit = timed(tokens)
print(audit)
if len(values) > 4:
    audit.plot(values[4])
if "--compare" in flags and tokens != "all":
    timed("all")
print(f"attention={impl} samples={samples} tokens={batch}x{length}: one eval forward {forward:.3f} s "
      f"({len(audit.attention_sites)} attention sites, {len(audit.other_sites)} listed without numbers)")
