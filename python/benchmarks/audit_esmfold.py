"""Wall time of the whole default audit of an ESMFold trunk at L residues
(issue 43: L = 64, 4 096 pair tokens per pair site, in under 2 minutes).

transformers' ``EsmForProteinFolding`` with the tiny config of
python/tests/hf_models.py (``build_esmfold``: random weights, no download),
one torch thread, ``num_recycles=0``. Prints one eval forward's time, the
whole audit's (discovery + capture + every site at the default budget:
``tokens``, ``samples``), their ratio and the load average.

    python python/benchmarks/audit_esmfold.py [L] [--tokens N|all]
"""

import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import dropmc  # noqa: E402
import dropmc.torch  # noqa: E402
from hf_models import build_esmfold  # noqa: E402

torch.set_num_threads(1)
argv = sys.argv[1:]
tokens = dropmc.audit.DEFAULT_TOKENS
if "--tokens" in argv:
    at = argv.index("--tokens")
    tokens = argv[at + 1] if argv[at + 1] == "all" else int(argv[at + 1])
    del argv[at:at + 2]
length = int(argv[0]) if argv else 64
model = build_esmfold()
ids = torch.randint(0, 20, (1, length), generator=torch.Generator().manual_seed(3))
kw = {"input_ids": ids, "num_recycles": 0}
with torch.no_grad():
    model.eval()
    model(**kw)
    t = time.perf_counter()
    model(**kw)
    forward = time.perf_counter() - t
t0, c0 = time.perf_counter(), time.process_time()
audit = dropmc.torch.audit(model, kw, tokens=tokens, seed=1)
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
print(audit)
resolved = sum(bool(s["first_order"]["resolved"]) for s in audit.sites)
print(f"ESMFold trunk L={length} tokens={tokens}: one eval forward {forward:.3f} s; whole audit {wall:.2f} s wall "
      f"({cpu:.2f} s CPU) = {wall / forward:.1f} eval forwards; {len(audit.sites)} norm sites "
      f"({resolved} first-order gaps resolved), {len(audit.attention_sites)} attention sites; "
      f"load average {os.getloadavg()[0]:.1f}")
