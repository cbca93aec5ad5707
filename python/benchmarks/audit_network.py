"""The network audit on random-weight models (issue 49, item 2): per norm
call a dropout reaches, how much closer the corrected eval output is to
the network truth (E[norm output] with every dropout on, the model's own
train-mode Monte Carlo) than plain eval.

Per model: ``plain / site`` (the per-site ``correct``) and ``plain /
network`` (``correct(..., scope="network")``, when this dropmc has it),
median and min over the norms. A ratio whose denominator gap is not
resolved uses its upper bound (the ratio is then a lower bound, counted in
``bounded``); a plain gap that is not resolved makes the norm's ratio
unknown (left out, counted).

Models (random weights, one torch thread): pre-LN GPT-2 (4 layers, d 64,
p 0.2 everywhere), Llama-style (4 layers, d 64, attention dropout 0.2,
eager attention), post-LN BERT (4 layers, d 64, p 0.2), and the ESMFold
trunk (tiny config of python/tests/hf_models.py, p 0.25, no recycle),
alphafold3-pytorch's ``PairformerStack`` (python/tests/af3_models.py;
reported as not importable when its model module is not).

With ``--check`` each model's truths are also compared with a second,
independent run (another seed, both at exactly ``forwards`` draws): per
element ``z = (T̂₁ − T̂₂)/sqrt(SE₁² + SE₂²)``, mean z² over the elements of
each norm (≈ 1; its spread is not bounded here, the tokens of an attention
model being correlated) and max |z| against the Bonferroni limit of the
suite's level over every element (python/tests/mc_checks.py).

    python python/benchmarks/audit_network.py [forwards] [-v] [--check]   # default 512; -v: the tables
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
FORWARDS = int(ARGS[0]) if ARGS else 512
TOKENS = 64


def gpt2():
    import transformers as T

    c = T.GPT2Config(n_layer=4, n_embd=64, n_head=4, resid_pdrop=0.2, embd_pdrop=0.2, attn_pdrop=0.2,
                     vocab_size=100, n_positions=TOKENS)
    return T.GPT2Model(c), {"input_ids": _ids(100)}


def llama():
    import transformers as T

    c = T.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                      num_key_value_heads=4, attention_dropout=0.2, vocab_size=100, max_position_embeddings=TOKENS)
    c._attn_implementation = "eager"
    return T.LlamaModel(c), {"input_ids": _ids(100)}


def bert():
    import transformers as T

    c = T.BertConfig(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, intermediate_size=128,
                     hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.2, vocab_size=100,
                     max_position_embeddings=TOKENS)
    return T.BertModel(c), {"input_ids": _ids(100)}


def esmfold():
    from hf_models import build_esmfold

    ids = torch.randint(0, 20, (1, 12), generator=torch.Generator().manual_seed(3))
    return build_esmfold(p=0.25), {"input_ids": ids, "num_recycles": 0}


def _ids(vocab):
    return torch.randint(0, vocab, (1, TOKENS), generator=torch.Generator().manual_seed(3))


def _ratio(plain, other):
    """``(ratio, bounded)`` or None when the plain gap is not resolved."""
    if other is None or not plain["resolved"]:
        return None
    denominator = other["rms"] if other["resolved"] else other["upper"]
    return plain["rms"] / denominator if denominator > 0 else float("inf"), not other["resolved"]


def _summary(rows, column):
    ratios = [_ratio(r["gap_plain"], r[column]) for r in rows]
    known = [x for x in ratios if x is not None]
    if not known:
        return "—"
    values = [x[0] for x in known]
    return (f"median {statistics.median(values):.2f}× min {min(values):.2f}× "
            f"({sum(b for _, b in known)} bounded, {len(ratios) - len(known)} plain unresolved)")


def run(name, build):
    torch.manual_seed(0)
    model, kw = build()
    start = time.perf_counter()
    audit = NA.audit_network(model, kw, seed=1, forwards=FORWARDS, progress=False)
    rows = audit.network_sites
    print(f"{name}: {len(rows)} norms, {audit.network_forwards} forwards, {time.perf_counter() - start:.1f} s; "
          f"plain/site {_summary(rows, 'gap_site')}; plain/network {_summary(rows, 'gap_network')}")
    return audit


def check(name, build):
    """Two independent runs of exactly FORWARDS draws: mean z² per norm, max |z| vs the Bonferroni limit."""
    import numpy as np
    from mc_checks import bonferroni_z

    runs = []
    for seed in (1, 2):
        torch.manual_seed(0)
        model, kw = build()
        runs.append(NA.audit_network(model, kw, seed=seed, forwards=FORWARDS, adaptive=False, progress=False))
    z = [(a[0] - b[0]) / np.sqrt(a[1] ** 2 + b[1] ** 2)
         for a, b in zip(*[[r.network_truth(i) for i in range(len(r.network_sites))] for r in runs])]
    z = [x[~np.isnan(x)] for x in z]  # 0/0: an element no noise reaches (both SEs 0, equal truths)
    silent = sum(x.size == 0 for x in z)  # e.g. ESMFold's recycle norms on zeros_like(noisy) at 0 recycles
    z = [x for x in z if x.size]
    count = sum(x.size for x in z)
    means = [float((x ** 2).mean()) for x in z]
    print(f"{name} check: {len(z)} norms ({silent} without noise left out), mean z² per norm "
          f"{min(means):.3f} to {max(means):.3f}; max |z| "
          f"{max(float(np.abs(x).max()) for x in z):.2f} (Bonferroni limit {bonferroni_z(count):.2f} over {count})")


def pairformer():
    """alphafold3-pytorch's ``PairformerStack`` (python/tests/af3_models.py:
    2 blocks, row/column dropout 0.25, 8 tokens), or None when its model
    module cannot be imported here."""
    import af3_models as AF

    if AF.load() is None:
        return None
    return AF.build_pairformer(p=0.25), AF.pairformer_inputs(n=8)


if __name__ == "__main__":
    for name, build in [("GPT-2 pre-LN", gpt2), ("Llama-style", llama), ("BERT post-LN", bert),
                        ("ESMFold trunk", esmfold), ("alphafold3-pytorch PairformerStack", pairformer)]:
        if name.startswith("alphafold3") and pairformer() is None:
            print(f"{name}: its model module is not importable here (python/tests/af3_models.py)")
            continue
        audit = run(name, build)
        if "-v" in sys.argv:
            print(audit.network_table)
        if "--check" in sys.argv:
            check(name, build)
