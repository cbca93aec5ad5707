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
rule for the train-mode path through the dropout. No ``torch.fx``: the
forward's own calls, whatever its control flow.
"""

from __future__ import annotations

from typing import List, Tuple

__all__ = ["traced_batchnorm_pairs"]


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
