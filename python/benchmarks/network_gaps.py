"""Per-norm gaps to the full train-mode expectation (every dropout active)
of plain eval, of ``correct(scope="site")`` and of ``correct(scope="network")``
on random-weight Hugging Face models (python/tests/hf_models.py builders):

  gpt2   GPT2Model, pre-LN, 4 layers, d 64, p 0.2 everywhere (embeddings,
         attention, residual), eager attention
  llama  LlamaModel, pre-RMSNorm, 4 layers, d 64, attention_dropout 0.2
  bert   BertModel, post-LN, 4 layers, d 64, p 0.2 (hidden and attention)

The truth at each norm call is the mean of its output over ``--draws``
train-mode forwards (the model's own dropouts, grad off). A gap is
``‖eval output − truth‖`` over the tokens × d, its noise bias taken out:
``Σ (a − ȳ)² − Σ Var ȳ`` (``E Σ (a − ȳ)² = ‖a − m‖² + Σ Var ȳ``), floored
at the noise floor ``√(Σ Var ȳ)`` (a gap below it is printed as the floor
and the ratio marked ``>``). Prints per norm the gaps and the ratios
plain/site and plain/network, then per model the median and minimum ratio,
the number of norms where the network correction is farther than plain,
and the ops the network ledger could not follow.

``--held-out``: both corrections are built on other example inputs (token
ids drawn with another seed, same shape) than the inputs the gaps are
measured on, so the per-norm ratios κ (pooled per position) are not read
off the measured inputs.

    python python/benchmarks/network_gaps.py [--draws 2048] [--only gpt2] [--held-out]
"""

import argparse
import copy
import pathlib
import statistics
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
from hf_models import build, inputs  # noqa: E402

import dropmc.torch as dt  # noqa: E402
from dropmc.correct import norm_outputs  # noqa: E402
from dropmc.model.discovery import discover  # noqa: E402

MODELS = {"gpt2": dict(layers=4, d=64, p=0.2), "llama": dict(layers=4, d=64, p=0.2),
          "bert": dict(layers=4, d=64, p=0.2)}


def truth(model, x, calls, draws):
    """``{call: (mean, Σ Var ȳ)}`` of each norm call's output over ``draws``
    train-mode forwards (float64 sums)."""
    wanted = {}
    for c in calls:
        name, _, k = c.partition("#")
        wanted.setdefault(name, {})[int(k) if k else 0] = c
    sums, counts = {}, {}
    modules = dict(model.named_modules())

    def hook(name):
        def f(module, args, out):
            k = counts.get(name, 0)
            counts[name] = k + 1
            call = wanted[name].get(k)
            if call is not None:
                o = out.detach().double()
                s, s2 = sums.get(call, (0.0, 0.0))
                sums[call] = (s + o, s2 + o * o)
        return f

    handles = [modules[n].register_forward_hook(hook(n)) for n in wanted]
    model.train()
    try:
        with torch.no_grad():
            for _ in range(draws):
                counts.clear()
                model(**x)
    finally:
        for h in handles:
            h.remove()
        model.eval()
    out = {}
    for c, (s, s2) in sums.items():
        mean = s / draws
        var = (s2 / draws - mean * mean) * draws / (draws - 1)
        out[c] = (mean, float(var.clamp_min(0).sum()) / draws)
    return out


def gap(a, mean, noise):
    """``(gap, below_floor)`` (module docs)."""
    g2 = float((a - mean).square().sum()) - noise
    floor = noise ** 0.5
    return (max(g2, 0.0) ** 0.5, False) if g2 > noise else (floor, True)


def _other_inputs(x):
    """``x`` with its token ids drawn again (another seed)."""
    g = torch.Generator().manual_seed(2)
    return dict(x, input_ids=torch.randint(4, 30, tuple(x["input_ids"].shape), generator=g))


def run(arch, draws, held_out=False):
    cfg = MODELS[arch]
    model = build(arch, layers=cfg["layers"], d=cfg["d"], p=cfg["p"]).eval()
    x = inputs(arch, batch=2, length=16)
    example = _other_inputs(x) if held_out else x
    found = discover(model, **x)
    calls = list(found.norms)
    t0 = time.time()
    truths = truth(model, x, calls, draws)
    t_mc = time.time() - t0
    plain = norm_outputs(model, x, calls)
    site = norm_outputs(dt.correct(copy.deepcopy(model), example, scope="site"), x, calls)
    net_model = dt.correct(copy.deepcopy(model), example, scope="network")
    network = norm_outputs(net_model, x, calls)
    done = net_model._dropmc_correction
    print(f"## {arch}{' (corrections built on held-out inputs)' if held_out else ''} "
          f"({draws} train-mode forwards, {t_mc:.0f} s): {len(calls)} norm calls, "
          f"{len(done.network)} reached by noise")
    print("| norm | κ | plain gap | site gap | network gap | plain/site | plain/network |")
    print("|---|---|---|---|---|---|---|")
    ratios, farther = [], []
    for c in calls:
        mean, noise = truths[c]
        gp, fp = gap(plain[c], mean, noise)
        gs, fs = gap(site[c], mean, noise)
        gn, fn = gap(network[c], mean, noise)
        if fp:
            print(f"| {c} | {done.network.get(c, 0):.3g} | (below noise {gp:.2g}) | | | | |")
            continue
        rs, rn = gp / gs, gp / gn
        ratios.append(rn)
        if gn > gp:
            farther.append(c)
        print(f"| {c} | {done.network.get(c, 0):.3g} | {gp:.3g} | {gs:.3g} | {gn:.3g} | "
              f"{'>' if fs else ''}{rs:.2f} | {'>' if fn else ''}{rn:.2f} |")
    if ratios:
        print(f"plain/network over {len(ratios)} norms with a resolved plain gap: "
              f"median {statistics.median(ratios):.2f}, min {min(ratios):.2f}; farther than plain: {farther or 'none'}")
    print(f"not covered by the ledger: {sorted(set(done.network_uncovered)) or 'none'}\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=2048)
    ap.add_argument("--only", choices=sorted(MODELS))
    ap.add_argument("--held-out", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    for arch in ([a.only] if a.only else list(MODELS)):
        run(arch, a.draws, a.held_out)


if __name__ == "__main__":
    main()
