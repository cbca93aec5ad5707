"""What dropmc.torch.correct does to a TRAINED model (issue 41, item 7).

Trains small character-level language models with dropout on text shipped
with Python — the source of the standard library's own modules (no
download) — and compares, on held-out text:

  plain      the eval forward (dropout off)
  corrected  dropmc.torch.correct(model, x, linear=False, scope="site") (first order, the
             norm sites reached through the identity or one add)
  order 2    dropmc.torch.correct(model, x, order=2, linear=False, scope="site")
  + linear   dropmc.torch.correct(model, x, linear=True, scope="site"): also the
             linear-path sites (docs/linear-path.md) the tracer finds — here
             the feed-forward's inner dropout → linear2 → (dropout2) → add →
             norm. The attention dropout of ``nn.MultiheadAttention`` is not
             one: in eval its whole forward is one opaque
             ``F.multi_head_attention_forward`` call (fused
             scaled-dot-product attention, no probabilities, ``out_proj``
             applied inside), so the tracer sees neither the dropout nor the
             value product nor ``out_proj``
  no head    corrected, the site in front of the output head excluded
             (``exclude=[...]``; only for the model that has one)
  ensemble   the MC-dropout ensemble: the average of the softmax over K
             train-mode forwards (what the dropout-trained model predicts
             on average; the quantity the correction approximates per norm)

Models (d = 64, 4 heads, feed-forward 256, 2 layers, context 64, p = 0.3,
``nn.TransformerEncoderLayer`` with a causal mask, embedding dropout):

  post-LN        norm after each residual add
  pre-LN         norm before each block, a final LayerNorm
  post-LN + head post-LN, and a dropout then a LayerNorm in front of the
                 output projection (a head trained on noisy inputs)

Reported per model: held-out cross-entropy (nats per character) of each
variant, its paired difference to ``plain`` with the standard error over
held-out sequences (sequences are the independent units; characters within
one are not) and z = difference / SE, and the KL divergence from the
ensemble's prediction, ``KL(ensemble || variant)``, mean over characters
with its SE over sequences.

    python python/benchmarks/correct_trained.py [--steps 300] [--samples 32]

A few minutes on 2 cores (one torch thread).
"""

import argparse
import math
import os
import statistics
import time

import torch
from torch import nn

import dropmc.torch as dt

D, HEADS, FF, LAYERS, CONTEXT, P = 64, 4, 256, 2, 64, 0.3


def corpus(chars=600_000):
    """The standard library's .py sources (sorted file names), as bytes
    clipped to ASCII: the first 90 % train, the last 10 % held out."""
    root = os.path.dirname(os.__file__)
    out = bytearray()
    for name in sorted(os.listdir(root)):
        if name.endswith(".py"):
            with open(os.path.join(root, name), "rb") as f:
                out += f.read()
        if len(out) >= chars:
            break
    data = torch.tensor([min(b, 127) for b in out[:chars]], dtype=torch.long)
    cut = int(0.9 * len(data))
    return data[:cut], data[cut:]


class CharLM(nn.Module):
    def __init__(self, norm_first, head_site=False):
        super().__init__()
        self.emb, self.pos = nn.Embedding(128, D), nn.Embedding(CONTEXT, D)
        self.drop = nn.Dropout(P)
        layer = nn.TransformerEncoderLayer(D, HEADS, FF, dropout=P, batch_first=True, norm_first=norm_first)
        self.encoder = nn.TransformerEncoder(layer, LAYERS, norm=nn.LayerNorm(D) if norm_first else None,
                                             enable_nested_tensor=False)
        self.head_site = head_site
        if head_site:
            self.head_drop, self.head_norm = nn.Dropout(P), nn.LayerNorm(D)
        self.out = nn.Linear(D, 128)

    def forward(self, idx):
        t = idx.shape[1]
        h = self.drop(self.emb(idx) + self.pos(torch.arange(t)))
        causal = nn.Transformer.generate_square_subsequent_mask(t)
        h = self.encoder(h, mask=causal, is_causal=True)
        if self.head_site:
            h = self.head_norm(self.head_drop(h))
        return self.out(h)


def batches(data, n, generator):
    starts = torch.randint(0, len(data) - CONTEXT - 1, (n,), generator=generator)
    x = torch.stack([data[s:s + CONTEXT] for s in starts])
    y = torch.stack([data[s + 1:s + CONTEXT + 1] for s in starts])
    return x, y


