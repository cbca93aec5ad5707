"""The network audit's control variate (python/dropmc/audit/network_cv.py) on
random-weight models: per norm the variance reduction per draw (plain
per-element variance / controlled, ``var ÷``), and how many train-mode
forwards the audit spends before every gap is resolved (at most ``forwards``).

Models (one torch thread): ``bert-base`` — ``BertModel(BertConfig())``
(12 layers, d 768, p 0.1), 1 × 128 tokens, ``attention_mask`` of ones, as
python/benchmarks/audit_bert.py builds it; ``gpt2`` — python/tests/hf_models.py's
``build("gpt2", layers=4)`` (pre-LN, d 64, p 0.1), 1 × 64 tokens.
``--plain``: the same run with ``control=False`` (plain Monte Carlo) after it.

    python python/benchmarks/audit_network_cv.py [bert-base|gpt2] [forwards] [--plain]   # default gpt2 128
"""

import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import dropmc.audit.network as NA  # noqa: E402

torch.set_num_threads(1)
ARGS = [a for a in sys.argv[1:] if not a.startswith("-")]
NAME = ARGS[0] if ARGS else "gpt2"
FORWARDS = int(ARGS[1]) if len(ARGS) > 1 else 128


def build():
    if NAME == "bert-base":
        import transformers as T

        torch.manual_seed(0)
        model = T.BertModel(T.BertConfig(_attn_implementation="eager")).eval()
        ids = torch.randint(1000, 20000, (1, 128), generator=torch.Generator().manual_seed(1))
        return model, {"input_ids": ids, "attention_mask": torch.ones(1, 128, dtype=torch.long)}
    from hf_models import build as hf_build

    ids = torch.randint(4, 90, (1, 64), generator=torch.Generator().manual_seed(1))
    return hf_build("gpt2", layers=4).eval(), {"input_ids": ids}


def run(control):
    model, kw = build()
    start = time.perf_counter()
    audit = NA.audit_network(model, kw, seed=1, forwards=FORWARDS, control=control, progress=True)
    rows = audit.network_sites
    gaps = [r[c] for r in rows for c in NA._COLUMNS if r[c] is not None]
    ratios = [r["control"]["variance_ratio"] for r in rows if r["control"]["used"]]
    print(f"{NAME} control={control}: {len(rows)} norms, {audit.network_forwards} forwards, "
          f"{sum(g['resolved'] for g in gaps)} of {len(gaps)} gaps resolved, {time.perf_counter() - start:.0f} s "
          f"(load {os.getloadavg()[0]:.1f})")
    if ratios:
        print(f"  variance ÷ per draw: median {statistics.median(ratios):.2f}, min {min(ratios):.2f}, "
              f"max {max(ratios):.2f} over {len(ratios)} norms with the control variate on")
    print(audit.network_table)
    for r in rows:  # an unresolved gap in full: the engine's estimate, its SE and the bound
        for c in NA._COLUMNS:
            if r[c] is not None and not r[c]["resolved"]:
                print(f"  unresolved: {r['norm']} {c}: {dict(r[c])}")
    sys.stdout.flush()


if __name__ == "__main__":
    run(True)
    if "--plain" in sys.argv:
        run(False)
