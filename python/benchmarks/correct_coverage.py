"""Which sites ``dropmc.torch.correct(model, inputs, scope="site")`` (per-site scope, no other argument)
corrects and which it refuses, per architecture: a markdown table of
corrected / refused (with the reasons, counted) per model.

The models are the tests' tiny configs (random weights, no download):
BERT, DeBERTa-v2 (python/tests/hf_models.py), BART, Whisper, Falcon, BLOOM
(python/tests/test_correct_functional.py), ESMFold with one recycle
(hf_models.build_esmfold), Swin with hidden dropout 0.1 and drop-path 0.2 (attention dropout 0),
and a post-LN ``nn.TransformerEncoder``.

    python python/benchmarks/correct_coverage.py

To compare with another checkout, run it with that checkout's package
first on the path (``PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=<checkout>/python
python python/benchmarks/correct_coverage.py``); the models come from this
file's own test helpers either way.
"""

import collections
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import dropmc  # noqa: E402
import dropmc.torch as dt  # noqa: E402


def _hf(arch):
    import hf_models as H

    if arch == "deberta-v2":
        model, kw = H.build40(arch), H.inputs(arch)
    else:
        model, kw = H.build(arch), H.inputs(arch)
    return model, kw


def _functional(arch):
    import test_correct_functional as F

    return F.build(arch, d=64), F.inputs(arch, tokens=8)


def _esmfold():
    import hf_models as H

    ids = torch.randint(0, 20, (1, 12), generator=torch.Generator().manual_seed(3))
    return H.build_esmfold(), {"input_ids": ids, "num_recycles": 1}


def _swin():
    from correct_checks import build_swin

    return build_swin(0.1, 0.2)


def _encoder():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    return model, torch.randn(1, 8, 32, generator=torch.Generator().manual_seed(1))


MODELS = {
    "BERT": lambda: _hf("bert"), "BART": lambda: _functional("bart"), "Whisper": lambda: _functional("whisper"),
    "Falcon": lambda: _functional("falcon"), "BLOOM": lambda: _functional("bloom"), "ESMFold": _esmfold,
    "Swin": _swin, "DeBERTa-v2": lambda: _hf("deberta-v2"), "nn.TransformerEncoder": _encoder,
}


def _reason(text: str) -> str:
    """A refusal's kind (its first clause)."""
    return text.split(":")[0].split(";")[0][:60]


def row(name):
    model, kw = MODELS[name]()
    try:
        dt.correct(model, kw, scope="site")
    except ValueError as e:
        return f"| {name} | 0 | raised: {str(e)[:90]} |"
    c = model._dropmc_correction
    kinds = collections.Counter(_reason(r) for r in c.refused.values())
    refused = "; ".join(f"{n} × {k}" for k, n in kinds.items()) or "none"
    return f"| {name} | {len(c.sites) + len(c.folded)} | {len(c.refused)}: {refused} |"


def main():
    torch.set_num_threads(1)
    print(f"dropmc from {os.path.dirname(dropmc.__file__)}")
    print("| model | corrected | refused |\n|---|---|---|")
    for name in MODELS:
        print(row(name), flush=True)


if __name__ == "__main__":
    main()
