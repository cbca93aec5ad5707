"""Trained models against their own MC-dropout ensemble (issue 49, "Trained"):
does ``correct(scope="network")`` land one eval forward on what the
dropout-trained model predicts on average?

Models and data are :mod:`assess_trained`'s (d = 64, 4 heads, 2 layers,
context 64, 128 ASCII codes; the standard library's .py sources, first 90 %
train, last 10 % held out), trained by its ``train`` (AdamW 3e-3, batches of
32 × 64, one torch thread) for ``--minutes`` each:

  gpt2-p0.3   GPT-2 pre-LN, resid/embd/attn dropout 0.3
  gpt2-p0.1   the same at 0.1
  llama-a0.2  Llama-style pre-RMSNorm, attention dropout 0.2 (its only one)
  bert-p0.2   BERT post-LN (causal), hidden and attention dropout 0.2

Two steps, so that the evaluation can be rerun after a change to the
correction without retraining:

    python python/benchmarks/network_trained.py --train --models gpt2-p0.3,gpt2-p0.1 --minutes 15
    python python/benchmarks/network_trained.py --evaluate-only [--samples 64] [--windows 256]

``--train`` saves each model after its training to ``--out`` (default
/tmp/dropmc_trained/NAME.pt: the state_dict, the step count, the last
training loss, the seconds and the load average at the end).
``--evaluate-only`` reads them. Training is time-limited: on a loaded
machine a step is slower and the model gets fewer steps (the step count is
printed with each table).

Evaluation, on ``--windows`` held-out windows of 64 characters (the
independent units; every SE below is over them, paired where it is a
difference):

  ensemble    the average of the softmax over ``--samples`` train-mode
              forwards (every dropout on): the reference
  plain       the eval forward
  site        ``correct(model, ex, scope="site")``: each norm for its own site
  network     ``correct(model, ex, scope="network")`` (the default scope)
  network+μ   ``correct(model, ex, scope="network", order=2)``: with the
              nonlinearities' mean shift (dropmc.model.network_shift)

``ex`` are 16 windows of the *training* text (seed 5): the corrections are
not built on the windows they are measured on. Per variant: KL(ensemble ‖
variant) (mean over characters, then over windows) with its SE, the ratio
KL(variant)/KL(plain) with its delta-method SE (``r = ā/b̄``, ``SE² =
Var(a − r b)/(n b̄²)``); the differences to plain of cross-entropy,
accuracy and ECE (15 equal-width confidence bins over all characters; its
paired SE by the jackknife over windows). The ensemble's noise floor:
KL(half A ‖ half B) between the averages of its two halves (``K/2``
forwards each); the full ensemble's own deviation from the infinite
ensemble has a quarter of that difference's variance, so ``floor/4`` is
roughly the KL a perfect variant would still show.
"""

import argparse
import copy
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from assess_trained import VOCAB, build, train  # noqa: E402  (the models and their training)
from correct_trained import corpus  # noqa: E402  (the text and its held-out split)
from correct_trained import batches as windows  # noqa: E402

import dropmc.torch as dt  # noqa: E402

MODELS = "gpt2-p0.3,gpt2-p0.1,llama-a0.2,bert-p0.2"
BINS = 15


def _path(out, name):
    return os.path.join(out, f"{name}.pt")


def train_all(names, minutes, out):
    os.makedirs(out, exist_ok=True)
    train_data, _ = corpus()
    for name in names:
        model = build(name)
        steps, loss, seconds = train(model, train_data, 10 ** 9, minutes)
        load = os.getloadavg()
        torch.save({"state_dict": model.state_dict(), "steps": steps, "loss": loss, "seconds": seconds,
                    "load": load}, _path(out, name))
        print(f"{name}: {steps} steps of 32 x 64 in {seconds:.0f} s, last training loss {loss:.3f}, "
              f"load average {load[0]:.1f}", flush=True)


def _log_probs(model, x, batch=64):
    model.eval()
    with torch.no_grad():
        return torch.cat([model(x[i:i + batch]).logits.double().log_softmax(-1) for i in range(0, len(x), batch)])


