"""Which rows and norm calls the network audit covers
(:mod:`dropmc.audit.network`): the padded tokens it leaves out of a norm's
rows, and the functional norm calls it cannot audit (listed with why)."""

from __future__ import annotations

from typing import Dict, Optional

import numpy as _np

from ..model.calls import call_name, module_of

__all__ = ["FUNCTIONAL_NORMS", "FunctionalNorms", "kept_rows"]

#: The functional norms noted when called outside a norm module (listed, not audited).
FUNCTIONAL_NORMS = ("layer_norm", "rms_norm", "group_norm")


def kept_rows(norms_reached, kwargs, refs) -> Dict[str, Optional[_np.ndarray]]:
    """Per norm call, which of its rows are real tokens: the forward's
    ``attention_mask`` (``decoder_attention_mask`` under a ``decoder``
    module; :func:`dropmc.audit.capture_eval.token_mask_for`, the per-site audit's
    choice) when it has one entry per row, else None (every row counts)."""
    from .capture_eval import token_mask_for

    keep = {}
    for s in norms_reached:
        mask, rows = token_mask_for(s["module"], kwargs), refs[s["norm"]].shape[0]
        if hasattr(mask, "numel") and mask.numel() == rows:
            kept = (mask.reshape(-1) != 0).cpu().numpy()
            if not kept.any():
                raise ValueError(f"norm call {s['norm']!r}: every token is padding (attention_mask all 0)")
            keep[s["norm"]] = kept
        else:
            keep[s["norm"]] = None
    return keep


def _functional_norms():
    import torch.nn.functional as F

    return {f for f in (getattr(F, n, None) for n in FUNCTIONAL_NORMS) if f is not None}


class FunctionalNorms:
    """A ``TorchFunctionMode`` (built lazily: torch is imported late) that
    notes, in ``seen``, each functional norm call made outside the norm
    modules ``norm_modules`` (names), with its input's dropout dependencies."""

    def __new__(cls, trace, norm_modules, seen):
        from torch.overrides import TorchFunctionMode

        funcs = _functional_norms()

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                if func in funcs and trace.owner() not in norm_modules and args:
                    base = trace.functional_base(func.__name__)
                    k = sum(1 for c in seen if module_of(c) == base)
                    seen[call_name(base, k)] = trace.deps(args[0])
                return func(*args, **kwargs)

        return Mode()
