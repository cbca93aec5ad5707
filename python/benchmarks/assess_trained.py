"""Should these trained models be corrected? ``dropmc.torch.assess`` on
small character-level Hugging Face models trained with dropout (issue 51).

Models (d = 64, 4 heads, 2 layers, context 64, vocabulary 128 ASCII codes,
built from configs, no download), each trained from scratch here:

  gpt2-p0.3   GPT2LMHeadModel (pre-LN), resid/embd/attn dropout 0.3
  gpt2-p0.1   the same at 0.1
  llama-a0.2  LlamaForCausalLM (pre-RMSNorm), attention_dropout 0.2 (its
              only dropout: the sites are linear-path ones, docs/linear-path.md)
  bert-p0.2   BertLMHeadModel with is_decoder=True: post-LN, causal,
              hidden and attention dropout 0.2

Text: the standard library's own .py sources (shipped with Python), first
90 % for training, last 10 % held out. Held-out units: ``--windows``
windows of 64 characters (seeded starts), the independent units of the
paired tests. Metrics per window, lower is better:

  xent    mean cross-entropy of the next character (nats)
  error   1 − accuracy of the argmax prediction
  brier   mean Brier score ‖softmax − one-hot‖² (a proper score: calibration and sharpness)

For each model and metric it prints ``assess``'s table; for gpt2-p0.3 and
xent also the corrected-vs-plain Δ and SE computed directly on the same
windows (``with corrected(model, x)``), to compare.

    python python/benchmarks/assess_trained.py [--minutes 2] [--steps 100000] [--windows 512]

Training stops at ``--steps`` or ``--minutes`` per model, whichever first.
"""

import argparse
import math
import os
import time

import sys

import torch
import torch.nn.functional as F

import dropmc.torch as dt

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from correct_trained import CONTEXT, corpus  # noqa: E402  (the same text and held-out split)
from correct_trained import batches as windows  # noqa: E402  (windows of CONTEXT characters and their next ones)

D, HEADS, LAYERS, VOCAB = 64, 4, 2, 128


def build(name):
    import transformers as T

    torch.manual_seed(0)
    if name.startswith("gpt2"):
        p = float(name.split("-p")[1])
        c = T.GPT2Config(n_embd=D, n_layer=LAYERS, n_head=HEADS, vocab_size=VOCAB, n_positions=CONTEXT,
                         resid_pdrop=p, embd_pdrop=p, attn_pdrop=p, bos_token_id=0, eos_token_id=0)
        c._attn_implementation = "eager"
        return T.GPT2LMHeadModel(c)
    if name.startswith("llama"):
        c = T.LlamaConfig(hidden_size=D, intermediate_size=2 * D, num_hidden_layers=LAYERS,
                          num_attention_heads=HEADS, num_key_value_heads=HEADS // 2, vocab_size=VOCAB,
                          max_position_embeddings=CONTEXT, attention_dropout=0.2, bos_token_id=0,
                          eos_token_id=0, pad_token_id=0)
        c._attn_implementation = "eager"
        return T.LlamaForCausalLM(c)
    c = T.BertConfig(hidden_size=D, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=2 * D,
                     vocab_size=VOCAB, max_position_embeddings=CONTEXT, hidden_dropout_prob=0.2,
                     attention_probs_dropout_prob=0.2, is_decoder=True, pad_token_id=0)
    c._attn_implementation = "eager"
    return T.BertLMHeadModel(c)


def train(model, data, steps, minutes, seed=1):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    model.train()
    start, step, loss = time.perf_counter(), 0, float("nan")
    while step < steps and time.perf_counter() - start < 60 * minutes:
        x, y = windows(data, 32, g)
        out = F.cross_entropy(model(x).logits.reshape(-1, VOCAB), y.reshape(-1))
        opt.zero_grad()
        out.backward()
        opt.step()
        step, loss = step + 1, float(out.detach())
    model.eval()
    return step, loss, time.perf_counter() - start


def xent(output, target):
    return F.cross_entropy(output.logits.double().transpose(1, 2), target, reduction="none").mean(dim=1)


def error(output, target):
    return (output.logits.argmax(-1) != target).double().mean(dim=1)


def brier(output, target):
    prob = output.logits.double().softmax(-1)
    return (prob - F.one_hot(target, VOCAB).double()).square().sum(-1).mean(dim=1)


METRICS = {"xent": xent, "error": error, "brier": brier}


def direct(model, batches, metric):
    """Corrected-vs-plain Δ and SE computed by hand on the same windows."""
    def values():
        with torch.no_grad():
            return torch.cat([metric(model(x), y) for x, y in batches])

    plain = values()
    with dt.corrected(model, batches[0][0][:8]):
        d = (values() - plain).tolist()
    n = len(d)
    mean = math.fsum(d) / n
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in d) / (n - 1) / n)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="gpt2-p0.3,gpt2-p0.1,llama-a0.2,bert-p0.2")
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--minutes", type=float, default=2.0, help="training time per model")
    ap.add_argument("--windows", type=int, default=512, help="held-out windows (the units)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--alpha", type=float, default=None, help="family level (default: the suite's)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    train_data, test_data = corpus()
    x, y = windows(test_data, args.windows, torch.Generator().manual_seed(99))
    batches = [(x[i:i + args.batch], y[i:i + args.batch]) for i in range(0, len(x), args.batch)]
    print(f"corpus: {len(train_data)} training / {len(test_data)} held-out characters; {args.windows} held-out "
          f"windows of {CONTEXT} in {len(batches)} batches")
    for name in args.models.split(","):
        model = build(name)
        steps, loss, seconds = train(model, train_data, args.steps, args.minutes)
        print(f"\n=== {name}: {steps} steps of 32 x {CONTEXT} in {seconds:.0f} s, last training loss {loss:.3f}")
        for label, metric in METRICS.items():
            result = dt.assess(model, batches, metric, inputs=x[:8], alpha=args.alpha, progress=False)
            print(f"\n--- {name}, metric {label}")
            print(result)
            if name == "gpt2-p0.3" and label == "xent":
                mean, se = direct(model, batches, metric)
                row = result.row(result.rows[0]["label"])["all"]
                print(f"direct paired computation (corrected - plain): {mean:+.6f} ± {se:.6f}; assess "
                      f"{row['delta']:+.6f} ± {row['se']:.6f}")


if __name__ == "__main__":
    main()