def _ensemble(model, x, samples, seed=11, batch=64):
    """``(log mean softmax, log mean of half A, log mean of half B)``."""
    torch.manual_seed(seed)
    model.train()
    halves = [0.0, 0.0]
    with torch.no_grad():
        for k in range(samples):
            halves[k % 2] = halves[k % 2] + torch.cat(
                [model(x[i:i + batch]).logits.double().softmax(-1) for i in range(0, len(x), batch)])
    model.eval()
    a, b = halves[0] / (samples // 2), halves[1] / (samples - samples // 2)
    return ((halves[0] + halves[1]) / samples).log(), a.log(), b.log()


def _kl(ref, lp):
    """KL(ref ‖ lp) per window (mean over characters)."""
    return (ref.exp() * (ref - lp)).sum(-1).mean(1)


def _mean_se(u):
    return float(u.mean()), float(u.std() / math.sqrt(u.numel()))


def _ratio(a, b):
    """``ā/b̄`` and its delta-method SE (module docs)."""
    r = float(a.mean() / b.mean())
    return r, float((a - r * b).std() / (math.sqrt(a.numel()) * b.mean()))


def _bin_sums(lp, y):
    """Per window and confidence bin: (count, Σ confidence, Σ correct)."""
    conf, pred = lp.exp().max(-1)
    right = (pred == y).double()
    bins = (conf * BINS).long().clamp(max=BINS - 1)
    one = torch.nn.functional.one_hot(bins, BINS).double()  # windows × chars × bins
    return torch.stack([one.sum(1), (one * conf.unsqueeze(-1)).sum(1), (one * right.unsqueeze(-1)).sum(1)])


def _ece(sums):
    count, conf, right = sums.unbind(0)
    return float((conf - right).abs().sum() / count.sum())


def _ece_diff(lp, base, y):
    """ECE(lp) − ECE(base) and its jackknife SE over windows."""
    s, t = _bin_sums(lp, y), _bin_sums(base, y)
    total_s, total_t = s.sum(1), t.sum(1)
    n = y.shape[0]
    loo = torch.tensor([_ece(total_s - s[:, i]) - _ece(total_t - t[:, i]) for i in range(n)], dtype=torch.float64)
    return _ece(total_s) - _ece(total_t), float(math.sqrt((n - 1) / n * float((loo - loo.mean()).square().sum())))


def _variants(model, example):
    out = {"plain": model}
    for label, kw in (("site", {"scope": "site"}), ("network", {"scope": "network"}),
                      ("network+μ", {"scope": "network", "order": 2})):
        try:
            out[label] = dt.correct(copy.deepcopy(model), example, **kw)
        except ValueError as e:  # e.g. order=2 not (yet) taken with scope="network"
            print(f"  {label}: refused ({e})")
    return out


def evaluate(name, out, samples, n_windows):
    saved = torch.load(_path(out, name))
    model = build(name)
    model.load_state_dict(saved["state_dict"])
    model.eval()
    train_data, test_data = corpus()
    x, y = windows(test_data, n_windows, torch.Generator().manual_seed(99))
    example, _ = windows(train_data, 16, torch.Generator().manual_seed(5))
    t0 = time.perf_counter()
    ens, half_a, half_b = _ensemble(model, x, samples)
    floor, floor_se = _mean_se(_kl(half_a, half_b))
    print(f"\n## {name}: {saved['steps']} training steps in {saved['seconds']:.0f} s (load {saved['load'][0]:.1f}), "
          f"last training loss {saved['loss']:.3f}; {n_windows} held-out windows of 64, ensemble of {samples} "
          f"({time.perf_counter() - t0:.0f} s); half-vs-half KL {floor:.5f} ± {floor_se:.5f} (floor/4 "
          f"{floor / 4:.5f}); load now {os.getloadavg()[0]:.1f}")
    lps = {k: _log_probs(m, x) for k, m in _variants(model, example).items()}
    lps["ensemble"] = ens
    nll = {k: -lp.gather(-1, y.unsqueeze(-1)).squeeze(-1).mean(1) for k, lp in lps.items()}
    acc = {k: (lp.argmax(-1) == y).double().mean(1) for k, lp in lps.items()}
    kl_plain = _kl(ens, lps["plain"])
    print("| variant | KL(ens ‖ ·) | KL / KL(plain) | CE | ΔCE vs plain | Δacc vs plain | ECE | ΔECE vs plain |")
    print("|---|---|---|---|---|---|---|---|")
    for k, lp in lps.items():
        ce = float(nll[k].mean())
        ece = _ece(_bin_sums(lp, y).sum(1))
        if k == "plain":
            kl, kse = _mean_se(kl_plain)
            print(f"| {k} | {kl:.5f} ± {kse:.5f} | 1 | {ce:.4f} | | | {ece:.4f} | |")
            continue
        dce, dce_se = _mean_se(nll[k] - nll["plain"])
        dacc, dacc_se = _mean_se(acc[k] - acc["plain"])
        dece, dece_se = _ece_diff(lp, lps["plain"], y)
        if k == "ensemble":
            kls, rs = "", ""
        else:
            kl, kse = _mean_se(_kl(ens, lp))
            r, rse = _ratio(_kl(ens, lp), kl_plain)
            kls, rs = f"{kl:.5f} ± {kse:.5f}", f"{r:.3f} ± {rse:.3f}"
        print(f"| {k} | {kls} | {rs} | {ce:.4f} | {dce:+.4f} ± {dce_se:.4f} | {dacc:+.4f} ± {dacc_se:.4f} | "
              f"{ece:.4f} | {dece:+.4f} ± {dece_se:.4f} |", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=MODELS)
    ap.add_argument("--minutes", type=float, default=15.0, help="training time per model")
    ap.add_argument("--out", default="/tmp/dropmc_trained", help="folder of the trained state_dicts")
    ap.add_argument("--train", action="store_true", help="train and save only")
    ap.add_argument("--evaluate-only", action="store_true", help="read the saved models and evaluate")
    ap.add_argument("--samples", type=int, default=64, help="train-mode forwards of the ensemble")
    ap.add_argument("--windows", type=int, default=256, help="held-out windows (the units)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    names = a.models.split(",")
    if not a.evaluate_only:
        train_all(names, a.minutes, a.out)
    if not a.train:
        for name in names:
            evaluate(name, a.out, a.samples, a.windows)


if __name__ == "__main__":
    main()