def train(model, data, steps, seed):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    model.train()
    for step in range(steps):
        x, y = batches(data, 32, g)
        loss = nn.functional.cross_entropy(model(x).reshape(-1, 128), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return float(loss.detach())


def log_probs(model, x):
    model.eval()
    with torch.no_grad():
        return torch.log_softmax(model(x).double(), dim=-1)


def ensemble_log_probs(model, x, samples, seed):
    torch.manual_seed(seed)
    model.train()
    with torch.no_grad():
        acc = sum(torch.softmax(model(x).double(), dim=-1) for _ in range(samples))
    model.eval()
    return (acc / samples).log()


def per_sequence(values):
    """Mean over characters per held-out sequence: the independent units."""
    return values.mean(dim=1)


def mean_se(units):
    n = units.numel()
    return float(units.mean()), float(units.std(unbiased=True) / math.sqrt(n))


def evaluate(name, model, heldout, samples, head_exclude=None):
    x, y = heldout
    variants = {"plain": log_probs(model, x)}
    for label, kw in (("corrected", {}), ("order 2", {"order": 2})):
        m = dt.correct(model, x, inplace=False, linear=False, **kw, scope="site")
        variants[label] = log_probs(m, x)
        sites = len(m._dropmc_correction.sites)
        refused = len(m._dropmc_correction.refused)
    m = dt.correct(model, x, inplace=False, linear=True, scope="site")
    variants["+ linear"] = log_probs(m, x)
    linear = m._dropmc_correction.linear_sites
    if head_exclude is not None:
        m = dt.correct(model, x, inplace=False, exclude=[head_exclude], scope="site")
        variants["no head"] = log_probs(m, x)
    variants["ensemble"] = ensemble_log_probs(model, x, samples, seed=11)
    ens = variants["ensemble"]
    nll = {k: -lp.gather(-1, y.unsqueeze(-1)).squeeze(-1) for k, lp in variants.items()}
    print(f"\n{name}: {sites} corrected sites ({refused} refused), {x.shape[0]} held-out sequences "
          f"of {CONTEXT} characters, ensemble of {samples}")
    print(f"  + linear adds {len(linear)} linear-path sites: " + ", ".join("->".join(s) for s in linear))
    print(f"  {'variant':10s} {'loss':>8s} {'Δ vs plain ± SE':>22s} {'z':>7s} {'KL to ensemble ± SE':>24s}")
    base = per_sequence(nll["plain"])
    rows = []
    for k, lp in variants.items():
        loss = per_sequence(nll[k])
        diff, se = mean_se(loss - base)
        kl = per_sequence((ens.exp() * (ens - lp)).sum(-1))
        kl_m, kl_se = mean_se(kl)
        z = diff / se if se > 0 else float("nan")
        delta = "" if k == "plain" else f"{diff:+.4f} ± {se:.4f}"
        zs = "" if k == "plain" else f"{z:+.1f}"
        kls = "" if k == "ensemble" else f"{kl_m:.4f} ± {kl_se:.4f}"
        print(f"  {k:10s} {float(loss.mean()):8.4f} {delta:>22s} {zs:>7s} {kls:>24s}")
        rows.append((k, float(loss.mean()), diff, se, kl_m, kl_se))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--samples", type=int, default=32, help="MC-dropout ensemble size")
    ap.add_argument("--heldout", type=int, default=256, help="held-out sequences")
    args = ap.parse_args()
    torch.set_num_threads(1)
    train_data, test_data = corpus()
    heldout = batches(test_data, args.heldout, torch.Generator().manual_seed(99))
    print(f"corpus: {len(train_data)} training / {len(test_data)} held-out characters of the standard "
          f"library's source; {args.steps} steps of 32 x {CONTEXT}, AdamW 3e-3, p = {P}")
    for name, norm_first, head in (("post-LN", False, False), ("pre-LN", True, False),
                                   ("post-LN + head", False, True)):
        t0 = time.perf_counter()
        torch.manual_seed(0)
        model = CharLM(norm_first, head)
        last = train(model, train_data, args.steps, seed=1)
        print(f"\n[{name}: trained in {time.perf_counter() - t0:.0f} s, last training loss {last:.3f}]")
        evaluate(name, model, heldout, args.samples, head_exclude="head_drop->head_norm" if head else None)


if __name__ == "__main__":
    main()
