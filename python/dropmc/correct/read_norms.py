"""``norm_outputs``: the outputs of named norm modules (or module calls) on one
eval forward, read by forward hooks registered after any correction's — what
the tests and benchmarks compare a corrected model by."""

from __future__ import annotations

from typing import Any, Dict, Sequence

from .sites import _call_index, _module_name


def norm_outputs(model, inputs, names: Sequence[str], **kwargs) -> Dict[str, Any]:
    """``{name: output}`` of the named modules or module calls
    (``name#k``, the k-th call) on one eval forward of the model on
    ``inputs`` (a tensor, a tuple of positional arguments or a dict of
    keyword ones, plus ``kwargs``), as float64 tensors. Forward hooks are
    registered after any correction's, so they read the corrected outputs.
    Grad stays enabled, as in the audit's capture: it keeps every fused
    path, which would skip the hooks, closed."""
    import torch

    from ..model.discovery import call_inputs

    modules = dict(model.named_modules())
    wanted: Dict[str, Dict[int, str]] = {}
    for n in names:
        wanted.setdefault(_module_name(n), {})[_call_index(n)] = n
    seen: dict = {}

    def record(module_name, by_index):
        calls = [0]

        def hook(module, args, out):
            k = calls[0]
            calls[0] += 1
            name = by_index.get(k)
            if name is None:
                return
            if name in seen:
                raise ValueError(f"{name!r} ran twice in one forward")
            seen[name] = out.detach().to(torch.float64).clone()

        return hook

    handles = [modules[m].register_forward_hook(record(m, by)) for m, by in wanted.items()]
    args, kw = call_inputs(inputs, kwargs)
    was_training = model.training
    model.eval()
    try:
        with torch.enable_grad():
            model(*args, **kw)
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    return seen
