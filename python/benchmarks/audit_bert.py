"""Wall time of dropmc.torch.audit on a BERT-base-sized model (issue 32 item 7).

12 layers, d = 768, 12 heads, intermediate 3072, one sequence of 128 tokens,
random weights from a config (transformers needed, no download), attention
"eager" or "sdpa" (argv[1], default eager). Prints the time of the discovery
forward, the whole audit (discovery + capture + every site), the number of
sites and attention sites, and the audit table. One torch thread.

    python python/benchmarks/audit_bert.py [eager|sdpa] [samples] [figure.png]
"""

import sys
import time

import torch
import transformers as T

import dropmc
import dropmc.torch
from dropmc.discovery import discover

torch.set_num_threads(1)
impl = sys.argv[1] if len(sys.argv) > 1 else "eager"
samples = int(sys.argv[2]) if len(sys.argv) > 2 else dropmc.audit.DEFAULT_SAMPLES
torch.manual_seed(0)
config = T.BertConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                      intermediate_size=3072, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
config._attn_implementation = impl
model = T.BertModel(config)
ids = torch.randint(1000, 20000, (1, 128), generator=torch.Generator().manual_seed(1))
kw = {"input_ids": ids, "attention_mask": torch.ones(1, 128, dtype=torch.long)}
t0, c0 = time.perf_counter(), time.process_time()
found = discover(model, **kw)
t1, c1 = time.perf_counter(), time.process_time()
audit = dropmc.torch.audit(model, kw, samples=samples, seed=1)
t2, c2 = time.perf_counter(), time.process_time()
print(audit)
if len(sys.argv) > 3:
    audit.plot(sys.argv[3])
print(f"attention={impl} samples={samples}: discovery {t1 - t0:.2f} s wall ({c1 - c0:.2f} s CPU); "
      f"whole audit {t2 - t1:.2f} s wall ({c2 - c1:.2f} s CPU; the Rust engine's threads count in CPU) "
      f"({len(audit.sites)} sites, {len(audit.attention_sites)} attention sites, "
      f"{len(audit.other_sites)} listed without numbers)")
