"""Per-norm gaps to the full train-mode expectation (every dropout active)
of plain eval, of ``correct(scope="site")``, of ``correct(scope="network")`` and of
``correct(scope="network", order=2)`` (network+μ: the nonlinearities' mean
shift too, dropmc.model.network_shift)
on random-weight Hugging Face models (python/tests/hf_models.py builders):

  gpt2   GPT2Model, pre-LN, 4 layers, d 64, p 0.2 everywhere (embeddings,
         attention, residual), eager attention
  llama  LlamaModel, pre-RMSNorm, 4 layers, d 64, attention_dropout 0.2
  bert   BertModel, post-LN, 4 layers, d 64, p 0.2 (hidden and attention)
  esmfold    the ESMFold trunk (tiny config of python/tests/hf_models.py,
             p 0.25, 12 residues, no recycle; the ESM stem included)
  pairformer alphafold3-pytorch's PairformerStack (python/tests/af3_models.py:
             2 blocks, row/column dropout 0.25, pair and single width 16,
             8 tokens), skipped when the package cannot be imported

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

``--kappa``: per norm also the ratio κ = Σ s̄ / Σ V the network
correction applies (the ledger's, :mod:`dropmc.model.network_ledger`) beside
the one the train-mode forwards measure at the norm's input: ``mc`` =
Σ_t (1 − 1/d) mean_k Var x_tk / Σ_t V_t (RMSNorm: without ``1 − 1/d``),
the noise variance the ledger estimates, and ``spread`` = Σ_t (E var_k
x_t − V_t) / Σ_t V_t (RMSNorm: mean squares), what the norm's denominator
sees (the noise's correlation over channels and the inputs' mean shift
included). Where ``ledger`` and ``mc`` part, an op on the way is
followed wrongly; where ``mc`` and ``spread`` part, the diagonal
first-order picture itself misses. Then plain/oracle ratios of four
corrections read off the train-mode forwards (:func:`oracles`): the
measured per-token ``s̄`` in the denominator; the measured ``E var x``;
that and the input at its measured mean ``E x``; the mean with the
ledger's per-token ``s̄`` — what a variance-only correction can reach at
best, and what the input's mean shift adds.

    python python/benchmarks/network_gaps.py [--draws 2048] [--only gpt2] [--held-out] [--kappa]
"""

import argparse
import copy
import pathlib
import statistics
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
from hf_models import build, build_esmfold, inputs  # noqa: E402

import dropmc.torch as dt  # noqa: E402
from dropmc.correct import norm_outputs  # noqa: E402
from dropmc.model.discovery import discover  # noqa: E402



def _hf(arch):
    def make():
        model = build(arch, layers=4, d=64, p=0.2).eval()
        x = inputs(arch, batch=2, length=16)
        g = torch.Generator().manual_seed(2)
        other = dict(x, input_ids=torch.randint(4, 30, tuple(x["input_ids"].shape), generator=g))
        return model, x, other
    return make


def _esmfold():
    def ids(seed):
        return {"input_ids": torch.randint(0, 20, (1, 12), generator=torch.Generator().manual_seed(seed)),
                "num_recycles": 0}
    return build_esmfold(p=0.25).eval(), ids(3), ids(2)


def _pairformer():
    import af3_models as AF

    if AF.load() is None:
        return None
    return AF.build_pairformer(p=0.25).eval(), AF.pairformer_inputs(n=8), AF.pairformer_inputs(n=8, seed=2)


#: name -> () -> (model in eval mode, inputs, other inputs of the same shape) or None (not importable)
MODELS = {"gpt2": _hf("gpt2"), "llama": _hf("llama"), "bert": _hf("bert"), "esmfold": _esmfold,
          "pairformer": _pairformer}


