"""The dropout→BatchNorm pairs of one forward on example inputs, for
``correct(model, inputs)`` (issue 52: docs/correct.md says the BatchNorm
pairs are added with inputs; discovery reads LayerNorm/RMSNorm calls only).

:func:`traced_batchnorm_pairs` runs one eval-mode forward (no grad, the
model's mode restored) with a forward hook on every ``nn.Dropout`` module
that keeps its output and a forward pre-hook on every BatchNorm that asks
whether its input *is* one of those outputs: the pair is "dropout's output
goes straight into the BatchNorm", as the running-variance fold needs
(src/formulas/batchnorm.rs). In eval mode a dropout returns its input
object, so a BatchNorm fed by the same tensor a dropout was also given is
read as behind it: both see the same values in eval, and the fold is the
rule for the train-mode path through the dropout. No symbolic graph: the
forward's own calls, whatever its control flow.

Without inputs (``correct(model)``), :func:`sequential_batchnorm_pairs`
reads the only order a module states without running: an ``nn.Sequential``
calls its children one after the other, each on the previous one's output,
so an ``nn.Dropout`` followed by a BatchNorm among them (a nested
``nn.Sequential`` read as its children in order) is such a pair. A pair in
a hand-written ``forward`` is not seen without a forward: ``correct`` asks
for ``inputs``.
"""

from __future__ import annotations

from typing import List, Tuple

__all__ = ["traced_batchnorm_pairs", "sequential_batchnorm_pairs"]


def traced_batchnorm_pairs(model, args: tuple, kwargs: dict) -> List[Tuple[str, str]]:
    """``[(dropout module, batchnorm module), ...]`` in call order, each pair
    once (module docs)."""
    import torch.nn as nn

    modules = dict(model.named_modules())
    dropouts = {m: n for n, m in modules.items() if isinstance(m, nn.Dropout)}
    norms = {m: n for n, m in modules.items() if isinstance(m, nn.modules.batchnorm._BatchNorm)}
    if not dropouts or not norms:
        return []
    outputs: list = []  # (tensor kept alive so its identity stays unique, dropout name)
    pairs: List[Tuple[str, str]] = []

    def keep(module, inputs, output):
        outputs.append((output, dropouts[module]))

    def ask(module, inputs):
        for out, name in outputs:
            if inputs and inputs[0] is out and (name, norms[module]) not in pairs:
                pairs.append((name, norms[module]))

    from .inputs import eval_forward  # one eval forward, no grad, the mode restored

    handles = [m.register_forward_hook(keep) for m in dropouts] + \
        [m.register_forward_pre_hook(ask) for m in norms]
    try:
        eval_forward(model, args, kwargs)
    finally:
        for h in handles:
            h.remove()
    return pairs


def sequential_batchnorm_pairs(model) -> List[Tuple[str, str]]:
    """``[(dropout module, batchnorm module), ...]`` of the ``nn.Sequential``
    containers of ``model`` (module docs), in module order, each pair once."""
    import torch.nn as nn

    from .norms import norm_kind

    def leaves(prefix: str, seq) -> List[Tuple[str, object]]:
        out = []
        for child, m in seq.named_children():
            name = f"{prefix}.{child}" if prefix else child
            out += leaves(name, m) if isinstance(m, nn.Sequential) else [(name, m)]
        return out

    pairs: List[Tuple[str, str]] = []
    for prefix, seq in model.named_modules():
        if not isinstance(seq, nn.Sequential):
            continue
        run = leaves(prefix, seq)
        for (a, first), (b, second) in zip(run, run[1:]):
            if isinstance(first, nn.Dropout) and norm_kind(second) == "batch" and (a, b) not in pairs:
                pairs.append((a, b))
    return pairs
