"""Wall time of dropmc.torch.audit on BERT-base (issues 32 item 7 and 43).

12 layers, d = 768, 12 heads, intermediate 3072, random weights from a config
(transformers needed, no download), attention "eager" or "sdpa". Times, in
one process and one torch thread, one eval forward of the model on the same
inputs (the median of 3, after a warm-up) and the whole audit (discovery +
capture + every site), and prints their ratio ("eval forwards"), the number of
first-order gaps resolved, and the audit table.

    python python/benchmarks/audit_bert.py [eager|sdpa] [samples] [batch] [length] [figure.png]

Defaults: eager, the audit's default samples, 1 × 128 tokens. Issue 43's
target: 4 × 256 in at most 15 eval forwards, at least 7 of 24 first-order
gaps resolved. The forward runs on one torch thread while the Rust sampler
uses every core: compare ratios from one run on a quiet machine (the load
average is printed).
"""

import os
import sys
import time

import torch
import transformers as T

import dropmc
import dropmc.torch
from dropmc.discovery import discover

torch.set_num_threads(1)
arg = lambda i, default: sys.argv[i] if len(sys.argv) > i else default  # noqa: E731
impl = arg(1, "eager")
samples = int(arg(2, dropmc.audit.DEFAULT_SAMPLES))
batch, length = int(arg(3, 1)), int(arg(4, 128))
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
t0, c0 = time.perf_counter(), time.process_time()
found = discover(model, **kw)
t1, c1 = time.perf_counter(), time.process_time()
audit = dropmc.torch.audit(model, kw, samples=samples, seed=1)
t2, c2 = time.perf_counter(), time.process_time()
print(audit)
if len(sys.argv) > 5:
    audit.plot(sys.argv[5])
resolved = sum(bool(s["first_order"]["resolved"]) for s in audit.sites)
print(f"attention={impl} samples={samples} tokens={batch}x{length}: one eval forward {forward:.3f} s; "
      f"discovery {t1 - t0:.2f} s wall ({c1 - c0:.2f} s CPU); whole audit {t2 - t1:.2f} s wall "
      f"({c2 - c1:.2f} s CPU; the Rust engine's threads count in CPU) = {(t2 - t1) / forward:.1f} eval forwards; "
      f"first-order gaps resolved {resolved} of {len(audit.sites)} "
      f"({len(audit.attention_sites)} attention sites, {len(audit.other_sites)} listed without numbers); "
      f"load average {os.getloadavg()[0]:.1f}")