def truth(model, x, calls, draws, kinds=None):
    """``{call: (mean, Σ Var ȳ)}`` of each norm call's output over ``draws``
    train-mode forwards (float64 sums); with ``kinds`` (call → ``"layer"``/
    ``"rms"``) also ``{call: (κ mc, κ spread, per-token moments)}`` of
    the norm's input (module docs, ``--kappa``; the moments for
    :func:`oracles`) as a second value."""
    wanted = {}
    for c in calls:
        name, _, k = c.partition("#")
        wanted.setdefault(name, {})[int(k) if k else 0] = c
    sums, counts, ins, eval_in = {}, {}, {}, {}
    modules = dict(model.named_modules())

    def hook(name, record):
        def f(module, args, out):
            k = counts.get(name, 0)
            counts[name] = k + 1
            call = wanted[name].get(k)
            if call is not None:
                record(call, args[0].detach().double(), out.detach().double())
        return f

    def moments(call, xi, o):
        s, s2 = sums.get(call, (0.0, 0.0))
        sums[call] = (s + o, s2 + o * o)
        if kinds is not None and call in kinds:
            a, a2, sp = ins.get(call, (0.0, 0.0, 0.0))
            ins[call] = (a + xi, a2 + xi * xi, sp + _spread(xi, kinds[call]))

    if kinds is not None:  # the eval inputs of the norms, for V
        handles = [modules[n].register_forward_hook(hook(n, lambda c, xi, o: eval_in.__setitem__(c, xi)))
                   for n in wanted]
        try:
            with torch.no_grad():
                model(**x)
        finally:
            for h in handles:
                h.remove()
            counts.clear()

    handles = [modules[n].register_forward_hook(hook(n, moments)) for n in wanted]
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
    if kinds is None:
        return out
    kappas = {}
    for c, (a, a2, sp) in ins.items():
        d = a.shape[-1]
        var = (a2 / draws - (a / draws) ** 2) * draws / (draws - 1)
        centre = (1.0 - 1.0 / d) if kinds[c] == "layer" else 1.0
        v = _spread(eval_in[c], kinds[c])
        noise = centre * var.mean(-1)
        kappas[c] = (float(noise.sum() / v.sum()), float((sp / draws - v).sum() / v.sum()),
                     dict(eval=eval_in[c], noise=noise, spread=sp / draws, mean=a / draws))
    return out, kappas


def oracles(module, kind, got, ledger_noise):
    """The norm's eval output with, per token, (1) the measured noise
    variance ``s̄`` added to ``V``; (2) ``V`` replaced by the measured
    ``E var_k x`` (RMSNorm: ``E mean_k x²``); (3) as (2) with the input at
    its measured mean ``E x`` too — ``--kappa``'s bounds on what a
    correction of the denominator, then of the input's mean, can reach;
    (4) the input at its measured mean, the ledger's per-token ``s̄``
    (``ledger_noise``) added to its spread: what the ledger's variance
    gives once the mean is right (None for a norm other than
    ``nn.LayerNorm``/``nn.RMSNorm``)."""
    if not isinstance(module, (torch.nn.LayerNorm, getattr(torch.nn, "RMSNorm", ()))):
        return None
    w = module.weight.detach().double() if module.weight is not None else 1.0
    b = getattr(module, "bias", None)
    b = b.detach().double() if b is not None else 0.0
    eps = module.eps if module.eps is not None else torch.finfo(torch.float32).eps

    def norm(x, denom):
        centred = x - x.mean(-1, keepdim=True) if kind == "layer" else x
        return centred / (denom.unsqueeze(-1) + eps).sqrt() * w + b

    x, spread = got["eval"], got["spread"]
    mean = got["mean"]
    return [norm(x, _spread(x, kind) + got["noise"]), norm(x, spread), norm(mean, spread),
            norm(mean, _spread(mean, kind) + ledger_noise.reshape(spread.shape))]


def _spread(x, kind):
    """``V`` per token: the variance over the last axis (LayerNorm) or the mean square (RMSNorm)."""
    return x.var(-1, unbiased=False) if kind == "layer" else x.square().mean(-1)


def gap(a, mean, noise):
    """``(gap, below_floor)`` (module docs)."""
    g2 = float((a - mean).square().sum()) - noise
    floor = noise ** 0.5
    return (max(g2, 0.0) ** 0.5, False) if g2 > noise else (floor, True)


