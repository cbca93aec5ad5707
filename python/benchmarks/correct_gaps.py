"""Per-site gaps before and after dropmc.torch.correct on the audit's
example model (docs/audit.md: a 6-layer post-LN nn.TransformerEncoder,
d = 512, 64 tokens, float32), in the audit's own statistic (the RMS gap to
the truth with its sampling noise subtracted; `<` marks an upper bound).

One site at a time: the audit of the uncorrected model gives each site's
truth, its eval gap and its first-order bound; the model corrected at that
site only is read at the norm by a forward hook and its gap to the same
truth computed. All sites at once: the corrected model is audited (each
site against the corrected model's own truth) and each norm's corrected
output compared with it.

    python python/benchmarks/correct_gaps.py [--layers 6] [--d 512] [--tokens 64]
"""

import argparse
import time

import torch

import dropmc._dropmc as _rs
import dropmc.audit as A
import dropmc.correct as C
import dropmc.torch as dt


def fmt(g):
    return f"{g['rms']:.3e}" if g["resolved"] else f"< {g['upper']:.1e}"


def gap(audit, i, out):
    truth, se = audit.truth(i)
    return _rs.gap_to_truth(truth.ravel(), se.ravel(), out.numpy().ravel().copy(), audit.sites[i]["d"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--d", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(args.d, 8, 4 * args.d, dropout=0.1, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, args.layers, enable_nested_tensor=False).eval()
    x = torch.randn(1, args.tokens, args.d)
    sites = C.resolve_sites(model, inputs=x)
    t0 = time.perf_counter()
    before = A.audit_torch(model, x, sites=sites, seed=1)
    print(f"one site at a time (audit {time.perf_counter() - t0:.1f} s wall)")
    print(f"{'site':36s} {'gap eval':>10s} {'1st-order bound':>16s} {'corrected':>12s}")
    for i, site in enumerate(sites):
        with dt.corrected(model, [site], scope="site") as m:
            out = C.norm_outputs(m, x, [site[-1]])[site[-1]]
        s = before.sites[i]
        print(f"{s['name']:36s} {fmt(s['uncorrected']):>10s} {fmt(s['first_order']):>16s} "
              f"{fmt(gap(before, i, out)):>12s}")
    with dt.corrected(model, x, scope="site") as m:
        after = dt.audit(m, x, sites=sites, seed=2)
        outs = C.norm_outputs(m, x, [s[-1] for s in sites])
    print("every site corrected, against the corrected model's own truth")
    print(f"{'site':36s} {'gap eval':>10s} {'1st-order bound':>16s} {'corrected':>12s}")
    for i, site in enumerate(sites):
        s = after.sites[i]
        print(f"{s['name']:36s} {fmt(s['uncorrected']):>10s} {fmt(s['first_order']):>16s} "
              f"{fmt(gap(after, i, outs[site[-1]])):>12s}")


if __name__ == "__main__":
    main()
