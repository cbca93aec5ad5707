"""Wall time of the attention-site audit alone (issue 43 item 4), on
synthetic captures of BERT-base's shape: 12 heads of width 64, E = 768,
batch × length queries and keys, random softmax rows and values.

    python python/benchmarks/audit_attention.py [batch] [length] [sites] [samples]

Defaults: 4 × 256, 12 sites (BERT-base's 12 layers), the default
attention_samples. Prints the load average and the seconds per site and in
all (the closed forms on every row and the sampled check on the default row
sample), the same work `dropmc.torch.audit` does for BERT's attention sites.
"""

import os
import sys
import time

import numpy as np

import dropmc
from dropmc.audit import DEFAULT_ATTENTION_SAMPLES, audit_attention_captures

argv = sys.argv[1:]
arg = lambda i, default: int(argv[i]) if len(argv) > i else default  # noqa: E731
batch, length, sites, samples = arg(0, 4), arg(1, 256), arg(2, 12), arg(3, DEFAULT_ATTENTION_SAMPLES)
heads, head_dim, embed = 12, 64, 768
rng = np.random.default_rng(0)
captures = []
for n in range(sites):
    logits = rng.normal(0.0, 1.0, (batch, heads, length, length))
    weights = np.exp(logits - logits.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    captures.append({
        "name": f"layer.{n}.attention", "p": 0.1,
        "shape": (batch, heads, length, length, head_dim, embed),
        "weights": weights.ravel(),
        "values": rng.normal(0.0, 1.0, batch * heads * length * head_dim),
        "out_weight": rng.normal(0.0, embed ** -0.5, embed * heads * head_dim),
        "out_bias": rng.normal(0.0, 0.1, embed),
    })
print(f"dropmc {dropmc.__version__}, {sites} attention sites, {batch} x {length} tokens, "
      f"samples {samples}, load average {os.getloadavg()[0]:.2f}")
start = time.perf_counter()
table, _, moments = audit_attention_captures(captures, samples=samples, seed=0)
total = time.perf_counter() - start
print(f"attention audit: {total:.2f} s in all, {total / sites:.3f} s per site "
      f"(load average {os.getloadavg()[0]:.2f})")
