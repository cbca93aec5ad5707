"""Per-site gaps before and after dropmc.torch.correct(model, inputs, scope="site") on the
small Hugging Face models of python/tests/test_correct_hf.py (BERT, ESM,
T5 encoder, ViT from its builders, norm gains and shifts moved off their
init; GPT-2 the same at d = 256 in float64), with no
hand-named sites: per model the sites discovery found, the sites
corrected and the sites refused; per corrected site, one site at a time,
the uncorrected audit's eval gap (± its SE), its first-order bound and the
corrected output's gap to the same truth (the audit's RMS statistic, noise
subtracted). Prints markdown rows (docs/correct.md's tables) and the wall
time per model.

    python python/benchmarks/correct_hf_gaps.py
"""

import pathlib
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
torch.set_num_threads(1)
import test_correct_hf as T  # noqa: E402
from correct_checks import one_site_gap  # noqa: E402
from hf_models import build  # noqa: E402

import dropmc.audit as A  # noqa: E402
import dropmc.torch as dt  # noqa: E402


def main():
    for arch in ["bert", "esm", "t5", "vit", "gpt2"]:
        t0 = time.time()
        model = T._model(arch) if arch != "gpt2" else T._trained_like(build("gpt2", layers=2, d=256)).double().eval()
        x = T._inputs(arch)
        audit = A.audit_torch(model, x, seed=3)
        done = dt.correct(model, x, inplace=False, scope="site")._dropmc_correction
        print(f"## {arch}: {len(audit.discovery.sites)} sites found, {len(done.sites)} corrected, "
              f"refused {list(done.refused)}, skipped {list(done.skipped)}")
        for i, s in enumerate(audit.sites):
            gap = one_site_gap(model, x, audit, i)  # the site corrected alone, to the audit's truth
            u = s["uncorrected"]
            print(f"| {s['name']} | {u['rms']:.3g} ± {u['rms_se']:.2g} | {s['first_order']['upper']:.3g} | "
                  f"{gap:.3g} |")
        print(f"time {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