def run(arch, draws, held_out=False, kappa=False):
    built = MODELS[arch]()
    if built is None:
        print(f"## {arch}: not importable here (python/tests/af3_models.py says what it needs)\n")
        return
    model, x, other = built
    example = other if held_out else x
    found = discover(model, **x)
    calls = list(found.norms)
    kinds = {c: found.norms[c].kind for c in calls} if kappa else None
    t0 = time.time()
    truths = truth(model, x, calls, draws, kinds)
    if kappa:
        truths, kappas = truths
    t_mc = time.time() - t0
    plain = norm_outputs(model, x, calls)
    site = norm_outputs(dt.correct(copy.deepcopy(model), example, scope="site"), x, calls)
    net_model = dt.correct(copy.deepcopy(model), example, scope="network")
    network = norm_outputs(net_model, x, calls)
    shifted = norm_outputs(dt.correct(copy.deepcopy(model), example, scope="network", order=2), x, calls)
    done = net_model._dropmc_correction
    ledger = net_model_ledger(model, x, found) if kappa else None
    print(f"## {arch}{' (corrections built on held-out inputs)' if held_out else ''} "
          f"({draws} train-mode forwards, {t_mc:.0f} s): {len(calls)} norm calls, "
          f"{len(done.network)} reached by noise")
    head = ("| norm | κ | plain gap | site gap | network gap | network+μ gap | plain/site | plain/network | "
            "plain/network+μ |")
    print(head + (" κ ledger | κ mc | κ spread | oracle s̄ | oracle spread | oracle spread+mean | "
                  "oracle mean, ledger s̄ |" if kappa else ""))
    print("|---" * (head.count("|") - 1 + (7 if kappa else 0)) + "|")
    oracle_ratios = [[], [], [], []]
    ratios, farther, ratios2, farther2 = [], [], [], []
    for c in calls:
        mean, noise = truths[c]
        gp, fp = gap(plain[c], mean, noise)
        gs, fs = gap(site[c], mean, noise)
        gn, fn = gap(network[c], mean, noise)
        g2, f2 = gap(shifted[c], mean, noise)
        if fp:
            print(f"| {c} | {done.network.get(c, 0):.3g} | (below noise {gp:.2g}) | | | | | | |")
            continue
        rs, rn, r2 = gp / gs, gp / gn, gp / g2
        ratios.append(rn)
        ratios2.append(r2)
        if gn > gp:
            farther.append(c)
        if g2 > gp:
            farther2.append(c)
        extra = ""
        if kappa:
            k = ledger.norms.get(c)
            extra = f" {k.kappa if k is not None else 0:.3g} | {kappas[c][0]:.3g} | {kappas[c][1]:.3g} |"
            ora = oracles(model.get_submodule(found.norm_modules[c]), found.norms[c].kind, kappas[c][2],
                          k.noise if k is not None else torch.zeros(1))
            for o, col in zip(ora or [], oracle_ratios):
                go = gap(o.reshape(mean.shape), mean, noise)[0]
                col.append(gp / go)
                extra += f" {gp / go:.2f} |"
        print(f"| {c} | {done.network.get(c, 0):.3g} | {gp:.3g} | {gs:.3g} | {gn:.3g} | {g2:.3g} | "
              f"{'>' if fs else ''}{rs:.2f} | {'>' if fn else ''}{rn:.2f} | {'>' if f2 else ''}{r2:.2f} |" + extra)
    for label, rr, far in (("network", ratios, farther), ("network+μ (order=2)", ratios2, farther2)):
        if rr:
            print(f"plain/{label} over {len(rr)} norms with a resolved plain gap: "
                  f"median {statistics.median(rr):.2f}, min {min(rr):.2f}; farther than plain: {far or 'none'}")
    for name, col in zip(("s̄", "spread", "spread+mean", "mean with the ledger's s̄"), oracle_ratios):
        if col:
            print(f"oracle {name}: median {statistics.median(col):.2f}, min {min(col):.2f} over {len(col)} norms")
    print(f"not covered by the ledger: {sorted(set(done.network_uncovered)) or 'none'}\n")


def net_model_ledger(model, x, found):
    """The network ledger of ``model`` on ``x`` (every norm's κ, reached or not)."""
    from dropmc.model.network_ledger import network_ledger

    return network_ledger(model, (), x, found)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=2048)
    ap.add_argument("--only", choices=sorted(MODELS))
    ap.add_argument("--held-out", action="store_true")
    ap.add_argument("--kappa", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    for arch in ([a.only] if a.only else list(MODELS)):
        run(arch, a.draws, a.held_out, a.kappa)


if __name__ == "__main__":
    main()
